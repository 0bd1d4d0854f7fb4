/* libFuzzer target for the dpi pattern-file parser and the matcher
 * (make fuzz-dpi).
 *
 * Input: [flags][2-byte pattern text length L][L bytes of pattern file][stream].
 * A file that parses is compiled with a dense-row limit chosen by flags (so
 * the compact layout is exercised too); the stream is scanned in one piece and
 * in seeded random pieces, and when small enough checked against a naive
 * matcher.  A file that does not parse must say why as "fuzz:LINE: ...". */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hooks/hook_ac.h"
#include "hooks/hook_dpi.h"
#include "base/log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc, (void)argv;
  fs_log_level = FS_LOG_OFF;
  return 0;
}

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

static uint64_t scan(const struct fs_hook_ac *ac, const uint8_t *s, size_t len, uint32_t seed)
{
  uint32_t st = 0, nm;
  uint64_t c = 0;
  size_t off = 0;
  while (off < len) {
    size_t n = len - off;
    if (seed) {
      seed = seed * 1103515245u + 12345u;
      n = 1 + (seed >> 16) % 17;
      if (n > len - off)
        n = len - off;
    }
    size_t end = off + n;
    while (off < end) {
      size_t u = fs_hook_ac_scan(ac, &st, s + off, end - off, &nm);
      CHECK(u >= 1 && u <= end - off);
      off += u, c += nm;
    }
  }
  return c;
}

static uint64_t naive(const struct fs_hook_dpi_patterns *ps, const uint8_t *s, size_t len)
{
  uint64_t c = 0;
  for (uint32_t i = 0; i < ps->n; i++) {
    const struct fs_hook_ac_pattern *p = &ps->pat[i];
    int dup = 0;
    for (uint32_t j = 0; j < i && !dup; j++)
      dup = ps->pat[j].len == p->len && memcmp(ps->pat[j].p, p->p, p->len) == 0;
    for (size_t k = 0; !dup && k + p->len <= len; k++)
      c += memcmp(s + k, p->p, p->len) == 0;
  }
  return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 3)
    return 0;
  unsigned flags = data[0];
  size_t plen = (size_t)(data[1] | data[2] << 8);
  data += 3, size -= 3;
  if (plen > size)
    plen = size;
  const uint8_t *stream = data + plen;
  size_t slen = size - plen;
  struct fs_hook_dpi_patterns *ps = NULL;
  char err[256] = "";
  int rc = fs_hook_dpi_patterns_parse((const char *)data, plen, "fuzz", &ps, err, sizeof err);
  if (rc < 0) {
    CHECK(rc == -EINVAL && ps == NULL && strncmp(err, "fuzz:", 5) == 0);
    return 0;
  }
  size_t limits[4] = { 0, 1, 4096, 64 * 1024 };
  struct fs_hook_ac *ac;
  rc = fs_hook_ac_build(ps->pat, ps->n, limits[flags & 3], &ac);
  CHECK(rc == 0);
  uint64_t one = scan(ac, stream, slen, 0);
  CHECK(scan(ac, stream, slen, flags | 1) == one);
  if ((uint64_t)ps->n * slen < 2000000)
    CHECK(naive(ps, stream, slen) == one);
  fs_hook_ac_free(ac);
  fs_hook_dpi_patterns_free(ps);
  return 0;
}
