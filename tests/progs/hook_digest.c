/* hook_digest: a test hook that records what it was shown.
 *
 *   FABSOCK_HOOKS='/path/hook_digest.so:DIR[,accept_delay_ms=N]'
 *
 * Per connection and direction it counts the bytes and calls it was handed
 * and keeps a CRC-32 of them, in order.  When the connection closes it
 * writes one line to DIR/digest.PID.FD:
 *
 *   send_bytes=N send_crc=X send_calls=N recv_bytes=N recv_crc=X recv_calls=N
 *
 * The integration test compares that with what the application sent and
 * received: equal byte counts and CRCs mean every byte was seen once, in
 * order.  It never closes a connection.  accept_delay_ms: open() takes that
 * long on an accepting end (like a dpi hook compiling a large pattern file):
 * the connection must still move to its fabric. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <fabsock/hook.h>

struct digest {
  char path[4096];
  uint64_t bytes[2], calls[2];
  uint32_t crc[2];
};

static uint32_t crc_tab[256];

__attribute__((constructor)) static void crc_init(void)
{
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
    crc_tab[i] = c;
  }
}

/* CRC-32 (IEEE), the same as tests/progs/common.c computes. */
static uint32_t crc32_update(uint32_t crc, const unsigned char *p, size_t n)
{
  crc = ~crc;
  while (n--)
    crc = crc_tab[(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return ~crc;
}

static int digest_open(const char *args, const struct fabsock_conn_info *ci, void **state)
{
  struct digest *d = calloc(1, sizeof *d);
  const char *opt = args ? strchr(args, ',') : NULL;
  unsigned delay = 0;
  if (d == NULL)
    return -ENOMEM;
  int dirlen = opt ? (int)(opt - args) : (int)(args ? strlen(args) : 0);
  if (dirlen == 0 || (opt && sscanf(opt, ",accept_delay_ms=%u", &delay) != 1) ||
      snprintf(d->path, sizeof d->path, "%.*s/digest.%d.%d", dirlen, args, (int)getpid(), ci->fd) >=
          (int)sizeof d->path) {
    free(d);
    return -EINVAL;
  }
  if (delay && ci->dir == FABSOCK_DIR_ACCEPT) {
    struct timespec ts = { delay / 1000, (long)(delay % 1000) * 1000000 };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
      ;
  }
  *state = d;
  return 0;
}

static int feed(struct digest *d, int dir, const void *buf, size_t len)
{
  d->bytes[dir] += len;
  d->calls[dir]++;
  d->crc[dir] = crc32_update(d->crc[dir], buf, len);
  return FABSOCK_HOOK_PASS;
}

static int digest_send(void *state, const void *buf, size_t len)
{
  return feed(state, 0, buf, len);
}

static int digest_recv(void *state, const void *buf, size_t len)
{
  return feed(state, 1, buf, len);
}

static void digest_close(void *state)
{
  struct digest *d = state;
  FILE *f = fopen(d->path, "w");
  if (f) {
    fprintf(f, "send_bytes=%llu send_crc=%08x send_calls=%llu recv_bytes=%llu recv_crc=%08x "
               "recv_calls=%llu\n",
            (unsigned long long)d->bytes[0], d->crc[0], (unsigned long long)d->calls[0],
            (unsigned long long)d->bytes[1], d->crc[1], (unsigned long long)d->calls[1]);
    fclose(f);
  }
  free(d);
}

static const struct fabsock_hook_ops ops = {
  .abi_version = FABSOCK_HOOK_ABI_VERSION,
  .name = "digest",
  .open = digest_open,
  .on_send = digest_send,
  .on_recv = digest_recv,
  .close = digest_close,
};

__attribute__((visibility("default")))
const struct fabsock_hook_ops *fabsock_hook_entry(void)
{
  return &ops;
}
