/* TCP bytes read past the peer's SWITCH (engine/overhang.h). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "engine/cutover.h"
#include "engine/overhang.h"

/* Copy between a flat buffer and iov's bytes [skip, skip + len). */
static void fs_overhang_iov_copy(const struct iovec *iov, int cnt, size_t skip, void *buf, size_t len, bool to_iov)
{
  char *b = buf;
  for (int i = 0; i < cnt && len; i++) {
    size_t l = iov[i].iov_len;
    if (skip >= l) {
      skip -= l;
      continue;
    }
    size_t k = l - skip < len ? l - skip : len;
    char *p = (char *)iov[i].iov_base + skip;
    if (to_iov)
      memcpy(p, b, k);
    else
      memcpy(b, p, k);
    b += k;
    len -= k;
    skip = 0;
  }
}

ssize_t fs_overhang_split(struct fs_conn *c, struct fs_chan *ch, struct fs_io *io, size_t skip, size_t r,
                          bool peek)
{
  uint64_t n;
  fs_chan_progress(ch);
  if (fs_cutover_switch_head(ch, &n) != 1 || c->tcp_rx + r <= n)
    return (ssize_t)r; /* the common case: no SWITCH, or all of them before it */
  if (c->tcp_rx > n) /* an earlier read went past it unseen (a settle that ran out) */
    return fs_cutover_read_past(c, c->fd, n);
  size_t keep = (size_t)(n - c->tcp_rx), past = r - keep;
  if (!peek) {
    /* One keeping at a time: a sender goes back to TCP once and never
     * switches again (engine/cutover.c), so nothing more can be kept. */
    char *b = c->ovh_len ? NULL : malloc(past);
    if (!b) {
      fs_log(FS_LOG_WARN, "fd %d: no memory to keep %zu tcp bytes read past the peer's switch", c->fd, past);
      return fs_cutover_read_past(c, c->fd, n);
    }
    fs_overhang_iov_copy(io->iov, io->iovcnt, skip + keep, b, past, false);
    c->ovh = b;
    c->ovh_off = 0;
    __atomic_store_n(&c->ovh_len, past, __ATOMIC_RELEASE);
  }
  fs_log(FS_LOG_INFO, "fd %d: %zu tcp bytes read past the peer's switch (at %llu) kept for after its ring",
         c->fd, past, (unsigned long long)n);
  return (ssize_t)keep;
}

size_t fs_overhang_take(struct fs_conn *c, struct fs_io *io, size_t skip, size_t want, bool peek)
{
  size_t len = c->ovh_len, k = len < want ? len : want;
  fs_overhang_iov_copy(io->iov, io->iovcnt, skip, c->ovh + c->ovh_off, k, true);
  if (peek)
    return k;
  c->tcp_rx += k;
  if (k < len) {
    c->ovh_off += k;
    __atomic_store_n(&c->ovh_len, len - k, __ATOMIC_RELEASE);
  } else {
    fs_overhang_free(c);
  }
  return k;
}

void fs_overhang_free(struct fs_conn *c)
{
  __atomic_store_n(&c->ovh_len, 0, __ATOMIC_RELEASE);
  free(c->ovh);
  c->ovh = NULL;
  c->ovh_off = 0;
}
