/* libFuzzer target for the ring consumer facing a hostile producer
 * (make fuzz-ring).  A peer of another user shares our rx ring and may
 * write anything into its data and control words at any moment: every
 * consumer call must stay inside the ring and the caller's buffers, end,
 * and never hand out more than asked.
 *
 * Input: [1: log2 size - 6, mod 5; bit 7: the honest producer keeps a
 * window of a quarter of the ring (SKIP records)][then ops, each 1 opcode
 * byte + args]:
 *   0 ctl:  8-byte tail, 8-byte head (the peer scribbles both, and from
 *           their bits its want_space and space_at)
 *   1 data: 2-byte offset, 1-byte n, n bytes written into the ring data
 *   2 put:  an honest producer appends DATA of 1-byte length
 *   3 get:  2-byte max, 1-byte skip, peek bit: fs_ring_get_data into 3 iovs
 *   4 peek/pop of a control record; 5 readable, eof_queued, data_queued
 *   6 ctl:  an honest producer appends SWITCH/REVERT/EOF */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include "fabric/ring.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

static size_t take(const uint8_t **p, const uint8_t *end, void *out, size_t n)
{
  size_t k = (size_t)(end - *p) < n ? (size_t)(end - *p) : n;
  memset(out, 0, n);
  memcpy(out, *p, k);
  *p += k;
  return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1)
    return 0;
  const uint8_t *p = data, *end = data + size;
  uint32_t rsize = 64u << (*p % 5); /* 64 .. 1024: small rings wrap often */
  uint32_t win = (*p++ & 0x80) ? rsize / 4 : 0;
  static uint8_t buf[1024];
  static struct fs_ring_ctl ctl;
  memset(&ctl, 0, sizeof ctl);
  memset(buf, 0, sizeof buf);
  ctl.size = rsize;
  struct fs_ring r = { .ctl = &ctl, .data = buf, .size = rsize, .win = win };
  uint8_t a[100], b[7], c[300], src[256];
  for (int i = 0; i < (int)sizeof src; i++)
    src[i] = (uint8_t)i;
  while (p < end) {
    uint8_t op = *p++ % 7;
    switch (op) {
    case 0: {
      uint64_t t, h;
      take(&p, end, &t, 8);
      take(&p, end, &h, 8);
      ctl.tail = t;
      ctl.head = h;
      ctl.want_space = (uint32_t)(t >> 62);
      ctl.space_at = (uint32_t)(h >> 32);
      break;
    }
    case 1: {
      uint16_t off;
      uint8_t n;
      take(&p, end, &off, 2);
      take(&p, end, &n, 1);
      for (uint32_t i = 0; i < n && p < end; i++)
        buf[(off + i) % rsize] = *p++;
      break;
    }
    case 2: {
      uint8_t n;
      take(&p, end, &n, 1);
      struct iovec iov = { src, n };
      size_t room = fs_ring_space_for(&r, n);
      size_t put = fs_ring_put_data(&r, &iov, 1, 0, n);
      CHECK(put <= n && put <= room);
      if (!put) /* a producer about to sleep (its peer's head is anything) */
        fs_ring_want_space(&r, n);
      break;
    }
    case 3: {
      uint16_t max;
      uint8_t skip, pk;
      take(&p, end, &max, 2);
      take(&p, end, &skip, 1);
      take(&p, end, &pk, 1);
      struct iovec iov[3] = { { a, sizeof a }, { b, sizeof b }, { c, sizeof c } };
      size_t cap = sizeof a + sizeof b + sizeof c;
      size_t sk = skip % cap;
      size_t mx = max % (cap - sk + 1);
      ssize_t n = fs_ring_get_data(&r, iov, 3, sk, mx, pk & 1);
      CHECK(n == -EPROTO || (n >= 0 && (size_t)n <= mx));
      if (fs_ring_room_reached(&r)) /* the wake a consumer owes: once */
        CHECK(ctl.want_space == 0);
      break;
    }
    case 4: {
      uint32_t t, l;
      uint64_t v;
      int rc = fs_ring_peek(&r, &t, &l, &v);
      CHECK(rc == 0 || rc == 1 || rc == -EPROTO);
      if (rc == 1) {
        CHECK(l <= rsize);
        if (t != FS_REC_DATA)
          fs_ring_pop(&r);
      }
      break;
    }
    case 5:
      CHECK(fs_ring_readable(&r) <= (size_t)rsize);
      (void)fs_ring_eof_queued(&r);
      (void)fs_ring_data_queued(&r);
      (void)fs_ring_empty(&r);
      break;
    case 6: {
      uint8_t t;
      take(&p, end, &t, 1);
      (void)fs_ring_put_ctl(&r, FS_REC_SWITCH + t % 3, t);
      break;
    }
    }
  }
  return 0;
}
