/* The cutover rules.  See engine/cutover.h. */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "base/clock.h"
#include "base/fdreg.h"
#include "base/log.h"
#include "base/real.h"
#include "engine/agent.h"
#include "engine/cutover.h"
#include "engine/fdtab.h"
#include "engine/wake.h"
#include "engine/sockopt.h"

/* No upgrade any more; stat shows tcp with reason. */
static void fs_cutover_stay_tcp(struct fs_conn *c, int reason)
{
  c->no_upgrade = true;
  fs_conn_set_state(c, FS_STATE_TCP, reason);
  if (c->stat)
    c->stat->fabric = FS_FABRIC_TCP;
}

void fs_cutover_tcp_for_good(struct fs_conn *c, int reason)
{
  c->reverted = true;
  if (c->tx_flow != FS_FLOW_EOF)
    c->tx_flow = FS_FLOW_TCP;
  if (c->rx_flow != FS_FLOW_EOF)
    c->rx_flow = FS_FLOW_TCP;
  fs_cutover_stay_tcp(c, reason);
}

void fs_cutover_tx_back(struct fs_conn *c, int reason)
{
  c->tx_back = true;
  fs_cutover_stay_tcp(c, reason);
}

struct fs_chan *fs_cutover_chan(struct fs_conn *c)
{
  return fs_cutover_chan_known(c, true);
}


/* ---- counts from the kernel (a connection others held too) ----------- */

/* struct tcp_info (linux/tcp.h) as the kernel fills it: ABI since 4.1. */
#define FS_TI_STATE 0
#define FS_TI_BYTES_ACKED 120
#define FS_TI_BYTES_RECEIVED 128
#define FS_TI_LEN 136

static int fs_cutover_tcp_info(int fd, uint8_t *state, uint64_t *acked, uint64_t *received)
{
  unsigned char ti[256];
  socklen_t len = sizeof ti;
  if (FS_REAL(getsockopt)(fd, IPPROTO_TCP, TCP_INFO, ti, &len) < 0 || len < FS_TI_LEN)
    return -EPROTO;
  *state = ti[FS_TI_STATE];
  memcpy(acked, ti + FS_TI_BYTES_ACKED, sizeof *acked);
  memcpy(received, ti + FS_TI_BYTES_RECEIVED, sizeof *received);
  return 0;
}

/* One direction's kernel count (tx: bytes acknowledged, rx: bytes
 * received) and its socket queue (SIOCOUTQ / SIOCINQ), taken together.
 * Two calls are no snapshot: an ACK or a segment landing between them is
 * in one and not the other, so the pair is taken again until the count
 * held still around the queue's size.  0, -EPROTO (no answer), -EAGAIN
 * (still moving after 100 tries: the caller tries again later). */
static int fs_cutover_steady(int fd, bool tx, uint8_t *st, uint64_t *count, int *queue)
{
  for (int i = 0; i < 100; i++) {
    uint64_t acked, rcvd, acked2, rcvd2;
    if (fs_cutover_tcp_info(fd, st, &acked, &rcvd) < 0 || FS_REAL(ioctl)(fd, tx ? SIOCOUTQ : SIOCINQ, queue) < 0 ||
        *queue < 0 || fs_cutover_tcp_info(fd, st, &acked2, &rcvd2) < 0)
      return -EPROTO;
    if (tx ? acked == acked2 : rcvd == rcvd2) {
      *count = tx ? acked : rcvd;
      return 0;
    }
  }
  return -EAGAIN;
}

/* What every holder ever wrote on an accepted socket: acknowledged bytes
 * plus what waits in the send queue (its SYN-ACK is not counted; a FIN
 * would be, but a shut-down direction never switches).  txlock held, and
 * we alone hold the socket (fs_sock_may_attach): nobody adds to it now. */
static bool fs_cutover_resync_tx(struct fs_conn *c)
{
  uint8_t st;
  uint64_t acked;
  int outq = 0;
  if (fs_cutover_steady(c->fd, true, &st, &acked, &outq) < 0 || (st != TCP_ESTABLISHED && st != TCP_CLOSE_WAIT))
    return false; /* our FIN went out (another holder shut it down), no answer, or still moving */
  c->tcp_tx = acked + (uint64_t)outq;
  c->resync_tx = false;
  return true;
}

void fs_cutover_resync_rx(struct fs_conn *c)
{
  uint8_t st;
  uint64_t rcvd;
  int inq = 0;
  if (fs_cutover_steady(c->fd, false, &st, &rcvd, &inq) < 0) {
    fs_log(FS_LOG_WARN, "fd %d: no steady byte count from the kernel; trying again", c->fd);
    return;
  }
  /* The peer's FIN counts one in bytes_received, never in the queue. */
  bool fin = st == TCP_CLOSE_WAIT || st == TCP_LAST_ACK || st == TCP_CLOSING || st == TCP_TIME_WAIT ||
             st == TCP_CLOSE;
  c->tcp_rx = rcvd - (uint64_t)inq - (fin ? 1u : 0u);
  c->resync_rx = false;
}

/* Another holder of our end since fork wrote the SWITCH (our copy of the
 * flow state is the fork's): tx is on the fabric; a second SWITCH would
 * break the stream, and our close's EOF goes in the ring. */
static bool fs_cutover_tx_adopt(struct fs_conn *c, struct fs_chan *ch)
{
  if (!c->fork_shared || c->tx_flow != FS_FLOW_TCP || c->reverted || c->tx_back || c->peer_revert_done ||
      fs_chan_peer_reverted(ch) || __atomic_load_n(&ch->me->reverted, __ATOMIC_ACQUIRE) ||
      !fs_ring_produced(&ch->tx))
    return false;
  /* The other copy shut our direction down (EOF queued): so have we. */
  c->tx_flow = fs_ring_eof_queued(&ch->tx) ? FS_FLOW_EOF : FS_FLOW_FABRIC;
  return true;
}

void fs_cutover_switch_tx(struct fs_conn *c, struct fs_chan *ch)
{
  if (c->resync_tx && c->tx_flow == FS_FLOW_TCP && !fs_cutover_resync_tx(c))
    return; /* no count, no SWITCH: tx stays on TCP (the peer reads it there) */
  if (c->tx_flow != FS_FLOW_TCP || c->shut_wr || c->reverted || c->tx_back || c->peer_revert_done ||
      fs_chan_peer_reverted(ch) ||
      !__atomic_load_n(&ch->peer->attached, __ATOMIC_ACQUIRE))
    return; /* never onto the fabric again once either end went back to TCP */
  if (fs_cutover_tx_adopt(c, ch))
    return;
  if (fs_ring_put_ctl(&ch->tx, FS_REC_SWITCH, c->tcp_tx) == 0) {
    c->tx_flow = FS_FLOW_FABRIC;
    /* nginx (tcp_nopush) corks: its last TCP bytes held 200 ms, and a 200
     * MiB download took 5x as long as on TCP. */
    fs_sockopt_switch_push(c);
    fs_chan_kick_data(ch);
  }
}


/* A SWITCH, then a REVERT within the same send (its first record cut short
 * by the window of a ring that cannot grow: cramped) put our next bytes on
 * TCP right behind the SWITCH's, on another path: a receiver still on TCP
 * that had not seen the SWITCH read them first, and the ring's bytes after
 * them (t2_hosts memlock: an echo 3816 bytes out of place, 2 runs in 100,
 * its ring cramped since the peer's key came).  So a send the window
 * cannot hold takes no SWITCH onto a ring already cramped.  Where the ring
 * turns cramped within the switching send itself, or soon after it, the
 * REVERT is settled before the TCP bytes (fs_sock_revert_tx), and a
 * receiver that read them keeps them aside (engine/overhang.h). */
void fs_cutover_switch_for(struct fs_conn *c, struct fs_chan *ch, size_t want)
{
  if (c->tx_flow != FS_FLOW_TCP || c->tx_back)
    return;
  if (__builtin_expect(fs_chan_cramped(ch), 0) && !c->fork_shared && fs_ring_win_short(&ch->tx, want)) {
    fs_cutover_tx_back(c, FS_REASON_RESOURCES);
    fs_log(FS_LOG_INFO, "fd %d stays on tcp (resources: its ring cannot grow)", c->fd);
    return;
  }
  fs_cutover_switch_tx(c, ch);
}

int fs_cutover_read_past(struct fs_conn *c, int fd, uint64_t n)
{
  fs_log(FS_LOG_WARN, "fd %d: tcp bytes read past the peer's switch (%llu of its %llu); resetting", fd,
         (unsigned long long)c->tcp_rx, (unsigned long long)n);
  fs_cutover_reset_tcp(fd);
  return -ECONNRESET;
}

void fs_cutover_tx_revert(struct fs_conn *c, struct fs_chan *ch)
{
  if (c->tx_flow == FS_FLOW_FABRIC && fs_ring_put_ctl(&ch->tx, FS_REC_REVERT, c->fab_tx) == 0)
    c->tx_flow = FS_FLOW_TCP;
}

void fs_cutover_tx_eof(struct fs_conn *c, struct fs_chan *ch)
{
  (void)fs_cutover_tx_adopt(c, ch);
  if (c->tx_flow == FS_FLOW_FABRIC) {
    (void)fs_ring_put_ctl(&ch->tx, FS_REC_EOF, 0);
    c->tx_flow = FS_FLOW_EOF;
  }
}

#define FS_CUTOVER_ALIVE_NS 20000000ull /* how long "alive" is believed */

bool fs_cutover_peer_died(struct fs_conn *c, struct fs_chan *ch)
{
  if (c->peer_dead)
    return true;
  if (fs_chan_peer_closed(ch) || fs_ring_eof_queued(&ch->rx))
    return false;
  uint64_t now = fs_clock_coarse_ns();
  if (c->alive_ns && now - c->alive_ns < FS_CUTOVER_ALIVE_NS)
    return false;
  if (!ch->ops->peer_gone(ch, (struct sockaddr *)&c->local, (struct sockaddr *)&c->peer)) {
    c->alive_ns = now ? now : 1;
    return false;
  }
  bool unread = fs_ring_data_queued(&ch->tx);
  c->peer_dead = true;
  c->reset_tx = c->reset_rx = unread;
  __atomic_store_n(&ch->peer->closed, 1, __ATOMIC_RELEASE); /* nobody else will */
  fs_log(FS_LOG_INFO, "fd %d: the peer's process is gone (%s)", c->fd, unread ? "reset" : "closed");
  fs_wake_own(c); /* our other direction may be waiting */
  return true;
}

void fs_cutover_reset_tcp(int fd)
{
  struct sockaddr sa = { .sa_family = AF_UNSPEC };
  int saved = errno;
  FS_REAL(connect)(fd, &sa, sizeof sa);
  errno = saved;
}

void fs_cutover_broken(struct fs_conn *c, struct fs_chan *ch, int fd)
{
  if (c->peer_dead || !fs_chan_broken(ch))
    return;
  c->peer_dead = true;
  c->reset_tx = c->reset_rx = true;
  fs_log(FS_LOG_INFO, "fd %d: the %s channel broke (tcp_tx %llu fab_tx %llu); resetting", fd, ch->ops->name,
         (unsigned long long)c->tcp_tx, (unsigned long long)c->fab_tx);
  fs_cutover_reset_tcp(fd);
  fs_wake_own(c); /* our other direction may be waiting */
}

void fs_cutover_last_close(struct fs_conn *c, struct fs_chan *ch, int abort_fd)
{
  if (fs_chan_unref(ch)) {
    if (abort_fd >= 0) {
      /* An abort: no EOF; the kernel resets the connection now (as the
       * close with SO_LINGER {1, 0} would, a moment later), so the peer
       * finds the reset on TCP when it finds our end closed. */
      fs_cutover_reset_tcp(abort_fd);
    } else {
      fs_cutover_tx_eof(c, ch);
    }
    fs_chan_close_end(ch);
  }
  c->tx_flow = FS_FLOW_EOF;
}

/* Write everything still unread in our tx ring to TCP (the peer stopped
 * reading the ring: fs_sock_downgrade on its side), then stay on TCP. */
static int fs_cutover_resend(struct fs_conn *c, int fd, struct fs_chan *ch)
{
  char buf[16384];
  for (;;) {
    struct iovec v = { buf, sizeof buf };
    /* Read the peer's unconsumed DATA as if we were its consumer: its head
     * is frozen, and we advance it ourselves as we re-send. */
    ssize_t n = fs_ring_get_data(&ch->tx, &v, 1, 0, sizeof buf, false);
    if (n <= 0) {
      uint32_t t, l;
      uint64_t val;
      if (n == 0 && fs_ring_peek(&ch->tx, &t, &l, &val) == 1 && t != FS_REC_DATA) {
        fs_ring_pop(&ch->tx); /* our own SWITCH/EOF marks: TCP needs none */
        continue;
      }
      break;
    }
    size_t off = 0;
    while (off < (size_t)n) {
      ssize_t w = FS_REAL(send)(fd, buf + off, (size_t)n - off, MSG_NOSIGNAL);
      if (w < 0 && errno == EAGAIN) {
        struct pollfd p = { fd, POLLOUT, 0 };
        int cs; /* not cancelled here with txlock held (engine/cancel.h) */
        (void)pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
        FS_REAL(poll)(&p, 1, 1000);
        (void)pthread_setcancelstate(cs, NULL);
        continue;
      }
      if (w < 0)
        return -errno;
      off += (size_t)w;
      c->tcp_tx += (uint64_t)w;
    }
  }
  return 0;
}

/* Answer the peer's revert on fd (-1: none names c any more; txlock held):
 * our unread ring bytes, then the FIN if our tx was at EOF; c stays on TCP. */
static void fs_cutover_resend_on(struct fs_conn *c, struct fs_chan *ch, int fd)
{
  int was = c->tx_flow;
  if (was != FS_FLOW_TCP && fd >= 0)
    (void)fs_cutover_resend(c, fd, ch);
  if (c->tx_back && fd >= 0 && !c->peer_dead && fs_ring_data_queued(&ch->tx)) {
    /* Our tx went back first (fs_sock_revert_tx) and TCP carries bytes
     * behind its REVERT: what the peer left unread before it can no longer
     * come first.  Never a gap in the stream: the kernel's reset, as for
     * a broken channel. */
    c->peer_dead = true;
    c->reset_tx = c->reset_rx = true;
    fs_log(FS_LOG_WARN, "fd %d: the peer went back to tcp with bytes of ours unread behind our own "
           "revert; resetting", fd);
    fs_cutover_reset_tcp(fd);
    fs_wake_own(c);
  }
  if (was == FS_FLOW_EOF && fd >= 0)
    FS_REAL(shutdown)(fd, SHUT_WR);
  c->tx_flow = was == FS_FLOW_EOF ? FS_FLOW_EOF : FS_FLOW_TCP;
  c->no_upgrade = true;
  __atomic_store_n(&c->peer_revert_done, true, __ATOMIC_RELEASE);
  /* What stat shows: what the ring still holds for us is read first, the
   * rest comes on TCP.  An end that went back itself meanwhile (both ends
   * spliced) keeps its own reason: txlock orders us after it. */
  if (!c->reverted && !c->tx_back && fs_conn_state(c) != FS_STATE_CLOSED) {
    fs_conn_set_state(c, FS_STATE_TCP, FS_REASON_PEER_TCP);
    if (c->stat)
      c->stat->fabric = FS_FABRIC_TCP;
  }
  fs_log(FS_LOG_INFO, "fd %d: peer went back to tcp", fd);
}

/* The peer stopped reading its rx ring (it downgraded): our unread ring
 * bytes must go again on TCP before anything new.  That can block for as
 * long as the peer's new image takes to read, so it runs on the agent
 * thread (fs_cutover_resend_job), which holds our tx lock meanwhile. */
void fs_cutover_service(struct fs_conn *c, int fd)
{
  /* Nothing to answer, the common case, in three loads; callers just took
   * the peer's news in. */
  struct fs_chan *ch = __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE);
  if (!ch || !fs_chan_peer_reverted(ch) || c->peer_revert_done ||
      fs_cutover_chan_known(c, false) != ch)
    return;
  if (!__atomic_load_n(&c->resend_queued, __ATOMIC_ACQUIRE)) {
    c->resend_fd = fd; /* before the job can run; a racing caller names c too */
    fs_cutover_resend_queue(c);
  }
}

bool fs_cutover_close_resend(struct fs_conn *c, struct fs_chan *ch, int fd)
{
  if (fd < 0 || !fs_chan_peer_reverted(ch) || c->peer_revert_done || c->resend_own)
    return false;
  int dfd = FS_FDREG_MAKE(FS_REAL(fcntl)(fd, F_DUPFD_CLOEXEC, 0));
  if (dfd < 0) { /* no descriptor to spare: the bytes go now, close waits */
    fs_cutover_resend_on(c, ch, fd);
    return false;
  }
  c->resend_dup = dfd;
  c->resend_own = true;
  return true;
}

void fs_cutover_resend_queue(struct fs_conn *c)
{
  bool expect = false;
  if (__atomic_compare_exchange_n(&c->resend_queued, &expect, true, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
    fs_agent_run(c, fs_cutover_resend_job);
}

void fs_cutover_resend_job(struct fs_conn *c)
{
  struct fs_chan *ch = __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE);
  fs_lock(&c->txlock);
  if (ch && !c->peer_revert_done) {
    /* The fd named when the job was queued may be closed by now and its
     * number another socket's: a client's next connection got our
     * SHUT_WR, and its server child read an early EOF (t_rdma_integration,
     * forksrv).  Only an fd that still names c is written; with none, the
     * application closed it and nothing can go anywhere.  txlock: c's last
     * close waits for us before the kernel's close. */
    int fd = c->resend_own ? c->resend_dup : c->resend_fd;
    if (!c->resend_own && !fs_fdtab_names(fd, c))
      fd = fs_fdtab_names(__atomic_load_n(&c->fd, __ATOMIC_ACQUIRE), c) ? c->fd : -1;
    fs_cutover_resend_on(c, ch, fd);
  }
  if (c->resend_own) { /* the last reference: the kernel's FIN, after the bytes */
    c->resend_own = false;
    fs_fdreg_close(c->resend_dup);
  }
  fs_unlock(&c->txlock);
  fs_wake_own(c); /* our own waiters: writable again, on TCP */
}
