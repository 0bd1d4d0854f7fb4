/* Socket engine, data half.  See engine/sockio.h and fabric/ring.h. */
#include <errno.h>
#include <pthread.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>

#include "base/clock.h"
#include "engine/cancel.h"
#include "engine/hold.h"
#include "engine/agent.h"
#include "engine/batch.h"
#include "engine/cutover.h"
#include "engine/door.h"
#include "engine/wait.h"
#include "engine/gpuio.h"
#include "hooks/hook.h"
#include "base/log.h"
#include "engine/sock.h"
#include "engine/overhang.h"
#include "engine/sockio.h"
#include "engine/wake.h"
#include "engine/sockopt.h"
#include "base/real.h"

/* Small steps of every send and receive: inline, whatever the compiler
 * thinks of their callers' size (each call and return is a lookup on an
 * emulated CPU, where the rdma fabric is tested). */
#define FS_SOCKIO_HOT static inline __attribute__((always_inline))


/* Above any user address (x86-64 with 5-level paging: 2^56; arm64: 2^52). */
#define FS_IOV_USER_END (1ull << 56)

/* What a ring copy may take from (or give to) iov: where the kernel fails
 * a copy with EFAULT, ours would kill the process.  The bytes before the
 * first buffer no process can have mapped (its first page: a NULL pointer
 * plus a little; past every user address; wrapping), as the kernel's
 * partial copy; -EFAULT if that is none.  Any other unmapped buffer is not
 * caught: that would take a system call per send. */
static ssize_t fs_iov_usable(const struct iovec *iov, int n)
{
  size_t t = 0;
  for (int i = 0; i < n; i++) {
    uintptr_t p = (uintptr_t)iov[i].iov_base;
    size_t l = iov[i].iov_len;
    if (l && (p < 4096 || p + l < p || (uint64_t)(p + l) > FS_IOV_USER_END))
      return t ? (ssize_t)t : -EFAULT;
    t += l;
  }
  return (ssize_t)t;
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
  struct fs_chan *ch = fs_cutover_chan(c);
  if (!ch)
    fs_cutover_reset_tcp(fd);
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
  if (!c->no_upgrade && !__atomic_load_n(&c->chan, __ATOMIC_RELAXED)) {
    fs_conn_note_io(c, r, tx);
    if (!c->upgrade_queued)
      fs_sock_maybe_upgrade(c, false);
    else if (__atomic_load_n(&c->upgrade_lazy, __ATOMIC_ACQUIRE))
      fs_agent_nudge(c);
  }
  return r;
}

/* ---- send -------------------------------------------------------------- */

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
  bool entered = false;
  int rc = 0;
  while (fs_chan_peer_reverted(ch) &&
         !__atomic_load_n(&c->peer_revert_done, __ATOMIC_ACQUIRE)) {
    fs_cutover_service(c, fd);
    if (c->nonblock || (flags & MSG_DONTWAIT)) {
      rc = -EAGAIN;
      break;
    }
    /* The job's end writes the wake fd (fs_wake_own): a door's connection
     * leases one for the wait. */
    if (!entered)
      (void)fs_wake_door_enter(c, &entered);
    fs_cancel_hold(); /* never cancelled here with txlock held (cancel.h) */
    struct pollfd p = { __atomic_load_n(&c->wake_fd, __ATOMIC_ACQUIRE), POLLIN, 0 };
    if (FS_REAL(poll)(&p, 1, 10) > 0) {
      uint64_t v; /* read (a lease may hold an old wake: no spin), handed on */
      (void)FS_REAL(read)(p.fd, &v, sizeof v);
      fs_wait_pass_wake(c, ch, true);
    }
  }
  if (entered)
    fs_wake_door_leave(c);
  return rc;
}

static void fs_sockio_sigpipe(int flags)
{
  if (!(flags & MSG_NOSIGNAL)) {
    int saved = errno;
    raise(SIGPIPE);
    errno = saved;
  }
}

/* A large write goes into the ring as records of at most this many bytes,
 * each published as soon as it is copied: the reader copies one out while
 * the writer fills the next, instead of waiting for the whole write (1 MiB
 * ping-pong through a 4 MiB ring ran 1.24x slower without). */
#ifndef FS_SOCKIO_TX_CHUNK
#define FS_SOCKIO_TX_CHUNK (128u << 10)
#endif

/* One record of io's bytes from `sent` on: 0 if the ring is full, or
 * -errno.  sendfile's come from the file straight into the ring; where the
 * file ends, *total shrinks to what it held. */
static ssize_t fs_sockio_put(struct fs_chan *ch, struct fs_io *io, size_t sent, size_t chunk, size_t *total)
{
  if (io->op != FS_IO_SENDFILE)
    return (ssize_t)fs_ring_put_data(&ch->tx, io->iov, io->iovcnt, sent, chunk);
  bool end = false;
  ssize_t n = fs_ring_put_file(&ch->tx, io->in_fd, io->off ? *io->off + (off_t)sent : -1, chunk, &end);
  if (end)
    *total = sent + (size_t)(n > 0 ? n : 0);
  return n;
}

static ssize_t fs_sockio_fabric_send(struct fs_conn *c, int fd, struct fs_chan *ch, struct fs_io *io, size_t total)
{
  int flags = fs_io_flags(io);
  if (flags & MSG_OOB)
    return -EOPNOTSUPP;
  bool nonblock = c->nonblock || (flags & MSG_DONTWAIT);
  size_t sent = 0;
  int budget = -2;
  if (__builtin_expect(__atomic_load_n(&ch->peer->rcvbuf, __ATOMIC_RELAXED) !=
                         __atomic_load_n(&c->peer_rcvbuf, __ATOMIC_RELAXED), 0))
    fs_sockopt_buf_cap(c, ch); /* the peer set SO_RCVBUF since */
  while (sent < total || total == 0) {
    if (fs_chan_peer_closed(ch)) {
      if (fs_chan_peer_reverted(ch))
        break; /* it stopped reading first (fork on rdma): TCP takes it, after the re-send */
      fs_cutover_broken(c, ch, fd);
      if (sent)
        break;
      if (c->reset_tx) { /* the peer died with our bytes unread: its reset */
        c->reset_tx = false;
        c->peer_close_seen = true;
        return -ECONNRESET;
      }
      /* A reset on TCP (the peer aborted): its error once, then EPIPE. */
      struct pollfd hp = { fd, 0, 0 };
      if (!c->peer_close_seen && FS_REAL(poll)(&hp, 1, 0) == 1 && (hp.revents & (POLLERR | POLLHUP))) {
        int err = 0;
        socklen_t el = sizeof err;
        if (hp.revents & POLLERR)
          FS_REAL(getsockopt)(fd, SOL_SOCKET, SO_ERROR, &err, &el);
        c->peer_close_seen = true;
        if (err && err != EPIPE)
          return -err;
        fs_sockio_sigpipe(flags);
        return -EPIPE;
      }
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
    size_t chunk = total - sent < FS_SOCKIO_TX_CHUNK ? total - sent : FS_SOCKIO_TX_CHUNK;
    ssize_t put = fs_sockio_put(ch, io, sent, chunk, &total);
    if (put < 0) {
      if (sent)
        break;
      return put;
    }
    size_t n = (size_t)put;
    if (n) {
      sent += n;
      if (n == total) /* the whole send in one record: may wait for the batch's end */
        fs_batch_kick(c, ch);
      else
        fs_chan_kick_data(ch);
      continue;
    }
    /* Room for 4 KiB (or the rest) at least, but never more than half of
     * what the ring may hold now: a window (rdma's first page) or a small
     * SO_SNDBUF never offers 4 KiB, and the wait would end only at its bound. */
    size_t need = total - sent < 4096 ? total - sent : 4096, most = fs_ring_limit(&ch->tx) / 2;
    if (need > most)
      need = most ? most : 1;
    /* Woken at the writable mark (or once the rest fits), as the kernel
     * wakes a TCP writer: not at each of the reader's reads. */
    size_t mark = fs_chan_tx_mark(ch), wake = mark < total - sent ? mark : total - sent;
    /* A ring that cannot grow (rdma past the memlock limit): TCP's buffers
     * take what a program writes before it reads, where the ring's window
     * would leave both ends waiting for each other.  (An end shared since
     * fork with a thread in recv stays, and this waits as any other.) */
    if (__builtin_expect(fs_chan_cramped(ch), 0)) {
      c->fab_tx += sent; /* the REVERT record counts this call's bytes too */
      bool back = fs_sock_revert_tx(c, fd, ch, FS_REASON_RESOURCES);
      c->fab_tx -= sent; /* (added below) */
      if (back)
        break;
    }
    if (nonblock) {
      if (fs_chan_arm_tx(ch, need, wake))
        continue;
      break;
    }
    if (fs_chan_peer_reverted(ch))
      break; /* the caller re-sends on TCP */
    uint64_t spun;
    if (fs_wait_spin(c, fs_wait_cond_tx, ch, &need, &spun))
      continue;
    if (fs_chan_arm_tx(ch, need, wake))
      continue;
    if (budget == -2)
      budget = fs_wait_timeo_of(c, fd, true);
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
    /* The peer's FIN, its end still open and our ring full: a killed peer
     * sends no reset for bytes it left in a ring (the loop's top says it). */
    if ((p.revents & POLLRDHUP) && fs_cutover_peer_died(c, ch))
      continue;
    int rc = fs_wait_sleep(c, fd, true, need, &budget);
    if (rc < 0) {
      if (sent)
        break;
      return rc;
    }
  }
  if (sent == 0 && total > 0)
    return -EAGAIN;
  if (io->op == FS_IO_SENDFILE && io->off)
    *io->off += (off_t)sent;
  c->fab_tx += sent;
  FS_STAT_BUMP(c->stat, fabric_tx, sent); /* txlock held: the only writer */
  return (ssize_t)sent;
}

/* A send or receive (up) on a socket still connecting.  Where no inspection
 * hook can apply, the call goes first, and bytes moved prove the connection
 * up, to the address connect() was given: asking first cost a getpeername
 * per connection, where an epoll entry used to learn it from EPOLLOUT (a
 * plain registration hands that on untouched). */
static ssize_t fs_sock_io_connecting(struct fs_conn *c, int fd, struct fs_io *io, fs_io_fn up)
{
  if (!c->peer_known || fs_policy_may_hook()) {
    fs_sock_check_connected(c, fd, false);
    return up(c, fd, io);
  }
  ssize_t r = up(c, fd, io);
  if (r > 0 && c->connecting)
    fs_sock_check_connected(c, fd, true);
  return r;
}

static ssize_t fs_sock_send_up(struct fs_conn *c, int fd, struct fs_io *io);

ssize_t fs_sock_send(struct fs_conn *c, int fd, struct fs_io *io)
{
  fs_hold_use(c);
  if (__builtin_expect(c->connecting, 0))
    return fs_sock_io_connecting(c, fd, io, fs_sock_send_up);
  if (__builtin_expect(fs_io_flags(io) & MSG_FASTOPEN, 0))
    return fs_sockio_fastopen(c, fd, io, fs_sock_send_up);
  return fs_sock_send_up(c, fd, io);
}

static ssize_t fs_sock_send_up(struct fs_conn *c, int fd, struct fs_io *io)
{
  if (c->hook_closed)
    return -ECONNABORTED;
  if (__builtin_expect(c->cork_app != c->cork_kernel, 0))
    fs_sockopt_cork_sync(c, fd);
  if (io->op == FS_IO_SENDFILE && c->hooks)
    return -EXDEV; /* hooks see the bytes: through a buffer */
  /* An urgent byte exists on TCP alone: back to it, byte-exact.  Not at the
   * price of waiting for a receiver asleep in recv, whose peer may wait for
   * this very byte: then the fabric's answer, no urgent data. */
  if (__builtin_expect(fs_io_flags(io) & MSG_OOB, 0) &&
      !fs_sock_to_kernel_try(c, fd))
    return -EOPNOTSUPP;
  if (__builtin_expect(fs_gpuio_device(io), 0))
    return fs_gpuio_send(c, fd, io, fs_sock_send);
  /* A send that will cross the threshold lists the inode first: one call
   * (nginx's or gunicorn's sendfile of a whole file) may block until the
   * peer has read nearly all of it, and the peer looks for us meanwhile. */
  if (__builtin_expect(c->ino_late, 0) && !__atomic_load_n(&c->ino, __ATOMIC_RELAXED)) {
    ssize_t n = io->op == FS_IO_SENDFILE ? (ssize_t)io->count : fs_iov_usable(io->iov, io->iovcnt);
    if (n > 0 && c->tcp_tx + c->tcp_rx + (uint64_t)n >= c->policy.upgrade_bytes)
      fs_sock_publish_ino(c, fd);
  }
  struct fs_chan *ch = fs_cutover_chan_known(c, false);
  ssize_t r;
  int hrc;
  if (!ch && c->no_upgrade) {
    if (!c->hooks) {
      r = fs_sock_tcp_io(fd, io);
      fs_sockio_count(c, r, true, false, false);
      return fs_sockio_done(c, r, true, false, 0);
    }
    fs_lock(&c->txlock);
    r = fs_sockio_tcp_locked(c, &c->txlock, fd, io);
    hrc = fs_sockio_hooks(c, fd, io, r, true, false);
    fs_sockio_count(c, r, true, false, true);
    fs_unlock(&c->txlock);
    return fs_sockio_done(c, r, true, false, hrc);
  }
  int sflags = fs_io_flags(io);
  if (ch && __builtin_expect(fs_chan_peer_reverted(ch), 0)) {
    int w = fs_sockio_wait_resend(c, fd, ch, sflags);
    if (w < 0)
      return w;
  }
  fs_lock(&c->txlock);
  ch = __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE);
  ch = fs_cutover_chan_known(c, ch && fs_sockio_tx_look(c, ch));
  ssize_t total = !ch ? 0 : io->op == FS_IO_SENDFILE ? (ssize_t)io->count : fs_iov_usable(io->iov, io->iovcnt);
  if (ch && c->tx_flow == FS_FLOW_TCP)
    fs_cutover_switch_for(c, ch, total > 0 ? (size_t)total : 0);
  if (ch && c->tx_flow == FS_FLOW_FABRIC) {
    r = total < 0 ? total : fs_sockio_fabric_send(c, fd, ch, io, (size_t)total);
    if (r == -EAGAIN && fs_chan_peer_reverted(ch)) {
      /* the peer downgraded while we waited for room: go again, on TCP */
      fs_unlock(&c->txlock);
      int w = fs_sockio_wait_resend(c, fd, ch, sflags);
      return w < 0 ? w : fs_sock_send(c, fd, io);
    }
    if (r == -EAGAIN && (c->reverted || c->tx_back) && c->tx_flow == FS_FLOW_TCP)
      r = fs_sockio_tcp_locked(c, &c->txlock, fd, io); /* cramped: back on TCP (below) */
  } else {
    r = fs_sockio_tcp_locked(c, &c->txlock, fd, io);
    if (r > 0) {
      c->tcp_tx += (uint64_t)r;
      c->more_tcp = (sflags & MSG_MORE) != 0;
    }
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
    struct fs_chan *ch = fs_cutover_chan_known(c, true);
    if (c->rx_flow == FS_FLOW_EOF)
      return 0;
    if (c->rx_flow == FS_FLOW_TCP) {
      size_t limit = want;
      int pr = -1;
      if (ch && __builtin_expect(c->resync_rx, 0))
        fs_cutover_resync_rx(c);
      if (ch) {
        uint64_t n;
        pr = fs_cutover_switch_head(ch, &n);
        if (pr == 2 && fs_cutover_rx_adopt(c, ch))
          continue;
        if (pr < 0 || pr == 2) { /* the peer broke the protocol: no SWITCH first */
          fs_log(FS_LOG_WARN, "fd %d: corrupt ring before SWITCH; resetting", fd);
          return -ECONNRESET;
        }
        if (pr == 1) {
          if (fs_cutover_rx_switch(c, ch))
            continue;
          if (__builtin_expect(c->resync_rx, 0))
            continue; /* no steady count yet: the peer has switched, so it comes */
          if (__builtin_expect(c->tcp_rx > n, 0))
            return fs_cutover_read_past(c, fd, n);
          if (n - c->tcp_rx < limit)
            limit = (size_t)(n - c->tcp_rx);
        }
      }
      if (__builtin_expect(fs_overhang_len(c) != 0, 0))
        return (ssize_t)fs_overhang_take(c, io, skip, want, peek);
      ssize_t r = fs_sockio_tcp_read(fd, io, skip, limit);
      /* No SWITCH before the read: one may have come with its bytes. */
      if (r > 0 && pr == 0 && !c->resync_rx && (r = fs_overhang_split(c, ch, io, skip, (size_t)r, peek)) == 0)
        continue; /* every byte read was past it: the ring first */
      if (r > 0 && !peek)
        c->tcp_rx += (uint64_t)r;
      /* TCP EOF: the peer may have switched, sent and shut down since we
       * looked at the ring (its SWITCH is published before its FIN). */
      if (r == 0 && (ch = fs_cutover_chan(c)) && !fs_ring_empty(&ch->rx))
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
        fs_cutover_rx_revert(c, ch);
        continue;
      }
      if (t == FS_REC_DATA)
        continue; /* published between our two looks at the ring */
      fs_log(FS_LOG_WARN, "fd %d: unexpected record type %u on the fabric; resetting", fd, t);
      return -ECONNRESET;
    }
    if (fs_chan_peer_closed(ch)) {
      /* A polled fabric learns of the close out of band (rdma: the
       * disconnect, taken by the agent): its last records may have come
       * since this step's look. */
      if (ch->ops->polled && (fs_chan_progress(ch), !fs_ring_empty(&ch->rx)))
        continue;
      fs_cutover_broken(c, ch, fd);
      if (c->reset_rx && !peek) { /* the peer died with our bytes unread: its reset */
        c->reset_rx = false;
        return -ECONNRESET;
      }
      /* Closed without EOF: an abort (SO_LINGER {1, 0}) resets TCP first. */
      ssize_t lv = c->peer_dead ? 0 : fs_sockio_liveness(fd);
      if (lv < 0 && lv != -EAGAIN)
        return lv;
      fs_log(FS_LOG_DEBUG, "fd %d: peer closed, ring empty (tcp_rx %llu fab_rx %llu)", fd,
             (unsigned long long)c->tcp_rx, (unsigned long long)c->fab_rx);
      return 0; /* closed with its tx on TCP or after EOF was consumed */
    }
    return -EAGAIN;
  }
}

/* A blocking read that needs `need` > 1 bytes before it returns (MSG_PEEK
 * | MSG_WAITALL: all it asks for; SO_RCVLOWAT: min(lowat, len)), as the
 * kernel makes it wait: until the current source holds that many, or says
 * that no more comes first (a control record or EOF in the ring, the peer
 * gone, a FIN).  On TCP the kernel's POLLIN waits for SO_RCVLOWAT bytes:
 * the application's own, or, for a peek, `need` set for the wait.  0 when
 * the read may go on; -EAGAIN (SO_RCVTIMEO), -EINTR. */
static int fs_sockio_rx_gather(struct fs_conn *c, int fd, size_t need, bool peek, int *budget)
{
  int set_lowat = 0, rc = 0;
  for (;;) {
    struct fs_chan *ch = fs_cutover_chan(c);
    if (c->rx_flow == FS_FLOW_FABRIC && ch) {
      if (fs_wait_cond_rx(ch, &need) || (fs_chan_arm_rx(ch) && fs_wait_cond_rx(ch, &need)))
        break;
    } else if (c->rx_flow == FS_FLOW_TCP) {
      int q = 0;
      struct tcp_info ti;
      socklen_t tl = sizeof ti;
      if ((ch && !fs_ring_empty(&ch->rx)) || fs_overhang_len(c) || FS_REAL(ioctl)(fd, FIONREAD, &q) < 0 ||
          (size_t)q >= need || FS_REAL(getsockopt)(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) < 0 ||
          ti.tcpi_state != TCP_ESTABLISHED)
        break; /* enough, ring news (the SWITCH), or a FIN: the read sorts it out */
      if (peek && !set_lowat) {
        set_lowat = need > INT32_MAX ? INT32_MAX : (int)need;
        (void)FS_REAL(setsockopt)(fd, SOL_SOCKET, SO_RCVLOWAT, &set_lowat, sizeof set_lowat);
      }
    } else {
      break;
    }
    if (*budget == -2)
      *budget = fs_wait_timeo_of(c, fd, false);
    if ((rc = fs_wait_sleep(c, fd, false, need, budget)) < 0)
      break;
  }
  if (set_lowat) {
    int v = (int)__atomic_load_n(&c->rcvlowat, __ATOMIC_RELAXED);
    v = v ? v : 1;
    (void)FS_REAL(setsockopt)(fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v);
  }
  return rc;
}

static ssize_t fs_sockio_fabric_recv(struct fs_conn *c, int fd, struct fs_io *io, int flags)
{
  ssize_t usable = fs_iov_usable(io->iov, io->iovcnt);
  if (usable < 0)
    return usable;
  size_t total = (size_t)usable;
  bool peek = flags & MSG_PEEK, waitall = (flags & MSG_WAITALL) && !peek;
  bool nonblock = c->nonblock || (flags & MSG_DONTWAIT);
  size_t got = 0;
  int budget = -2;
  if (total == 0) { /* as TCP: 0 if data or EOF is there, else EAGAIN if non-blocking */
    struct fs_chan *ch = fs_cutover_chan(c);
    if (c->rx_flow == FS_FLOW_FABRIC && ch && !fs_chan_rx_ready(ch) && !fs_chan_peer_closed(ch) && nonblock)
      return -EAGAIN;
    if (c->rx_flow == FS_FLOW_TCP && nonblock)
      return fs_overhang_len(c) ? 0 : fs_sockio_tcp_read(fd, io, 0, 0);
    return 0; /* a blocking zero-length read does not wait */
  }
  /* MSG_PEEK | MSG_WAITALL waits for all it asks for, SO_RCVLOWAT for its
   * count; a timeout or a signal then ends the wait with what is there. */
  size_t lowat = __atomic_load_n(&c->rcvlowat, __ATOMIC_RELAXED);
  size_t need = peek && (flags & MSG_WAITALL) ? total : !waitall && lowat > 1 ? (lowat < total ? lowat : total) : 0;
  int gather_rc = 0;
  if (need > 1 && !nonblock && (gather_rc = fs_sockio_rx_gather(c, fd, need, peek, &budget)) < 0)
    nonblock = true;
  /* How long this call waited: spins are estimated (fs_wait_spin), the
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
        fs_wait_adapt(c, w);
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
    struct fs_chan *ch = fs_cutover_chan_known(c, false); /* rx_step just looked */
    if (ch && c->rx_flow == FS_FLOW_FABRIC) {
      if (!nonblock) {
        uint64_t s1;
        bool ok = fs_wait_spin(c, fs_wait_cond_rx, ch, NULL, &s1);
        spun_ns += s1;
        waited = true;
        if (ok)
          continue;
      }
      if (fs_chan_arm_rx(ch))
        continue;
      ssize_t lv = fs_sockio_live_check(c, fd);
      if (lv != -EAGAIN) {
        if (got)
          break;
        if (fs_chan_rx_ready(ch))
          continue; /* the EOF record beat the TCP close */
        if (lv == 0 && fs_cutover_peer_died(c, ch))
          continue; /* it died: reset or EOF, as its kernel would have said */
        fs_log(FS_LOG_DEBUG, "fd %d: tcp says %zd with the ring empty: peer gone", fd, lv);
        return lv;
      }
    } else if (ch && fs_chan_arm_rx(ch) && fs_cutover_switch_due(c, ch)) {
      continue; /* the SWITCH came while we looked at TCP: no wake will say so */
    }
    if (nonblock)
      return got ? (ssize_t)got : gather_rc ? gather_rc : -EAGAIN;
    if (budget == -2)
      budget = fs_wait_timeo_of(c, fd, false);
    fs_cutover_service(c, fd);
    if (waited && !slept_at)
      slept_at = fs_clock_us();
    int rc = fs_wait_sleep(c, fd, false, 0, &budget);
    if (rc < 0)
      return got ? (ssize_t)got : rc;
  }
  return (ssize_t)got;
}

static ssize_t fs_sock_recv_up(struct fs_conn *c, int fd, struct fs_io *io);

ssize_t fs_sock_recv(struct fs_conn *c, int fd, struct fs_io *io)
{
  fs_hold_use(c);
  if (__builtin_expect(c->connecting, 0))
    return fs_sock_io_connecting(c, fd, io, fs_sock_recv_up);
  return fs_sock_recv_up(c, fd, io);
}

static ssize_t fs_sock_recv_up(struct fs_conn *c, int fd, struct fs_io *io)
{
  if (c->hook_closed)
    return -ECONNABORTED;
  if (__builtin_expect(fs_gpuio_device(io), 0))
    return fs_gpuio_recv(c, fd, io, fs_sock_recv);
  int flags = fs_io_flags(io);
  /* The urgent byte and the error queue are the kernel's, outside the
   * stream: a fabric recv(MSG_ERRQUEUE) returned (and consumed) stream bytes. */
  if (__builtin_expect(flags & (MSG_OOB | MSG_ERRQUEUE), 0))
    return fs_sock_tcp_io(fd, io);
  if (__builtin_expect(flags & MSG_TRUNC, 0) && c->hooks)
    return fs_sockio_discard(c, fd, io, fs_sock_recv_up); /* the hooks see the bytes */
  bool peek = flags & MSG_PEEK;
  struct fs_chan *ch = fs_cutover_chan_known(c, false); /* fs_sockio_rx_step takes news in */
  ssize_t r;
  int hrc;
  /* No wake fd yet: the kernel's receive, as without us; it may sleep (even
   * with O_NONBLOCK: other processes set it), so an attach waits for it. */
  bool blind = !ch && fs_wake_none(c) && !fs_overhang_len(c);
  if (blind)
    fs_door_home_mark_blind(c); /* its peer will ring this thread's door */
  if (blind && !(blind = fs_wake_blind_enter(c)))
    ch = fs_cutover_chan_known(c, false); /* attached just now */
  if (blind || (!ch && (c->no_upgrade || c->wake_fd < 0) && !fs_overhang_len(c))) {
    bool locked = c->hooks != NULL; /* hooks see one call at a time */
    if (locked) {
      /* A deferred agent starts before the lock, not in the kernel call's
       * look under it (engine/sockio_tcp.c): the agent takes connection
       * locks under its own. */
      fs_agent_wait_point(!c->nonblock && !(flags & MSG_DONTWAIT));
      fs_lock(&c->rxlock);
    }
    r = locked ? fs_sockio_tcp_locked(c, &c->rxlock, fd, io) : fs_sock_tcp_io(fd, io); /* -errno */
    if (blind)
      fs_wake_blind_leave(c);
    if (r > 0 && !peek)
      c->tcp_rx += (uint64_t)r;
    hrc = fs_sockio_hooks(c, fd, io, r, false, peek);
    fs_sockio_count(c, r, false, peek, locked);
    if (locked)
      fs_unlock(&c->rxlock);
    return fs_sockio_done(c, r, false, peek, hrc);
  }
  if (__builtin_expect(flags & MSG_TRUNC, 0))
    return fs_sockio_discard(c, fd, io, fs_sock_recv_up); /* the kernel's alone discards */
  if (ch && __builtin_expect(fs_chan_peer_reverted(ch), 0))
    fs_cutover_service(c, fd);
  fs_lock(&c->rxlock);
  r = fs_sockio_fabric_recv(c, fd, io, flags);
  hrc = fs_sockio_hooks(c, fd, io, r, false, peek);
  fs_sockio_count(c, r, false, peek, true);
  fs_unlock(&c->rxlock);
  if (r >= 0)
    fs_sockio_no_meta(io);
  return fs_sockio_done(c, r, false, peek, hrc);
}

int fs_sock_shutdown(struct fs_conn *c, int fd, int how)
{
  if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
    return -EINVAL;
  struct fs_chan *ch = fs_cutover_chan(c);
  if (ch && how != SHUT_RD) {
    fs_lock(&c->txlock);
    fs_cutover_tx_eof(c, ch);
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
