/* Socket options that change what a fabric must do (engine/sockopt.h). */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "base/lock.h"
#include "base/real.h"
#include "base/reason.h"
#include "engine/cutover.h"
#include "engine/overhang.h"
#include "engine/sockopt.h"
#include "engine/wait.h"
#include "fabric/chan.h"

/* Kernel TCP holds at most about the sender's SO_SNDBUF plus the receiver's
 * SO_RCVBUF of unread bytes; a ring holds its size.  Where either
 * application set one, the tx ring holds no more than the kernel would
 * (an unset one counts as Linux's initial tcp_wmem / tcp_rmem). */
#define FS_SOCKIO_SNDBUF_DEFAULT 16384u
#define FS_SOCKIO_RCVBUF_DEFAULT 131072u

void fs_sockopt_buf_cap(struct fs_conn *c, struct fs_chan *ch)
{
  /* peer_rcvbuf first, then sndbuf: a setsockopt that could not take the
   * tx lock stores sndbuf, then spoils peer_rcvbuf; either this reads the
   * new sndbuf or the next send sees the spoiled value and comes back. */
  uint32_t prcv = __atomic_load_n(&ch->peer->rcvbuf, __ATOMIC_ACQUIRE);
  __atomic_store_n(&c->peer_rcvbuf, prcv, __ATOMIC_SEQ_CST);
  uint32_t snd = __atomic_load_n(&c->sndbuf, __ATOMIC_SEQ_CST);
  uint64_t cap = 0;
  if (snd || prcv)
    cap = (uint64_t)(snd ? snd : FS_SOCKIO_SNDBUF_DEFAULT) + (prcv ? prcv : FS_SOCKIO_RCVBUF_DEFAULT);
  __atomic_store_n(&ch->tx.cap, cap >= ch->tx.size ? 0u : (uint32_t)cap, __ATOMIC_RELAXED);
}

void fs_sockopt_attach(struct fs_conn *c, struct fs_chan *ch)
{
  uint32_t rcv = __atomic_load_n(&c->rcvbuf, __ATOMIC_RELAXED);
  if (rcv)
    __atomic_store_n(&ch->me->rcvbuf, rcv, __ATOMIC_RELEASE); /* the peer's sender honours it */
  if (__atomic_load_n(&c->sndbuf, __ATOMIC_RELAXED))
    fs_sockopt_buf_cap(c, ch); /* nobody sends on it yet */
}

void fs_sockopt_set(struct fs_conn *c, int fd, int level, int name, const void *val, socklen_t len)
{
  /* SO_LINGER {1, 0}: close() aborts the connection with a reset. */
  if (level == SOL_SOCKET && name == SO_LINGER && len >= (socklen_t)sizeof(struct linger)) {
    const struct linger *l = val;
    c->linger_abort = l->l_onoff && l->l_linger == 0;
  }
  /* SO_SNDBUF / SO_RCVBUF: the fabric buffers no more than the kernel
   * would (fs_sockopt_buf_cap); the kernel's own (doubled) value counts. */
  if (level == SOL_SOCKET && (name == SO_SNDBUF || name == SO_RCVBUF || name == SO_SNDBUFFORCE ||
                              name == SO_RCVBUFFORCE)) {
    bool snd = name == SO_SNDBUF || name == SO_SNDBUFFORCE;
    int v = 0;
    socklen_t l = sizeof v;
    if (FS_REAL(getsockopt)(fd, SOL_SOCKET, snd ? SO_SNDBUF : SO_RCVBUF, &v, &l) == 0 && v > 0) {
      __atomic_store_n(snd ? &c->sndbuf : &c->rcvbuf, (uint32_t)v, __ATOMIC_SEQ_CST);
      struct fs_chan *ch = __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE);
      if (ch && !snd)
        __atomic_store_n(&ch->me->rcvbuf, (uint32_t)v, __ATOMIC_RELEASE);
      if (ch && snd && fs_lock_try(&c->txlock)) {
        fs_sockopt_buf_cap(c, ch);
        fs_unlock(&c->txlock);
      } else if (ch && snd) { /* a send in progress: its next send recomputes (no rcvbuf is UINT32_MAX) */
        __atomic_store_n(&c->peer_rcvbuf, UINT32_MAX, __ATOMIC_SEQ_CST);
      }
    }
  }
  /* SO_RCVLOWAT: the fabric's readiness and reads honour it too (the kernel
   * takes a negative value as INT_MAX and 0 as 1). */
  if (level == SOL_SOCKET && name == SO_RCVLOWAT && len >= (socklen_t)sizeof(int)) {
    int v = *(const int *)val;
    __atomic_store_n(&c->rcvlowat, v < 0 ? (uint32_t)INT32_MAX : v == 0 ? 1u : (uint32_t)v, __ATOMIC_RELAXED);
  }
  /* SO_RCVTIMEO / SO_SNDTIMEO (either time layout): as the kernel took
   * them, where this process knows them (engine/wait.h). */
  bool rcvt = name == SO_RCVTIMEO, sndt = name == SO_SNDTIMEO;
#if defined(SO_RCVTIMEO_NEW) && defined(SO_SNDTIMEO_NEW)
  rcvt = rcvt || name == SO_RCVTIMEO_NEW;
  sndt = sndt || name == SO_SNDTIMEO_NEW;
#endif
  if (level == SOL_SOCKET && (rcvt || sndt) && __atomic_load_n(&c->timeo[rcvt], __ATOMIC_RELAXED))
    __atomic_store_n(&c->timeo[rcvt], fs_wait_timeo(fd, rcvt ? SO_RCVTIMEO : SO_SNDTIMEO), __ATOMIC_RELAXED);
  if (level == IPPROTO_TCP && name == TCP_CORK && len >= (socklen_t)sizeof(int))
    c->cork_app = c->cork_kernel = *(const int *)val != 0;
  /* Urgent data has no place on a fabric: keep such a connection on TCP. */
  if (level == SOL_SOCKET && name == SO_OOBINLINE && !c->chan) {
    c->no_upgrade = true;
    fs_conn_set_state(c, fs_conn_state(c), FS_REASON_SOCKOPT);
  }
}

void fs_sockopt_inherit(struct fs_conn *c, const struct fs_conn *lc)
{
  c->sndbuf = __atomic_load_n(&lc->sndbuf, __ATOMIC_RELAXED);
  c->rcvbuf = __atomic_load_n(&lc->rcvbuf, __ATOMIC_RELAXED);
  for (int i = 0; i < 2; i++)
    c->timeo[i] = __atomic_load_n(&lc->timeo[i], __ATOMIC_RELAXED);
}

bool fs_sockopt_kernel_only(int level, int name, const void *val, socklen_t len)
{
  if (level != SOL_SOCKET)
    return false;
  bool on = val != NULL && len >= (socklen_t)sizeof(int) && *(const int *)val != 0;
  switch (name) {
  case SO_ZEROCOPY:
  case SO_TIMESTAMP_OLD:
  case SO_TIMESTAMPNS_OLD:
  case SO_TIMESTAMPING_OLD:
  case SO_TIMESTAMP_NEW:
  case SO_TIMESTAMPNS_NEW:
  case SO_TIMESTAMPING_NEW:
    return on;
  case SO_PEEK_OFF: /* -1 turns it off */
    return val != NULL && len >= (socklen_t)sizeof(int) && *(const int *)val >= 0;
  default:
    return false;
  }
}

/* TCP_CORK while tx is on a fabric: nothing goes out on TCP then, so the
 * kernel call buys nothing (nginx with tcp_nopush makes two per response:
 * a third of a worker's system calls).  The value is kept and given to the
 * kernel before the next send on TCP (fs_sockopt_cork_sync).  An uncork
 * still goes to a corked kernel: bytes sent on TCP before the SWITCH may
 * wait under it.  The tx lock is only tried: a send asleep holding it lets
 * this call through to the kernel, as without us. */
/* Sends go over a live fabric: TCP carries none of them, corked or not. */
static bool fs_sockopt_tx_on_fabric(struct fs_conn *c)
{
  return c->tx_flow == FS_FLOW_FABRIC && __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE) && !c->reverted;
}

bool fs_sockopt_set_here(struct fs_conn *c, int level, int name, const void *val, socklen_t len)
{
  if (level != IPPROTO_TCP || name != TCP_CORK || val == NULL || len < (socklen_t)sizeof(int) ||
      c->tx_flow != FS_FLOW_FABRIC || !fs_lock_try(&c->txlock))
    return false;
  bool on = *(const int *)val != 0, here = false;
  if (fs_sockopt_tx_on_fabric(c) && (on || !c->cork_kernel)) {
    c->cork_app = on;
    here = true;
  }
  fs_unlock(&c->txlock);
  return here;
}

void fs_sockopt_get(struct fs_conn *c, int level, int name, void *val, const socklen_t *len)
{
  int v = c->cork_app;
  if (level == IPPROTO_TCP && name == TCP_CORK && c->cork_app != c->cork_kernel && *len > 0)
    memcpy(val, &v, *len < (socklen_t)sizeof v ? (size_t)*len : sizeof v);
}

void fs_sockopt_cork_sync(struct fs_conn *c, int fd)
{
  if (fs_sockopt_tx_on_fabric(c))
    return;
  int saved = errno, v = c->cork_app;
  (void)FS_REAL(setsockopt)(fd, IPPROTO_TCP, TCP_CORK, &v, sizeof v);
  c->cork_kernel = c->cork_app; /* once: a socket that refuses it refuses it again */
  errno = saved;
}

void fs_sockopt_switch_push(struct fs_conn *c)
{
  if (!c->cork_kernel && !c->more_tcp)
    return;
  /* An uncork pushes what is queued (tcp_push_pending_frames), corked or
   * not: one call per upgrade, none for a connection that never corked. */
  int saved = errno, zero = 0;
  (void)FS_REAL(setsockopt)(c->fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof zero);
  c->cork_kernel = false;
  c->more_tcp = false;
  errno = saved;
}

int fs_sockopt_fionread(struct fs_conn *c, int fd, int *out)
{
  struct fs_chan *ch = fs_cutover_chan(c);
  if (!ch || c->rx_flow == FS_FLOW_EOF)
    return -ENOTSUP;
  size_t n;
  if (c->rx_flow == FS_FLOW_TCP) {
    /* The peer has switched (its SWITCH heads the ring): the TCP bytes due
     * before it, then the ring's.  The kernel's count alone said 0 with
     * the ring full until the next read popped the SWITCH.  Read without
     * the rx lock: a count as racy as the kernel's own. */
    uint64_t at;
    int k;
    size_t kept = fs_overhang_len(c); /* read past a SWITCH, due before the kernel's */
    bool sw = fs_cutover_switch_head(ch, &at) == 1;
    if (sw ? c->resync_rx : !kept)
      return -ENOTSUP;
    if (FS_REAL(ioctl)(fd, FIONREAD, &k) < 0)
      return -errno;
    uint64_t due = sw && at > c->tcp_rx ? at - c->tcp_rx : 0;
    if (sw && (uint64_t)k < due) {
      *out = k;
      return 0;
    }
    n = sw ? (size_t)due + fs_ring_readable_past_head(&ch->rx) : kept + (size_t)k;
  } else {
    n = fs_ring_readable(&ch->rx);
  }
  *out = n > 0x7fffffff ? 0x7fffffff : (int)n;
  return 0;
}
