/* Waiting on a connection.  See engine/wait.h. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/hot.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/real.h"
#include "engine/cancel.h"
#include "engine/agent.h"
#include "engine/batch.h"
#include "engine/cutover.h"
#include "engine/door.h"
#include "engine/wait.h"
#include "engine/wake.h"

int fs_wait_timeo(int fd, int opt)
{
  struct timeval tv = { 0, 0 };
  socklen_t l = sizeof tv;
  if (FS_REAL(getsockopt)(fd, SOL_SOCKET, opt, &tv, &l) < 0 || (tv.tv_sec == 0 && tv.tv_usec == 0))
    return -1;
  long ms = tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000;
  return ms > 0x7fffffff ? 0x7fffffff : (int)ms;
}


/* conn tx_sleeping / rx_sleeping: how a thread sleeps (0: it does not). */
#define FS_SLEEP_RING 1 /* on the ring (its wait is over when fs_wait_over says so) */
#define FS_SLEEP_TCP 2  /* a receiver on TCP with the ring armed for the peer's SWITCH */

/* What a waiting receiver or sender waits for (need: the room it needs);
 * the spins poll them, a sleeper looks once more, a waker looks for it. */
bool fs_wait_cond_rx(struct fs_chan *ch, void *arg)
{
  size_t need = arg ? *(size_t *)arg : 1;
  fs_ring_touch_head(&ch->rx);
  fs_chan_progress(ch);
  return fs_ring_data_ahead(&ch->rx, need) || fs_chan_peer_closed(ch) ||
         __atomic_load_n(&ch->peer->rx_revert, __ATOMIC_RELAXED);
}

bool fs_wait_cond_tx(struct fs_chan *ch, void *arg)
{
  fs_chan_progress(ch);
  return fs_ring_space_for(&ch->tx, *(size_t *)arg) >= *(size_t *)arg || fs_chan_peer_closed(ch) ||
         __atomic_load_n(&ch->peer->rx_revert, __ATOMIC_RELAXED);
}

static bool fs_wait_over(struct fs_chan *ch, bool tx, size_t need)
{
  return tx ? fs_wait_cond_tx(ch, &need) : fs_wait_cond_rx(ch, need > 1 ? &need : NULL);
}

/* This thread drained a wake fd (the eventfd, or rdma's completion
 * channel) on which its connection's other direction may sleep too: data
 * and room share them, and the peer wakes once per declared interest.  If
 * the other one sleeps, its wait may be over (wake it again), or the wake
 * it was owed cleared its interest (declare it again, then look once more).
 * Its own look before sleeping, after marking itself, closes the rest. */
void fs_wait_pass_wake(struct fs_conn *c, struct fs_chan *ch, bool tx)
{
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  bool otx = !tx;
  uint32_t sl = __atomic_load_n(otx ? &c->tx_sleeping : &c->rx_sleeping, __ATOMIC_RELAXED);
  if (!sl)
    return;
  size_t need = __atomic_load_n(otx ? &c->tx_need : &c->rx_need, __ATOMIC_RELAXED);
  /* A receiver still on TCP (FS_SLEEP_TCP) waits for its socket and for
   * the peer's SWITCH in the ring at once: only it can tell, so it looks. */
  bool over = sl == FS_SLEEP_TCP || fs_wait_over(ch, otx, need);
  if (!over)
    over = otx ? fs_chan_arm_tx(ch, need, need) : fs_chan_arm_rx(ch) && fs_wait_over(ch, false, need);
  if (over)
    fs_chan_efd_write(__atomic_load_n(&c->wake_fd, __ATOMIC_ACQUIRE)); /* (a lease that left: -1) */
}

/* Debug only (t_duplex fails on it): a sleep that ran into the bound with
 * its wait over had its wake lost, or late: a waker preempted between its
 * publish and its write (a loaded machine) wakes us after the bound.  The
 * wake fds (and the door the peer rings, dfd) tell which within 200 ms;
 * they are looked at, not drained. */
#define FS_WAIT_LATE_MS 200
static void fs_wait_bound_report(struct fs_conn *c, struct fs_chan *ch, int fd, bool tx, bool counted, size_t need,
                                 int dfd)
{
  int ready = counted ? fs_wait_over(ch, tx, need) : !tx && fs_cutover_switch_due(c, ch);
  if (ready && (c->wake_fd >= 0 || ch->wait_fd >= 0 || dfd >= 0)) {
    struct pollfd p[3] = { { c->wake_fd, POLLIN, 0 }, { ch->wait_fd, POLLIN, 0 }, { dfd, POLLIN, 0 } };
    uint64_t t0 = fs_clock_us();
    if (FS_REAL(poll)(p, 3, FS_WAIT_LATE_MS) > 0) {
      fs_log(FS_LOG_DEBUG, "fd %d: %s wait on %s: its wake came %llu us after the %d ms bound (late, not lost)",
             fd, tx ? "tx" : "rx", ch->ops->name, (unsigned long long)(fs_clock_us() - t0), FS_WAIT_BOUND_MS);
      return;
    }
  }
  fs_log(FS_LOG_DEBUG, "fd %d: %s wait on %s ran into the %d ms bound (ready now: %d)", fd, tx ? "tx" : "rx",
         ch->ops->name, FS_WAIT_BOUND_MS, ready);
}

/* Sleep until the wake fd or the TCP socket says something (need: the room
 * a sender waits for; the bytes a receiver waits for, 0 or 1: any).
 * Returns 0, -EAGAIN on SO_*TIMEO expiry, -EINTR. */
static int fs_wait_sleep_in(struct fs_conn *c, struct fs_chan *ch, struct fs_door *door, int fd, bool tx,
                            size_t need, int *budget_ms)
{
  int wfd = ch ? ch->wait_fd : -1;
  int dfd = door ? fs_wake_door_fd(door) : -1;
  uint32_t *sleeping = tx ? &c->tx_sleeping : &c->rx_sleeping;
  /* A wait on the ring itself; or a receiver still on TCP that armed the
   * ring for the peer's SWITCH: the wake it is owed may be drained by the
   * sender too (marked, so that one hands it on), though only its socket
   * and the SWITCH can tell whether its wait is over. */
  bool counted = ch && c->wake_fd >= 0 && (tx ? c->tx_flow : c->rx_flow) == FS_FLOW_FABRIC;
  bool marked = counted || (!tx && ch && c->wake_fd >= 0);
  if (marked) {
    __atomic_store_n(tx ? &c->tx_need : &c->rx_need, need, __ATOMIC_RELAXED);
    __atomic_store_n(sleeping, counted ? FS_SLEEP_RING : FS_SLEEP_TCP, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    /* The look after marking, for the TCP sleeper too: its caller's look
     * came before the mark, and a door drained by the other direction's
     * thread in between (the peer's ring for our SWITCH) hands the wake on
     * only to a marked sleeper.  A wake fd the peer writes itself keeps
     * it; a door does not. */
    if (counted ? fs_wait_over(ch, tx, need) : fs_cutover_switch_due(c, ch)) {
      __atomic_store_n(sleeping, 0, __ATOMIC_RELAXED);
      return 0;
    }
    /* Arming drained the fabric's own event fd (rdma's completion channel,
     * shared by both directions too): the other one may need its wake. */
    if (wfd >= 0)
      fs_wait_pass_wake(c, ch, tx);
  }
  /* A sender watches for the peer's FIN (its death, fs_cutover_peer_died),
   * unless the peer half-closed alive: then only HUP/ERR, or it would spin. */
  short tcp_ev = tx ? (c->alive_ns ? 0 : POLLRDHUP) : (POLLIN | POLLRDHUP);
  /* p[0] the wake fd, p[1] the TCP socket, then the fabric's event fd and
   * the door where they are. */
  struct pollfd p[4] = { { c->wake_fd, POLLIN, 0 }, { fd, tcp_ev, 0 } };
  int nfds = 2, iwait = -1, idoor = -1;
  if (wfd >= 0) {
    iwait = nfds;
    p[nfds++] = (struct pollfd){ wfd, POLLIN, 0 };
  }
  if (dfd >= 0) {
    idoor = nfds;
    p[nfds++] = (struct pollfd){ dfd, POLLIN, 0 };
  }
  struct pollfd *pp = p;
  if (c->wake_fd < 0) {
    pp = &p[1];
    nfds--;
  }
  uint64_t t0 = *budget_ms >= 0 ? fs_clock_us() : 0;
  /* The wake fd is shared by this connection's sender and receiver (and
   * any poll), and each drains it; fs_wait_pass_wake hands on a wake the
   * other one needed.  Still no sleep lasts more than FS_WAIT_BOUND_MS
   * before the caller looks again (a poll() or epoll_wait elsewhere drains
   * it too): a wake lost that way costs milliseconds, never a hang. */
  int cap = *budget_ms < 0 || *budget_ms > FS_WAIT_BOUND_MS ? FS_WAIT_BOUND_MS : *budget_ms;
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
  if (p[1].revents)
    __atomic_store_n(&c->tcp_news, true, __ATOMIC_RELAXED); /* fs_sockio_live_check asks */
  if (c->wake_fd >= 0 && (p[0].revents & POLLIN)) {
    uint64_t v;
    if (FS_REAL(read)(c->wake_fd, &v, sizeof v) == (ssize_t)sizeof v && marked)
      fs_wait_pass_wake(c, ch, tx);
  }
  if (iwait >= 0 && (p[iwait].revents & POLLIN)) {
    ch->ops->drain(ch);
    if (marked)
      fs_wait_pass_wake(c, ch, tx);
  }
  if (idoor >= 0 && (p[idoor].revents & POLLIN))
    fs_door_fd_woken(door, dfd); /* our own wait's end is looked at by the caller */
  if (r == 0 && ch && cap == FS_WAIT_BOUND_MS && FS_LOG_DEBUG <= fs_log_level)
    fs_wait_bound_report(c, ch, fd, tx, counted, need, dfd);
  return 0;
}

int fs_wait_sleep(struct fs_conn *c, int fd, bool tx, size_t need, int *budget_ms)
{
  /* Not cancelled asleep with our locks held: at the boundary, or by a
   * slice's end once asked (engine/cancel.h). */
  fs_cancel_hold();
  if (fs_cancel_asked())
    return -EINTR;
  fs_batch_flush(); /* never sleep on wakes we hold */
  /* A connection still on TCP with a wake fd sleeps here, not in the
   * kernel's receive: a deferred agent starts here too (engine/agent.h;
   * t_nginx's idle client waited here for its replies, then in time.sleep). */
  if (__builtin_expect(__atomic_load_n(&fs_agent_deferred, __ATOMIC_RELAXED), 0))
    fs_agent_start_deferred_try();
  struct fs_chan *ch = __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE);
  bool entered = false;
  struct fs_door *door = ch ? fs_wake_door_enter(c, &entered) : NULL;
  int rc = fs_wait_sleep_in(c, ch, door, fd, tx, need, budget_ms);
  if (entered)
    fs_wake_door_leave(c);
  return rc == 0 && fs_cancel_asked() ? -EINTR : rc;
}

/* Nanoseconds one spin iteration takes, learnt at the spins' clock checks.
 * The clock is read only every 256 iterations, never when the wait ends
 * sooner: on hardware a read costs ~20 ns, but where the clock source is
 * emulated (hpet in a VM) it is a system call of microseconds, and a read
 * after every wake-up put that on every round trip. */
static uint32_t fs_wait_ns_iter FS_HOT = 50;

/* Spin up to the connection's budget for cond(); *spun_ns: for how long
 * (estimated).  Every ~256 pauses we yield, so a peer woken onto our core
 * gets to run. */
#define FS_WAIT_LOAD_NS 4000000ull

static int fs_wait_ncpu(void)
{
  static int n FS_HOT;
  int v = __atomic_load_n(&n, __ATOMIC_RELAXED);
  if (v == 0) {
    cpu_set_t set;
    v = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    __atomic_store_n(&n, v > 0 ? v : 1, __ATOMIC_RELAXED);
  }
  return v;
}

/* This thread's CPU time and run-queue wait, in ns, from
 * /proc/thread-self/schedstat ("1234 567 89": run, wait, slices).  False
 * where it cannot be read (no /proc, a kernel without schedstats). */
static bool fs_wait_schedstat(uint64_t *run, uint64_t *wait)
{
  char buf[96];
  if (fs_proc_read("/proc/thread-self/schedstat", buf, sizeof buf) == 0)
    return false;
  int saved = errno; /* strtoull's ERANGE is not the application's */
  char *end, *p;
  *run = strtoull(buf, &end, 10);
  bool ok = end != buf && *end == ' ';
  if (ok) {
    p = end + 1;
    *wait = strtoull(p, &end, 10);
    ok = end != p;
  }
  errno = saved;
  return ok;
}

static __thread struct fs_wait_crowd fs_wait_crowd_tls __attribute__((tls_model("initial-exec")));

bool fs_wait_cpu_crowded(uint64_t now)
{
  struct fs_wait_crowd *t = &fs_wait_crowd_tls;
  if (now < t->quiet_until)
    return true; /* no look while it keeps still */
  uint64_t run, wait;
  return fs_wait_schedstat(&run, &wait) && fs_wait_crowd_step(t, now, run, wait);
}

bool fs_wait_spin_worth(void)
{
  static uint64_t when FS_HOT;
  static bool worth FS_HOT = true;
  static __thread uint64_t when_tls __attribute__((tls_model("initial-exec")));
  static __thread bool worth_tls __attribute__((tls_model("initial-exec")));
  /* On a one-CPU machine whoever we wait for (the peer process on shm, a
   * software RDMA device such as Soft-RoCE) needs the CPU we would spin on:
   * between two one-vCPU Soft-RoCE guests the spin made sockperf's p50 1.8x
   * raw verbs' instead of 1.2x.  (The machine's count, not our affinity: a
   * process pinned to one core of many may well wait for another core.)
   * busy_poll still spins. */
  static int online FS_HOT;
  if (!online)
    __atomic_store_n(&online, (int)sysconf(_SC_NPROCESSORS_ONLN), __ATOMIC_RELAXED);
  if (online == 1)
    return false;
  uint64_t now = fs_clock_coarse_ns();
  if (now - when_tls >= FS_WAIT_LOAD_NS) {
    when_tls = now;
    worth_tls = !fs_wait_cpu_crowded(now);
  }
  if (!worth_tls)
    return false;
  if (now - __atomic_load_n(&when, __ATOMIC_RELAXED) < FS_WAIT_LOAD_NS)
    return __atomic_load_n(&worth, __ATOMIC_RELAXED);
  __atomic_store_n(&when, now, __ATOMIC_RELAXED);
  char buf[128];
  bool w = true;
  /* "0.52 0.58 0.59 3/291 12345": the fourth field is running/threads,
   * the running count includes us. */
  if (fs_proc_read("/proc/loadavg", buf, sizeof buf) > 0) {
    char *p = buf;
    for (int f = 0; f < 3 && p; f++)
      p = strchr(p + 1, ' ');
    if (p)
      w = atoi(p + 1) <= fs_wait_ncpu() + 1; /* a passer-by (a kworker) is no crowd */
  }
  __atomic_store_n(&worth, w, __ATOMIC_RELAXED);
  return w;
}

bool fs_wait_spin(struct fs_conn *c, bool (*cond)(struct fs_chan *, void *), struct fs_chan *ch, void *arg,
                           uint64_t *spun_ns)
{
  fs_batch_flush(); /* the peer we wait for may wait for our wake */
  bool busy = false;
  uint32_t budget = fs_wait_spin_bound(&c->policy, c->spin_us, &busy);
  *spun_ns = 0;
  if (budget == 0 || (!busy && !fs_wait_spin_worth()))
    return cond(ch, arg);
  uint32_t npi = __atomic_load_n(&fs_wait_ns_iter, __ATOMIC_RELAXED);
  uint64_t first = 0; /* the clock at the first check */
  /* No PAUSE where each look polls a completion queue: the poll is a long
   * enough breather (perftest and rsocket spin the same way), and under an
   * emulated CPU a PAUSE leaves the translated code, ~0.4 us per look. */
  bool polls = ch->ops->polled;
  for (unsigned i = 0;; i++) {
    if (cond(ch, arg)) {
      *spun_ns = (uint64_t)i * npi;
      return true;
    }
    if (!polls)
      __builtin_ia32_pause();
    if ((i & 255) == 255) {
      uint64_t spent = fs_clock_spin_check(&first, &npi, i + 1, 256);
      __atomic_store_n(&fs_wait_ns_iter, npi, __ATOMIC_RELAXED);
      if (spent >= (uint64_t)budget * 1000u) {
        *spun_ns = spent;
        return false;
      }
      sched_yield();
    }
  }
}


