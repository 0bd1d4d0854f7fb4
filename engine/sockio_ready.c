/* Readiness of a fabric connection for poll, select and epoll (engine/sockio.h,
 * docs/design.md 1.5): the kernel's answer for the TCP socket merged with
 * the rings', moving rx over a SWITCH or back over a REVERT that heads the
 * ring, as a receive would; and what the TCP socket says of the peer's
 * life while the ring is empty. */
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#include "base/clock.h"
#include "base/real.h"

#include "base/lock.h"
#include "engine/cutover.h"
#include "engine/overhang.h"
#include "engine/sockio.h"

short fs_sockio_ready(struct fs_conn *c, struct fs_chan *ch, short want, short kernel, bool arm)
{
  short r = 0;
  /* Our tx still on TCP once the peer attached: switch now, unless a send
   * holds the lock, and say writable from the ring (armed below as such).
   * Else a sender waiting for the kernel's room (nginx, its sendfile having
   * filled the socket buffer) switched only once the kernel had drained a
   * third of it: a 20 MiB download's SWITCH came 0.5-4 ms after the
   * channel was up. */
  if (c->tx_flow == FS_FLOW_TCP && (want & POLLOUT) && __atomic_load_n(&ch->peer->attached, __ATOMIC_ACQUIRE) &&
      fs_lock_try(&c->txlock)) {
    fs_cutover_switch_tx(c, ch);
    fs_unlock(&c->txlock);
  }
  /* Arm first, then look: whatever the peer publishes after our look
   * finds the flag set and wakes us (Dekker with fs_chan_kick_*). */
  if (arm) {
    if (want & POLLIN)
      __atomic_store_n(&ch->rx.ctl->want_data, 1, __ATOMIC_RELAXED);
    if ((want & POLLOUT) && c->tx_flow == FS_FLOW_FABRIC)
      fs_ring_want_space(&ch->tx, fs_chan_tx_mark(ch));
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    ch->ops->arm(ch);
  }
  fs_chan_progress(ch);
  /* A SWITCH at the head with all TCP bytes read: move rx to the fabric now,
   * or a lone SWITCH would look like readable data. */
  if (c->rx_flow == FS_FLOW_TCP && !fs_ring_empty(&ch->rx) && fs_lock_try(&c->rxlock)) {
    (void)fs_cutover_rx_switch(c, ch);
    fs_unlock(&c->rxlock);
  }
  /* Likewise a REVERT with nothing before it (the peer's process exec'd or
   * passed the socket on): rx is back on TCP, and readable only when the
   * socket is.  Reported readable from the ring instead (its end closed
   * behind the REVERT), ssh's read found EAGAIN and gave up.  A reader
   * inside recv holds the lock: it reverts, and until then the socket
   * speaks for it below. */
  bool revert_head = c->rx_flow == FS_FLOW_FABRIC && fs_cutover_revert_head(ch);
  if (revert_head && fs_lock_try(&c->rxlock)) {
    if (c->rx_flow == FS_FLOW_FABRIC && fs_cutover_revert_head(ch))
      fs_cutover_rx_revert(c, ch);
    fs_unlock(&c->rxlock);
  }
  if (kernel & (POLLIN | POLLRDHUP | POLLHUP | POLLERR))
    __atomic_store_n(&c->tcp_news, true, __ATOMIC_RELAXED); /* fs_sockio_live_check asks */
  short dead = kernel & (POLLHUP | POLLERR);
  bool closed = fs_chan_peer_closed(ch);
  if (closed)
    fs_cutover_broken(c, ch, c->fd);
  /* The peer's FIN with its end open and our ring full: a poll-driven
   * sender waits for nothing else, so ask whether the peer died. */
  if (!closed && (kernel & POLLRDHUP) && c->tx_flow == FS_FLOW_FABRIC && fs_ring_space(&ch->tx) == 0)
    closed = fs_cutover_peer_died(c, ch);
  if (c->peer_dead) /* as after the kernel's reset: both ways down */
    dead |= POLLHUP | (c->reset_tx || c->reset_rx ? POLLERR : 0);
  switch (c->rx_flow) {
  case FS_FLOW_TCP:
    r |= kernel & (POLLIN | POLLRDNORM | POLLRDHUP | POLLPRI);
    if (fs_cutover_switch_due(c, ch) || fs_overhang_len(c))
      r |= POLLIN | POLLRDNORM;
    break;
  case FS_FLOW_FABRIC:
    if (fs_ring_data_ahead(&ch->rx, __atomic_load_n(&c->rcvlowat, __ATOMIC_RELAXED)) || (closed && !revert_head))
      r |= POLLIN | POLLRDNORM;
    else if (kernel & (POLLIN | POLLRDHUP))
      r |= POLLIN | POLLRDNORM | (kernel & POLLRDHUP); /* TCP closed first: the peer died */
    if ((closed && fs_ring_readable(&ch->rx) == 0) || ((want & POLLRDHUP) && fs_ring_eof_queued(&ch->rx)))
      r |= POLLRDHUP;
    break;
  default:
    r |= POLLIN | POLLRDNORM | POLLRDHUP;
    break;
  }
  if (fs_chan_peer_reverted(ch) && !c->peer_revert_done) {
    /* a re-send on the agent is pending: writable once it is done */
  } else if (c->tx_flow == FS_FLOW_FABRIC) {
    if (closed || fs_chan_tx_ready(ch))
      r |= POLLOUT | POLLWRNORM;
  } else {
    r |= kernel & (POLLOUT | POLLWRNORM);
  }
  r |= dead;
  return r;
}

/* The ring is empty and the fabric said nothing: what does TCP say?  The
 * peer's TCP socket closing before its fabric EOF means it died. */
ssize_t fs_sockio_liveness(int fd)
{
  char b;
  ssize_t r = FS_REAL(recv)(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  if (r == 0)
    return 0;
  if (r < 0 && errno != EAGAIN)
    return -errno;
  return -EAGAIN;
}

/* The ring is empty: does TCP say the peer went away?  Asked only when
 * something was seen on the TCP socket since (a poll, epoll or sleep of
 * ours reported it: c->tcp_news), or every FS_SOCKIO_LIVE_NS for a caller
 * that never waits: once a connection is on the fabric its TCP socket
 * carries nothing but the peer's FIN, and a peek per empty receive would be
 * a system call per message that kernel TCP does not make. */
#define FS_SOCKIO_LIVE_NS 10000000ull

ssize_t fs_sockio_live_check(struct fs_conn *c, int fd)
{
  uint64_t now = fs_clock_coarse_ns();
  if (!__atomic_load_n(&c->tcp_news, __ATOMIC_RELAXED) && now - c->live_ns < FS_SOCKIO_LIVE_NS)
    return -EAGAIN;
  __atomic_store_n(&c->tcp_news, false, __ATOMIC_RELAXED);
  c->live_ns = now;
  return fs_sockio_liveness(fd);
}
