/* Throughput of the inline hooks on one core (not a test; run by hand):
 *
 *   tests/perf_dpi [MiB]       (default 256)
 *
 * dpi: 1000 random patterns of 4..32 random bytes over MiB of random bytes,
 * and (a harder case that defeats the skip table) 1000 random lowercase words
 * of 4..12 letters over random lowercase text.  frame: len32be frames of a
 * few sizes, and 80-byte lines.  Data goes through fs_hook_recv in 64 KiB
 * chunks, the way the data path calls it.  MB = 10^6 bytes; times are the
 * thread's CPU time (best of 3), so a busy machine skews them less. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hooks/hook.h"

#define CHUNK 65536

static uint64_t seed = 0x1234567;

static uint64_t rnd(void)
{
  seed ^= seed >> 12;
  seed ^= seed << 25;
  seed ^= seed >> 27;
  return seed * 2685821657736338717ull;
}

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* per core, robust to a busy host */
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Feed len bytes in CHUNK pieces, best of 3; returns seconds. */
static double run(const char *spec, const uint8_t *buf, size_t len, uint64_t *matches,
                  uint64_t *msgs)
{
  double best = 1e9;
  for (int rep = 0; rep < 3; rep++) {
    struct fs_hookset *hs;
    struct fs_stat_conn st = { 0 };
    if (fs_hook_open(spec, NULL, &st, &hs) < 0) {
      fprintf(stderr, "cannot open %s\n", spec);
      exit(1);
    }
    double t0 = now();
    for (size_t off = 0; off < len; off += CHUNK)
      if (fs_hook_recv(hs, buf + off, len - off < CHUNK ? len - off : CHUNK) != 0) {
        fprintf(stderr, "hook closed the stream\n");
        exit(1);
      }
    double t = now() - t0;
    if (t < best)
      best = t;
    if (matches)
      *matches = fs_hook_dpi_matches(hs);
    if (msgs)
      *msgs = st.rx_msgs;
    fs_hook_close(hs);
  }
  return best;
}

static void dpi(const char *what, uint8_t *buf, size_t len, int text)
{
  char path[] = "/tmp/perf_dpi.XXXXXX", spec[128];
  int fd = mkstemp(path);
  FILE *f = fdopen(fd, "w");
  for (int i = 0; i < 1000; i++) {
    int n = text ? 4 + (int)(rnd() % 9) : 4 + (int)(rnd() % 29);
    for (int j = 0; j < n; j++)
      if (text)
        fputc('a' + (int)(rnd() % 26), f);
      else
        fprintf(f, "\\x%02x", (unsigned)(rnd() & 0xff));
    fputc('\n', f);
  }
  fclose(f);
  for (size_t i = 0; i < len; i++)
    buf[i] = text ? (uint8_t)('a' + rnd() % 26) : (uint8_t)rnd();
  snprintf(spec, sizeof spec, "dpi:patterns=%s,action=count", path);
  uint64_t m;
  double t = run(spec, buf, len, &m, NULL);
  printf("dpi   %-38s %8.0f MB/s  (%llu matches)\n", what, (double)len / t / 1e6,
         (unsigned long long)m);
  unlink(path);
}

static void frame(const char *spec, const char *what, uint8_t *buf, size_t len, size_t payload)
{
  size_t o = 0;
  uint64_t frames = 0;
  if (payload == 0) { /* lines of 80 bytes */
    for (; o + 81 <= len; frames++, o += 81) {
      memset(buf + o, 'x', 80);
      buf[o + 80] = '\n';
    }
  } else {
    for (; o + 4 + payload <= len; frames++, o += 4 + payload) {
      buf[o] = (uint8_t)(payload >> 24), buf[o + 1] = (uint8_t)(payload >> 16);
      buf[o + 2] = (uint8_t)(payload >> 8), buf[o + 3] = (uint8_t)payload;
    }
  }
  uint64_t msgs;
  double t = run(spec, buf, o, NULL, &msgs);
  if (msgs != frames)
    fprintf(stderr, "frame: counted %llu of %llu\n", (unsigned long long)msgs, (unsigned long long)frames);
  printf("frame %-38s %8.0f MB/s  %6.3f ns/byte  %6.1f ns/frame\n", what, (double)o / t / 1e6,
         t * 1e9 / (double)o, t * 1e9 / (double)frames);
}

int main(int argc, char **argv)
{
  size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
  size_t len = mib << 20;
  uint8_t *buf = malloc(len);
  if (buf == NULL || len == 0)
    return 1;
  printf("%zu MiB through fs_hook_recv in %d-byte chunks, best of 3\n", mib, CHUNK);
  dpi("1000 random byte patterns, random data", buf, len, 0);
  dpi("1000 lowercase words, lowercase text", buf, len, 1);
  frame("frame:header=len32be", "len32be, 64-byte frames", buf, len, 64);
  frame("frame:header=len32be", "len32be, 1500-byte frames", buf, len, 1500);
  frame("frame:header=len32be,max=1M", "len32be, 64 KiB frames", buf, len, 65536);
  frame("frame:header=line,max=100", "lines of 80 bytes", buf, len, 0);
  free(buf);
  return 0;
}
