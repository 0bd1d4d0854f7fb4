/* Socket engine, data half.  See core/sockio.h and core/ring.h. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/gpuio.h"
#include "core/hook.h"
#include "core/log.h"
#include "core/rdv.h"
#include "core/sock.h"
#include "core/sockio.h"
#include "preload/real.h"

/* Small steps of every send and receive: inline, whatever the compiler
 * thinks of their callers' size (each call and return is a lookup on an
 * emulated CPU, where the rdma fabric is tested). */
#define FS_SOCKIO_HOT static inline __attribute__((always_inline))

#define FS_SPIN_MAX_US 200
#define FS_WAKE_BOUND_MS 20
#define FS_SPIN_MIN_US 2

static size_t fs_iov_total(const struct iovec *iov, int n)
{
  size_t t = 0;
  for (int i = 0; i < n; i++)
    t += iov[i].iov_len;
  return t;
}

/* A hook closed the connection, while the application's fd stays open.
 * On TCP it is aborted as a middlebox would: connect(AF_UNSPEC) makes the
 * kernel send a reset now and drop both queues, so a peer still sending
 * fails at once.  (Shutting down and discarding was not enough: after
 * SHUT_RD the kernel sends no window update, and a peer blocked on a full
 * window waited for its backed-off zero-window probe, seconds later.)  The
 * shutdown after it only sets the socket's shutdown flags, so poll reports
 * the end.  On a fabric the peer sees our end closed (EOF after the ring,
 * then EPIPE); TCP there is idle and is shut down. */
static void fs_sockio_hook_shut(struct fs_conn *c, int fd)
{
  int saved = errno;
  c->hook_closed = true;
  fs_conn_set_state(c, fs_conn_state(c), FS_REASON_HOOK);
  struct fs_chan *ch = fs_sockio_chan(c);
  if (!ch) {
    struct sockaddr sa = { .sa_family = AF_UNSPEC };
    FS_REAL(connect)(fd, &sa, sizeof sa);
  }
  FS_REAL(shutdown)(fd, SHUT_RDWR);
  if (ch)
    fs_chan_shut(ch);
  errno = saved;
}

/* Feed the first n bytes of an iovec to a hook direction. */
static int fs_sockio_hook(struct fs_conn *c, int fd, const struct iovec *iov, int cnt, size_t n, bool tx)
{
  for (int i = 0; i < cnt && n > 0; i++) {
    size_t l = iov[i].iov_len < n ? iov[i].iov_len : n;
    int rc = tx ? fs_hook_send(c->hooks, iov[i].iov_base, l) : fs_hook_recv(c->hooks, iov[i].iov_base, l);
    if (rc < 0) {
      fs_sockio_hook_shut(c, fd);
      return rc;
    }
    n -= l;
  }
  return 0;
}

/* Bytes moved: run the hooks (0, or -ECONNABORTED when one closed the
 * connection).  Called with the direction's lock held, so a hook sees the
 * calls of one direction one at a time, in the order the bytes moved. */
FS_SOCKIO_HOT int fs_sockio_hooks(struct fs_conn *c, int fd, struct fs_io *io, ssize_t r, bool tx, bool peek)
{
  if (r <= 0 || peek || !c->hooks)
    return 0;
  return fs_sockio_hook(c, fd, io->iov, io->iovcnt, (size_t)r, tx);
}

/* Bytes moved: count them.  owned: the direction's lock is held, so this
 * thread is the counters' only writer and needs no locked instruction (a
 * third of a small message's atomics).  The unlocked TCP path adds
 * atomically; a call still in the locked path when a connection drops to
 * it for good could lose one call's count, never more. */
FS_SOCKIO_HOT void fs_sockio_count(struct fs_conn *c, ssize_t r, bool tx, bool peek, bool owned)
{
  if (r <= 0 || peek || !c->stat)
    return;
  int framed = c->hooks ? fs_hook_counts_msgs(c->hooks) : 0;
  uint64_t *bytes = tx ? &c->stat->tx_bytes : &c->stat->rx_bytes;
  uint64_t *msgs = tx ? &c->stat->tx_msgs : &c->stat->rx_msgs;
  bool one = !(framed & (tx ? 1 : 2)); /* no framing known: one call, one message */
  if (owned) {
    __atomic_store_n(bytes, __atomic_load_n(bytes, __ATOMIC_RELAXED) + (uint64_t)r, __ATOMIC_RELAXED);
    if (one)
      __atomic_store_n(msgs, __atomic_load_n(msgs, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
  } else {
    __atomic_fetch_add(bytes, (uint64_t)r, __ATOMIC_RELAXED);
    if (one)
      __atomic_fetch_add(msgs, 1, __ATOMIC_RELAXED);
  }
}

/* Bytes moved, counted, and hooks run (hrc): maybe start an upgrade.  A
 * send a hook closed the connection on still reports its bytes (they went);
 * a receive fails (the application must not get them). */
FS_SOCKIO_HOT ssize_t fs_sockio_done(struct fs_conn *c, ssize_t r, bool tx, bool peek, int hrc)
{
  if (r <= 0 || peek)
    return r;
  if (hrc < 0)
    return tx ? r : -ECONNABORTED;
  if (!c->no_upgrade && !c->upgrade_queued)
    fs_sock_maybe_upgrade(c);
  return r;
}

ssize_t fs_sock_tcp_io(int fd, struct fs_io *io)
{
  ssize_t r;
  switch (io->op) {
  case FS_IO_READ: r = FS_REAL(read)(fd, io->iov[0].iov_base, io->iov[0].iov_len); break;
  case FS_IO_READV: r = FS_REAL(readv)(fd, io->iov, io->iovcnt); break;
  case FS_IO_RECV: r = FS_REAL(recv)(fd, io->iov[0].iov_base, io->iov[0].iov_len, io->flags); break;
  case FS_IO_RECVFROM:
    r = FS_REAL(recvfrom)(fd, io->iov[0].iov_base, io->iov[0].iov_len, io->flags, io->from, io->fromlen);
    break;
  case FS_IO_RECVMSG: r = FS_REAL(recvmsg)(fd, io->msg, io->flags); break;
  case FS_IO_WRITE: r = FS_REAL(write)(fd, io->iov[0].iov_base, io->iov[0].iov_len); break;
  case FS_IO_WRITEV: r = FS_REAL(writev)(fd, io->iov, io->iovcnt); break;
  case FS_IO_SEND: r = FS_REAL(send)(fd, io->iov[0].iov_base, io->iov[0].iov_len, io->flags); break;
  case FS_IO_SENDTO:
    r = FS_REAL(sendto)(fd, io->iov[0].iov_base, io->iov[0].iov_len, io->flags, io->to, io->tolen);
    break;
  case FS_IO_SENDMSG: r = FS_REAL(sendmsg)(fd, io->msg, io->flags); break;
  default: return -EINVAL;
  }
  return r < 0 ? -errno : r;
}

/* The part of iov after `skip` bytes, as a new iovec (at most 64 entries). */
static int fs_iov_sub(const struct iovec *iov, int cnt, size_t skip, struct iovec *out)
{
  int n = 0;
  for (int i = 0; i < cnt && n < 64; i++) {
    if (skip >= iov[i].iov_len) {
      skip -= iov[i].iov_len;
      continue;
    }
    out[n].iov_base = (char *)iov[i].iov_base + skip;
    out[n].iov_len = iov[i].iov_len - skip;
    skip = 0;
    n++;
  }
  return n;
}

/* Non-blocking TCP read into iov after `skip` bytes. */
static ssize_t fs_sockio_tcp_read(int fd, struct fs_io *io, size_t skip, size_t limit)
{
  struct iovec sub[64];
  int n = fs_iov_sub(io->iov, io->iovcnt, skip, sub);
  size_t tot = 0;
  for (int i = 0; i < n; i++) {
    if (tot + sub[i].iov_len > limit) {
      sub[i].iov_len = limit - tot;
      n = i + 1;
      tot = limit;
      break;
    }
    tot += sub[i].iov_len;
  }
  struct msghdr mh = { .msg_iov = sub, .msg_iovlen = (size_t)n };
  ssize_t r = FS_REAL(recvmsg)(fd, &mh, (io->flags & MSG_PEEK) | MSG_DONTWAIT);
  return r < 0 ? -errno : r;
}

static int fs_sockio_timeo(int fd, int opt)
{
  struct timeval tv = { 0, 0 };
  socklen_t l = sizeof tv;
  if (FS_REAL(getsockopt)(fd, SOL_SOCKET, opt, &tv, &l) < 0 || (tv.tv_sec == 0 && tv.tv_usec == 0))
    return -1;
  long ms = tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000;
  return ms > 0x7fffffff ? 0x7fffffff : (int)ms;
}

/* conn tx_sleeping / rx_sleeping: how a thread sleeps (0: it does not). */
#define FS_SLEEP_RING 1 /* on the ring (its wait is over when fs_sockio_wait_over says so) */
#define FS_SLEEP_TCP 2  /* a receiver on TCP with the ring armed for the peer's SWITCH */

/* What a waiting receiver or sender waits for (need: the room it needs);
 * the spins poll them, a sleeper looks once more, a waker looks for it. */
static bool fs_cond_rx(struct fs_chan *ch, void *arg)
{
  (void)arg;
  fs_ring_touch_head(&ch->rx);
  return fs_chan_rx_ready(ch) || fs_chan_peer_closed(ch) ||
         __atomic_load_n(&ch->peer->rx_revert, __ATOMIC_RELAXED);
}

static bool fs_cond_tx(struct fs_chan *ch, void *arg)
{
  fs_chan_progress(ch);
  return fs_ring_space_for(&ch->tx, *(size_t *)arg) >= *(size_t *)arg || fs_chan_peer_closed(ch) ||
         __atomic_load_n(&ch->peer->rx_revert, __ATOMIC_RELAXED);
}

static bool fs_sockio_wait_over(struct fs_chan *ch, bool tx, size_t need)
{
  return tx ? fs_cond_tx(ch, &need) : fs_cond_rx(ch, NULL);
}

/* rx on TCP: is a record at the ring's head to act on now (readable)?  A
 * SWITCH is, once every TCP byte before it was read; until then the
 * socket's data (which ends a sleep) comes first, as does the socket's EOF
 * after a peer's close with nothing in the ring. */
static bool fs_sockio_switch_due(struct fs_conn *c, struct fs_chan *ch)
{
  uint32_t t, l;
  uint64_t n;
  int pr = fs_ring_peek(&ch->rx, &t, &l, &n);
  return pr < 0 || (pr == 1 && (t != FS_REC_SWITCH || c->tcp_rx >= n)); /* a broken ring: rx_step says so */
}

/* This thread drained a wake fd (the eventfd, or rdma's completion
 * channel) on which its connection's other direction may sleep too: data
 * and room share them, and the peer wakes once per declared interest.  If
 * the other one sleeps, its wait may be over (wake it again), or the wake
 * it was owed cleared its interest (declare it again, then look once more).
 * Its own look before sleeping, after marking itself, closes the rest. */
static void fs_sockio_pass_wake(struct fs_conn *c, struct fs_chan *ch, bool tx)
{
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  bool otx = !tx;
  uint32_t sl = __atomic_load_n(otx ? &c->tx_sleeping : &c->rx_sleeping, __ATOMIC_RELAXED);
  if (!sl)
    return;
  size_t need = otx ? __atomic_load_n(&c->tx_need, __ATOMIC_RELAXED) : 0;
  /* A receiver still on TCP (FS_SLEEP_TCP) waits for its socket and for
   * the peer's SWITCH in the ring at once: only it can tell, so it looks. */
  bool over = sl == FS_SLEEP_TCP || fs_sockio_wait_over(ch, otx, need);
  if (!over)
    over = otx ? fs_chan_arm_tx(ch, need) : fs_chan_arm_rx(ch);
  if (over)
    fs_chan_efd_write(c->wake_fd);
}

/* Sleep until the wake fd or the TCP socket says something (need: the room
 * a sender waits for).  Returns 0, -EAGAIN on SO_*TIMEO expiry, -EINTR. */
static int fs_sockio_sleep(struct fs_conn *c, int fd, bool tx, size_t need, int *budget_ms)
{
  struct fs_chan *ch = __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE);
  int wfd = ch ? ch->wait_fd : -1;
  uint32_t *sleeping = tx ? &c->tx_sleeping : &c->rx_sleeping;
  /* A wait on the ring itself; or a receiver still on TCP that armed the
   * ring for the peer's SWITCH: the wake it is owed may be drained by the
   * sender too (marked, so that one hands it on), though only its socket
   * and the SWITCH can tell whether its wait is over. */
  bool counted = ch && c->wake_fd >= 0 && (tx ? c->tx_flow : c->rx_flow) == FS_FLOW_FABRIC;
  bool marked = counted || (!tx && ch && c->wake_fd >= 0);
  if (marked) {
    if (tx)
      __atomic_store_n(&c->tx_need, need, __ATOMIC_RELAXED);
    __atomic_store_n(sleeping, counted ? FS_SLEEP_RING : FS_SLEEP_TCP, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (counted && fs_sockio_wait_over(ch, tx, need)) {
      __atomic_store_n(sleeping, 0, __ATOMIC_RELAXED);
      return 0;
    }
    /* Arming drained the fabric's own event fd (rdma's completion channel,
     * shared by both directions too): the other one may need its wake. */
    if (wfd >= 0)
      fs_sockio_pass_wake(c, ch, tx);
  }
  struct pollfd p[3] = { { c->wake_fd, POLLIN, 0 }, { fd, (short)(tx ? POLLRDHUP : (POLLIN | POLLRDHUP)), 0 },
                         { wfd, POLLIN, 0 } };
  int nfds = (c->wake_fd >= 0 ? 2 : 1) + (wfd >= 0);
  struct pollfd *pp = c->wake_fd >= 0 ? p : &p[1];
  uint64_t t0 = *budget_ms >= 0 ? fs_clock_us() : 0;
  /* The wake fd is shared by this connection's sender and receiver (and
   * any poll), and each drains it; fs_sockio_pass_wake hands on a wake the
   * other one needed.  Still no sleep lasts more than FS_WAKE_BOUND_MS
   * before the caller looks again (a poll() or epoll_wait elsewhere drains
   * it too): a wake lost that way costs milliseconds, never a hang. */
  int cap = *budget_ms < 0 || *budget_ms > FS_WAKE_BOUND_MS ? FS_WAKE_BOUND_MS : *budget_ms;
  int r = FS_REAL(poll)(pp, (nfds_t)nfds, cap);
  int err = errno;
  if (marked)
    __atomic_store_n(sleeping, 0, __ATOMIC_RELAXED);
  if (r < 0)
    return -err;
  if (*budget_ms >= 0) {
    uint64_t spent = (fs_clock_us() - t0) / 1000u;
    *budget_ms = spent >= (uint64_t)*budget_ms ? 0 : *budget_ms - (int)spent;
    if (r == 0 && *budget_ms == 0)
      return -EAGAIN;
  }
  if (c->wake_fd >= 0 && (p[0].revents & POLLIN)) {
    uint64_t v;
    if (FS_REAL(read)(c->wake_fd, &v, sizeof v) == (ssize_t)sizeof v && marked)
      fs_sockio_pass_wake(c, ch, tx);
  }
  if (wfd >= 0 && (p[2].revents & POLLIN) && ch->ops->drain) {
    ch->ops->drain(ch);
    if (marked)
      fs_sockio_pass_wake(c, ch, tx);
  }
  if (r == 0 && ch && cap == FS_WAKE_BOUND_MS)
    fs_log(FS_LOG_DEBUG, "fd %d: %s wait on %s ran into the %d ms bound (ready now: %d)", fd, tx ? "tx" : "rx",
           ch->ops->name, cap, counted ? fs_sockio_wait_over(ch, tx, need) : !tx && fs_sockio_switch_due(c, ch));
  return 0;
}

/* Nanoseconds one spin iteration takes, learnt at the spins' clock checks.
 * The clock is read only every 256 iterations, never when the wait ends
 * sooner: on hardware a read costs ~20 ns, but where the clock source is
 * emulated (hpet in a VM) it is a system call of microseconds, and a read
 * after every wake-up put that on every round trip. */
static uint32_t fs_spin_ns_iter = 50;

/* Spin up to the connection's budget for cond(); *spun_ns: for how long
 * (estimated).  Every ~256 pauses we yield, so a peer woken onto our core
 * gets to run. */
static bool fs_sockio_spin(struct fs_conn *c, bool (*cond)(struct fs_chan *, void *), struct fs_chan *ch, void *arg,
                           uint64_t *spun_ns)
{
  uint32_t budget = c->policy.busy_poll ? 1000u : c->spin_us;
  *spun_ns = 0;
  if (budget == 0)
    return cond(ch, arg);
  uint32_t npi = __atomic_load_n(&fs_spin_ns_iter, __ATOMIC_RELAXED);
  uint64_t first = 0; /* the clock at the first check */
  /* No PAUSE where each look polls a completion queue: the poll is a long
   * enough breather (perftest and rsocket spin the same way), and under an
   * emulated CPU a PAUSE leaves the translated code, ~0.4 us per look. */
  bool polls = ch->ops->progress != NULL;
  for (unsigned i = 0;; i++) {
    if (cond(ch, arg)) {
      *spun_ns = (uint64_t)i * npi;
      return true;
    }
    if (!polls)
      __builtin_ia32_pause();
    if ((i & 255) == 255) {
      uint64_t spent = fs_clock_spin_check(&first, &npi, i + 1, 256);
      __atomic_store_n(&fs_spin_ns_iter, npi, __ATOMIC_RELAXED);
      if (spent >= (uint64_t)budget * 1000u) {
        *spun_ns = spent;
        return false;
      }
      sched_yield();
    }
  }
}

/* Adaptive spinning: a wait that ended after w us would have been caught by
 * spinning w, so the next spin is 2w (bounded); a longer wait (an idle
 * peer) halves the budget.  Two ends that both fell asleep thus find their
 * way back to spinning: each sees the other's wake-up latency and spins past
 * it. */
static void fs_sockio_adapt(struct fs_conn *c, uint64_t w)
{
  if (c->policy.busy_poll || c->policy.spin_us >= 0)
    return;
  if (w <= FS_SPIN_MAX_US)
    c->spin_us = (uint32_t)(2 * w + FS_SPIN_MIN_US > FS_SPIN_MAX_US ? FS_SPIN_MAX_US : 2 * w + FS_SPIN_MIN_US);
  else
    c->spin_us = c->spin_us / 2 < FS_SPIN_MIN_US ? FS_SPIN_MIN_US : c->spin_us / 2;
}

void fs_sockio_tcp_for_good(struct fs_conn *c, int reason)
{
  c->reverted = true;
  c->no_upgrade = true;
  if (c->tx_flow != FS_FLOW_EOF)
    c->tx_flow = FS_FLOW_TCP;
  if (c->rx_flow != FS_FLOW_EOF)
    c->rx_flow = FS_FLOW_TCP;
  fs_conn_set_state(c, FS_STATE_TCP, reason);
  if (c->stat)
    c->stat->fabric = FS_FABRIC_TCP;
}

/* fs_sockio_chan, taking in the peer's news first only with progress: other
 * callers act on what is already known here (a completion poll on rdma
 * costs about as much as the rest of a small send or receive).  A receive
 * takes news in once, where it looks at the ring (fs_sockio_rx_step), a
 * send at most once (fs_sockio_tx_look); waits poll as they spin. */
FS_SOCKIO_HOT struct fs_chan *fs_sockio_chan_known(struct fs_conn *c, bool progress)
{
  struct fs_chan *ch = __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE);
  if (!ch || c->reverted)
    return NULL;
  if (progress)
    fs_chan_progress(ch);
  /* Another process sharing this end since fork downgraded it (it exec'd
   * or passed the fd on): the stream continues on TCP for us too. */
  if (__builtin_expect(__atomic_load_n(&ch->me->reverted, __ATOMIC_ACQUIRE), 0)) {
    fs_sockio_tcp_for_good(c, FS_REASON_EXEC);
    return NULL;
  }
  /* The peer gave the channel up without ever attaching it (its attach
   * lost a race with close or fork): it never left TCP, and neither do we. */
  if (__builtin_expect(fs_chan_peer_closed(ch), 0) && !__atomic_load_n(&ch->peer->attached, __ATOMIC_ACQUIRE) &&
      c->tx_flow == FS_FLOW_TCP && c->rx_flow == FS_FLOW_TCP) {
    fs_sockio_tcp_for_good(c, FS_REASON_REJECTED);
    return NULL;
  }
  return ch;
}

struct fs_chan *fs_sockio_chan(struct fs_conn *c)
{
  return fs_sockio_chan_known(c, true);
}

/* ---- send -------------------------------------------------------------- */

void fs_sockio_switch_tx(struct fs_conn *c, struct fs_chan *ch)
{
  if (c->tx_flow != FS_FLOW_TCP || c->shut_wr || c->reverted || c->peer_revert_done ||
      fs_chan_peer_reverted(ch) ||
      !__atomic_load_n(&ch->peer->attached, __ATOMIC_ACQUIRE))
    return; /* never onto the fabric again once either end went back to TCP */
  if (fs_ring_put_ctl(&ch->tx, FS_REC_SWITCH, c->tcp_tx) == 0) {
    c->tx_flow = FS_FLOW_FABRIC;
    fs_chan_kick_data(ch);
  }
}

/* Write everything still unread in our tx ring to TCP (the peer stopped
 * reading the ring: fs_sock_downgrade on its side), then stay on TCP. */
static int fs_sockio_resend(struct fs_conn *c, int fd, struct fs_chan *ch)
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
        FS_REAL(poll)(&p, 1, 1000);
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

/* The peer stopped reading its rx ring (it downgraded): our unread ring
 * bytes must go again on TCP before anything new.  That can block for as
 * long as the peer's new image takes to read, so it runs on the agent
 * thread (fs_sockio_resend_job), which holds our tx lock meanwhile. */
void fs_sockio_service(struct fs_conn *c, int fd)
{
  /* Nothing to answer, the common case, in three loads; callers just took
   * the peer's news in. */
  struct fs_chan *ch = __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE);
  if (!ch || !fs_chan_peer_reverted(ch) || c->peer_revert_done ||
      fs_sockio_chan_known(c, false) != ch)
    return;
  bool expect = false;
  if (__atomic_compare_exchange_n(&c->resend_queued, &expect, true, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
    c->resend_fd = fd;
    fs_rdv_resend(c);
  }
}

void fs_sockio_resend_job(struct fs_conn *c)
{
  struct fs_chan *ch = __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE);
  fs_lock(&c->txlock);
  if (ch && !c->peer_revert_done) {
    int fd = c->resend_fd, was = c->tx_flow;
    if (was != FS_FLOW_TCP)
      (void)fs_sockio_resend(c, fd, ch);
    if (was == FS_FLOW_EOF)
      FS_REAL(shutdown)(fd, SHUT_WR);
    c->tx_flow = was == FS_FLOW_EOF ? FS_FLOW_EOF : FS_FLOW_TCP;
    c->no_upgrade = true;
    __atomic_store_n(&c->peer_revert_done, true, __ATOMIC_RELEASE);
    fs_log(FS_LOG_INFO, "fd %d: peer went back to tcp", fd);
  }
  fs_unlock(&c->txlock);
  if (c->wake_fd >= 0) /* our own waiters: writable again, on TCP */
    fs_chan_efd_write(c->wake_fd);
}

/* With txlock held: does this send take in the peer's news first?  Not when
 * a look since our last send took something in (the receiver's, in a
 * request-response exchange): such a send then costs no completion poll,
 * and what arrived since waits for the next send or wait.  A sender alone
 * looks at every send, or every other while credits come in. */
static bool fs_sockio_tx_look(struct fs_conn *c, struct fs_chan *ch)
{
  uint32_t n = __atomic_load_n(&ch->news, __ATOMIC_RELAXED);
  bool look = n == c->tx_news;
  c->tx_news = n;
  return look;
}

/* Sends wait (or EAGAIN) while a re-send for the peer is pending. */
static int fs_sockio_wait_resend(struct fs_conn *c, int fd, struct fs_chan *ch, int flags)
{
  while (fs_chan_peer_reverted(ch) &&
         !__atomic_load_n(&c->peer_revert_done, __ATOMIC_ACQUIRE)) {
    fs_sockio_service(c, fd);
    if (c->nonblock || (flags & MSG_DONTWAIT))
      return -EAGAIN;
    struct pollfd p = { c->wake_fd, POLLIN, 0 };
    FS_REAL(poll)(&p, 1, 10);
  }
  return 0;
}

static void fs_sockio_sigpipe(int flags)
{
  if (!(flags & MSG_NOSIGNAL)) {
    int saved = errno;
    raise(SIGPIPE);
    errno = saved;
  }
}

static ssize_t fs_sockio_fabric_send(struct fs_conn *c, int fd, struct fs_chan *ch, struct fs_io *io, size_t total)
{
  int flags = (io->op == FS_IO_WRITE || io->op == FS_IO_WRITEV) ? 0 : io->flags;
  if (flags & MSG_OOB)
    return -EOPNOTSUPP;
  bool nonblock = c->nonblock || (flags & MSG_DONTWAIT);
  size_t sent = 0;
  int budget = -2;
  while (sent < total || total == 0) {
    if (fs_chan_peer_closed(ch)) {
      if (sent)
        break;
      /* TCP takes the first send after the peer closed (the reset comes
       * back later) and fails the next: so do we, discarding the bytes. */
      if (!c->peer_close_seen) {
        c->peer_close_seen = true;
        return (ssize_t)total;
      }
      fs_sockio_sigpipe(flags);
      return -EPIPE;
    }
    if (total == 0)
      return 0;
    size_t n = fs_ring_put_data(&ch->tx, io->iov, io->iovcnt, sent, total - sent);
    if (n) {
      sent += n;
      fs_chan_kick_data(ch);
      continue;
    }
    size_t need = total - sent < 4096 ? total - sent : 4096;
    if (nonblock) {
      if (fs_chan_arm_tx(ch, need))
        continue;
      break;
    }
    if (fs_chan_peer_reverted(ch))
      break; /* the caller re-sends on TCP */
    uint64_t spun;
    if (fs_sockio_spin(c, fs_cond_tx, ch, &need, &spun))
      continue;
    if (fs_chan_arm_tx(ch, need))
      continue;
    if (budget == -2)
      budget = fs_sockio_timeo(fd, SO_SNDTIMEO);
    struct pollfd p = { fd, POLLRDHUP, 0 };
    if (FS_REAL(poll)(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR))) {
      if (sent)
        break;
      int err = 0;
      socklen_t el = sizeof err;
      FS_REAL(getsockopt)(fd, SOL_SOCKET, SO_ERROR, &err, &el);
      fs_sockio_sigpipe(flags);
      return err ? -err : -EPIPE;
    }
    int rc = fs_sockio_sleep(c, fd, true, need, &budget);
    if (rc < 0) {
      if (sent)
        break;
      return rc;
    }
  }
  if (sent == 0 && total > 0)
    return -EAGAIN;
  c->fab_tx += sent;
  FS_STAT_BUMP(c->stat, fabric_tx, sent); /* txlock held: the only writer */
  return (ssize_t)sent;
}

ssize_t fs_sock_send(struct fs_conn *c, int fd, struct fs_io *io)
{
  if (c->connecting)
    fs_sock_check_connected(c, fd);
  if (c->hook_closed)
    return -ECONNABORTED;
  if (__builtin_expect(fs_gpuio_device(io), 0))
    return fs_gpuio_send(c, fd, io);
  struct fs_chan *ch = fs_sockio_chan_known(c, false);
  ssize_t r;
  int hrc;
  if (!ch && c->no_upgrade) {
    if (!c->hooks) {
      r = fs_sock_tcp_io(fd, io);
      fs_sockio_count(c, r, true, false, false);
      return fs_sockio_done(c, r, true, false, 0);
    }
    fs_lock(&c->txlock);
    r = fs_sock_tcp_io(fd, io);
    hrc = fs_sockio_hooks(c, fd, io, r, true, false);
    fs_sockio_count(c, r, true, false, true);
    fs_unlock(&c->txlock);
    return fs_sockio_done(c, r, true, false, hrc);
  }
  int sflags = (io->op == FS_IO_WRITE || io->op == FS_IO_WRITEV) ? 0 : io->flags;
  if (ch && __builtin_expect(fs_chan_peer_reverted(ch), 0)) {
    int w = fs_sockio_wait_resend(c, fd, ch, sflags);
    if (w < 0)
      return w;
  }
  fs_lock(&c->txlock);
  ch = __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE);
  ch = fs_sockio_chan_known(c, ch && fs_sockio_tx_look(c, ch));
  if (ch && c->tx_flow == FS_FLOW_TCP)
    fs_sockio_switch_tx(c, ch);
  if (ch && c->tx_flow == FS_FLOW_FABRIC) {
    r = fs_sockio_fabric_send(c, fd, ch, io, fs_iov_total(io->iov, io->iovcnt));
    if (r == -EAGAIN && fs_chan_peer_reverted(ch)) {
      /* the peer downgraded while we waited for room: go again, on TCP */
      fs_unlock(&c->txlock);
      int w = fs_sockio_wait_resend(c, fd, ch, sflags);
      return w < 0 ? w : fs_sock_send(c, fd, io);
    }
  } else {
    r = fs_sock_tcp_io(fd, io);
    if (r > 0)
      c->tcp_tx += (uint64_t)r;
  }
  hrc = fs_sockio_hooks(c, fd, io, r, true, false);
  fs_sockio_count(c, r, true, false, true);
  fs_unlock(&c->txlock);
  return fs_sockio_done(c, r, true, false, hrc);
}

/* ---- receive ----------------------------------------------------------- */

/* One step from whichever source is current: >0 bytes, 0 EOF, -EAGAIN
 * nothing now (then *tcp_wait tells what to sleep on), other -errno. */
static ssize_t fs_sockio_rx_step(struct fs_conn *c, int fd, struct fs_io *io, size_t skip, size_t want, bool peek)
{
  for (;;) {
    struct fs_chan *ch = fs_sockio_chan_known(c, true);
    if (c->rx_flow == FS_FLOW_EOF)
      return 0;
    if (c->rx_flow == FS_FLOW_TCP) {
      size_t limit = want;
      if (ch) {
        uint32_t t, l;
        uint64_t n;
        int pr = fs_ring_peek(&ch->rx, &t, &l, &n);
        if (pr == 1 && t != FS_REC_SWITCH)
          pr = -EPROTO;
        if (pr < 0) { /* the peer broke the protocol */
          fs_log(FS_LOG_WARN, "fd %d: corrupt ring before SWITCH (record type %u); resetting", fd, t);
          return -ECONNRESET;
        }
        if (pr == 1) {
          if (c->tcp_rx >= n) {
            fs_ring_pop(&ch->rx);
            fs_chan_kick_space(ch);
            c->rx_flow = FS_FLOW_FABRIC;
            continue;
          }
          if (n - c->tcp_rx < limit)
            limit = (size_t)(n - c->tcp_rx);
        }
      }
      ssize_t r = fs_sockio_tcp_read(fd, io, skip, limit);
      if (r > 0 && !peek)
        c->tcp_rx += (uint64_t)r;
      /* TCP EOF: the peer may have switched, sent and shut down since we
       * looked at the ring (its SWITCH is published before its FIN). */
      if (r == 0 && (ch = fs_sockio_chan(c)) && !fs_ring_empty(&ch->rx))
        continue;
      if (r == 0)
        fs_log(FS_LOG_DEBUG, "fd %d: eof on tcp (chan %p, tcp_rx %llu)", fd, (void *)ch,
               (unsigned long long)c->tcp_rx);
      return r;
    }
    /* rx on the fabric */
    ssize_t r = fs_ring_get_data(&ch->rx, io->iov, io->iovcnt, skip, want, peek);
    if (r > 0) {
      if (!peek) {
        fs_chan_kick_space(ch);
        c->fab_rx += (uint64_t)r;
        FS_STAT_BUMP(c->stat, fabric_rx, (uint64_t)r); /* rxlock held: the only writer */
      }
      return r;
    }
    uint32_t t = 0, l;
    uint64_t n;
    int pr = r < 0 ? (int)r : fs_ring_peek(&ch->rx, &t, &l, &n);
    if (pr < 0) {
      fs_log(FS_LOG_WARN, "fd %d: corrupt ring; resetting", fd);
      return -ECONNRESET;
    }
    if (pr == 1) {
      if (t == FS_REC_EOF) {
        if (!peek)
          c->rx_flow = FS_FLOW_EOF;
        fs_log(FS_LOG_DEBUG, "fd %d: eof record (tcp_rx %llu fab_rx %llu)", fd,
               (unsigned long long)c->tcp_rx, (unsigned long long)c->fab_rx);
        return 0;
      }
      if (t == FS_REC_REVERT) {
        fs_ring_pop(&ch->rx);
        fs_chan_kick_space(ch);
        c->rx_flow = FS_FLOW_TCP;
        c->no_upgrade = true;
        continue;
      }
      if (t == FS_REC_DATA)
        continue; /* published between our two looks at the ring */
      fs_log(FS_LOG_WARN, "fd %d: unexpected record type %u on the fabric; resetting", fd, t);
      return -ECONNRESET;
    }
    if (fs_chan_peer_closed(ch)) {
      fs_log(FS_LOG_DEBUG, "fd %d: peer closed, ring empty (tcp_rx %llu fab_rx %llu)", fd,
             (unsigned long long)c->tcp_rx, (unsigned long long)c->fab_rx);
      return 0; /* closed with its tx on TCP or after EOF was consumed */
    }
    return -EAGAIN;
  }
}

/* The ring is empty and the fabric said nothing: what does TCP say?  The
 * peer's TCP socket closing before its fabric EOF means it died. */
static ssize_t fs_sockio_liveness(int fd)
{
  char b;
  ssize_t r = FS_REAL(recv)(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  if (r == 0)
    return 0;
  if (r < 0 && errno != EAGAIN)
    return -errno;
  return -EAGAIN;
}

static ssize_t fs_sockio_fabric_recv(struct fs_conn *c, int fd, struct fs_io *io, int flags)
{
  size_t total = fs_iov_total(io->iov, io->iovcnt);
  bool peek = flags & MSG_PEEK, waitall = (flags & MSG_WAITALL) && !peek;
  bool nonblock = c->nonblock || (flags & MSG_DONTWAIT);
  size_t got = 0;
  int budget = -2;
  if (flags & MSG_OOB)
    return -EINVAL; /* no urgent data on a fabric, as TCP without any */
  if (total == 0) { /* as TCP: 0 if data or EOF is there, else EAGAIN if non-blocking */
    struct fs_chan *ch = fs_sockio_chan(c);
    if (c->rx_flow == FS_FLOW_FABRIC && ch && !fs_chan_rx_ready(ch) && !fs_chan_peer_closed(ch) && nonblock)
      return -EAGAIN;
    if (c->rx_flow == FS_FLOW_TCP && nonblock)
      return fs_sockio_tcp_read(fd, io, 0, 0);
    return 0; /* a blocking zero-length read does not wait */
  }
  /* How long this call waited: spins are estimated (fs_sockio_spin), the
   * clock is read only around a sleep. */
  uint64_t spun_ns = 0, slept_at = 0;
  bool waited = false;
  for (;;) {
    ssize_t r = fs_sockio_rx_step(c, fd, io, got, total - got, peek);
    if (r > 0) {
      got += (size_t)r;
      if (waited && c->rx_flow == FS_FLOW_FABRIC) {
        uint64_t w = spun_ns / 1000u;
        if (slept_at)
          w += fs_clock_us() - slept_at;
        fs_sockio_adapt(c, w);
        waited = false;
        spun_ns = slept_at = 0;
      }
      if (!waitall || got == total)
        break;
      continue;
    }
    if (r == 0 || (r != -EAGAIN && got))
      break;
    if (r != -EAGAIN)
      return r;
    struct fs_chan *ch = fs_sockio_chan_known(c, false); /* rx_step just looked */
    if (ch && c->rx_flow == FS_FLOW_FABRIC) {
      if (!nonblock) {
        uint64_t s1;
        bool ok = fs_sockio_spin(c, fs_cond_rx, ch, NULL, &s1);
        spun_ns += s1;
        waited = true;
        if (ok)
          continue;
      }
      if (fs_chan_arm_rx(ch))
        continue;
      ssize_t lv = fs_sockio_liveness(fd);
      if (lv != -EAGAIN) {
        if (got)
          break;
        if (fs_chan_rx_ready(ch))
          continue; /* the EOF record beat the TCP close */
        fs_log(FS_LOG_DEBUG, "fd %d: tcp says %zd with the ring empty: peer gone", fd, lv);
        return lv;
      }
    } else if (ch && fs_chan_arm_rx(ch) && fs_sockio_switch_due(c, ch)) {
      continue; /* the SWITCH came while we looked at TCP: no wake will say so */
    }
    if (nonblock)
      return got ? (ssize_t)got : -EAGAIN;
    if (budget == -2)
      budget = fs_sockio_timeo(fd, SO_RCVTIMEO);
    fs_sockio_service(c, fd);
    if (waited && !slept_at)
      slept_at = fs_clock_us();
    int rc = fs_sockio_sleep(c, fd, false, 0, &budget);
    if (rc < 0)
      return got ? (ssize_t)got : rc;
  }
  return (ssize_t)got;
}

ssize_t fs_sock_recv(struct fs_conn *c, int fd, struct fs_io *io)
{
  if (c->connecting)
    fs_sock_check_connected(c, fd);
  if (c->hook_closed)
    return -ECONNABORTED;
  if (__builtin_expect(fs_gpuio_device(io), 0))
    return fs_gpuio_recv(c, fd, io);
  int flags = (io->op == FS_IO_READ || io->op == FS_IO_READV) ? 0 : io->flags;
  bool peek = flags & MSG_PEEK;
  struct fs_chan *ch = fs_sockio_chan_known(c, false); /* fs_sockio_rx_step takes news in */
  ssize_t r;
  int hrc;
  if (!ch && (c->no_upgrade || c->wake_fd < 0)) {
    bool locked = c->hooks != NULL; /* hooks see one call at a time */
    if (locked)
      fs_lock(&c->rxlock);
    r = fs_sock_tcp_io(fd, io);
    if (r > 0 && !peek)
      c->tcp_rx += (uint64_t)r;
    hrc = fs_sockio_hooks(c, fd, io, r, false, peek);
    fs_sockio_count(c, r, false, peek, locked);
    if (locked)
      fs_unlock(&c->rxlock);
    return fs_sockio_done(c, r, false, peek, hrc);
  }
  if (ch && __builtin_expect(fs_chan_peer_reverted(ch), 0))
    fs_sockio_service(c, fd);
  fs_lock(&c->rxlock);
  r = fs_sockio_fabric_recv(c, fd, io, flags);
  hrc = fs_sockio_hooks(c, fd, io, r, false, peek);
  fs_sockio_count(c, r, false, peek, true);
  fs_unlock(&c->rxlock);
  /* What a TCP recvfrom/recvmsg reports: no address, no control data. */
  if (r >= 0) {
    if (io->op == FS_IO_RECVFROM && io->from && io->fromlen)
      *io->fromlen = 0;
    if (io->op == FS_IO_RECVMSG) {
      io->msg->msg_namelen = 0;
      io->msg->msg_controllen = 0;
      io->msg->msg_flags = 0;
    }
  }
  return fs_sockio_done(c, r, false, peek, hrc);
}

int fs_sock_fionread(struct fs_conn *c, int fd, int *out)
{
  (void)fd;
  struct fs_chan *ch = fs_sockio_chan(c);
  if (!ch || c->rx_flow != FS_FLOW_FABRIC)
    return -ENOTSUP;
  size_t n = fs_ring_readable(&ch->rx);
  *out = n > 0x7fffffff ? 0x7fffffff : (int)n;
  return 0;
}

int fs_sock_shutdown(struct fs_conn *c, int fd, int how)
{
  if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
    return -EINVAL;
  struct fs_chan *ch = fs_sockio_chan(c);
  if (ch && how != SHUT_RD) {
    fs_lock(&c->txlock);
    if (c->tx_flow == FS_FLOW_FABRIC) {
      (void)fs_ring_put_ctl(&ch->tx, FS_REC_EOF, 0);
      c->tx_flow = FS_FLOW_EOF;
    }
    c->shut_wr = true;
    fs_unlock(&c->txlock);
    ch->ops->wake_peer(ch);
  } else if (how != SHUT_RD) {
    c->shut_wr = true;
  }
  if (how != SHUT_WR)
    c->shut_rd = true;
  /* The kernel socket is shut down too: the peer's liveness view and
   * getsockopt/poll stay the kernel's.  A fabric EOF is already queued
   * before the TCP FIN, so the peer reads all data first. */
  int r = FS_REAL(shutdown)(fd, how);
  return r < 0 ? -errno : 0;
}

short fs_sockio_ready(struct fs_conn *c, struct fs_chan *ch, short want, short kernel, bool arm)
{
  short r = 0;
  /* Arm first, then look: whatever the peer publishes after our look
   * finds the flag set and wakes us (Dekker with fs_chan_kick_*). */
  if (arm) {
    if (want & POLLIN)
      __atomic_store_n(&ch->rx.ctl->want_data, 1, __ATOMIC_RELAXED);
    if ((want & POLLOUT) && c->tx_flow == FS_FLOW_FABRIC)
      __atomic_store_n(&ch->tx.ctl->want_space, 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (ch->ops->arm)
      ch->ops->arm(ch);
  }
  fs_chan_progress(ch);
  /* A SWITCH at the head with all TCP bytes read: move rx to the fabric now,
   * or a lone SWITCH would look like readable data. */
  if (c->rx_flow == FS_FLOW_TCP && !fs_ring_empty(&ch->rx) && fs_lock_try(&c->rxlock)) {
    uint32_t t, l;
    uint64_t n;
    if (c->rx_flow == FS_FLOW_TCP && fs_ring_peek(&ch->rx, &t, &l, &n) == 1 && t == FS_REC_SWITCH && c->tcp_rx >= n) {
      fs_ring_pop(&ch->rx);
      fs_chan_kick_space(ch);
      c->rx_flow = FS_FLOW_FABRIC;
    }
    fs_unlock(&c->rxlock);
  }
  short dead = kernel & (POLLHUP | POLLERR);
  bool closed = fs_chan_peer_closed(ch);
  switch (c->rx_flow) {
  case FS_FLOW_TCP:
    r |= kernel & (POLLIN | POLLRDNORM | POLLRDHUP | POLLPRI);
    if (fs_sockio_switch_due(c, ch))
      r |= POLLIN | POLLRDNORM;
    break;
  case FS_FLOW_FABRIC:
    if (!fs_ring_empty(&ch->rx) || closed)
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
    if (fs_ring_space(&ch->tx) > 0 || closed)
      r |= POLLOUT | POLLWRNORM;
  } else {
    r |= kernel & (POLLOUT | POLLWRNORM);
  }
  r |= dead;
  return r;
}
