/* epoll over tracked sockets: epoll_wait, with the spin on fabric rings
 * before the kernel sleep.  See engine/epoll.h and engine/ready.h. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>

#include "base/hot.h"
#include "base/clock.h"
#include "base/real.h"
#include "engine/batch.h"
#include "engine/cutover.h"
#include "engine/overhang.h"
#include "engine/epoll.h"
#include "engine/fdtab.h"
#include "engine/ready.h"
#include "engine/sock.h"
#include "engine/sockio.h"
#include "engine/wait.h"
#include "engine/wake.h"

/* The kernel wait.  epoll_pwait2 takes the slices' nanosecond timeout, but
 * kernels before 5.11, seccomp profiles written before it and valgrind
 * (3.19: "unhandled syscall 441") answer ENOSYS: nginx then saw every
 * epoll_wait fail and spun for ever.  So the first ENOSYS switches this
 * process to epoll_pwait, the timeout rounded up to whole milliseconds.
 * errno is the kernel's on failure and left alone otherwise. */
static bool fs_ep_no_pwait2 FS_HOT;

static int fs_ep_kwait(int epfd, struct epoll_event *ev, int n, const struct timespec *t, const sigset_t *mask)
{
  int saved = errno;
  if (!__atomic_load_n(&fs_ep_no_pwait2, __ATOMIC_RELAXED)) {
    int k = FS_REAL(epoll_pwait2)(epfd, ev, n, t, mask);
    if (k >= 0 || errno != ENOSYS)
      return k;
    __atomic_store_n(&fs_ep_no_pwait2, true, __ATOMIC_RELAXED);
  }
  int ms = -1;
  if (t) {
    uint64_t v = (uint64_t)t->tv_sec * 1000u + ((uint64_t)t->tv_nsec + 999999u) / 1000000u;
    ms = t->tv_sec < 0 ? 0 : v > INT_MAX ? INT_MAX : (int)v;
  }
  int k = FS_REAL(epoll_pwait)(epfd, ev, n, ms, mask);
  if (k >= 0)
    errno = saved;
  return k;
}

/* EPOLLET on a fabric: has a ring moved since e's last report? */
static bool fs_ep_moved(struct fs_ep_ent *e, struct fs_chan *ch)
{
  return e->edge_pending || fs_ring_load(&ch->rx.ctl->tail) != e->et_rx_tail ||
         fs_ring_load(&ch->tx.ctl->head) != e->et_tx_head;
}

/* Cheap look at an idle entry's rings (no locks, no arming): has it what
 * its interest asks for? */
static bool fs_ep_peek(struct fs_ep_ent *e)
{
  struct fs_chan *ch = __atomic_load_n(&e->c->chan, __ATOMIC_ACQUIRE);
  if (!ch || e->oneshot_fired || e->c->reverted)
    return false;
  if ((e->events & EPOLLET) && !fs_ep_moved(e, ch) && !fs_chan_peer_closed(ch))
    return false;
  /* Only what fs_sockio_ready would report: while rx is still on TCP a
   * ring holding just the peer's SWITCH is not readable (the bytes before
   * it are on TCP, which the kernel reports).  Calling that readable made
   * epoll_wait spin forever without asking the kernel. */
  if ((e->events & EPOLLIN) && e->c->rx_flow == FS_FLOW_FABRIC &&
      ((fs_chan_progress(ch), fs_ring_data_ahead(&ch->rx, __atomic_load_n(&e->c->rcvlowat, __ATOMIC_RELAXED))) ||
       fs_chan_peer_closed(ch)))
    return true;
  /* Bytes read past the peer's SWITCH, kept aside (engine/overhang.h),
   * next once rx is back on TCP: no kernel event tells of them. */
  if ((e->events & EPOLLIN) && fs_overhang_len(e->c) &&
      (e->c->rx_flow == FS_FLOW_TCP || fs_cutover_revert_head(ch)))
    return true;
  /* rx still on TCP with the peer's SWITCH at the ring's head: no wake will
   * come for what follows it (the peer's interest flag was ours to set),
   * and the kernel has nothing to say once the TCP bytes before it are
   * read.  Let fs_ep_report look: it moves rx over when the SWITCH is due;
   * until then (TCP bytes still to come) the spin stops after one look. */
  uint64_t n;
  if ((e->events & EPOLLIN) && e->c->rx_flow == FS_FLOW_TCP && !fs_ring_empty(&ch->rx) &&
      fs_cutover_switch_head(ch, &n) == 1)
    return true;
  return (e->events & EPOLLOUT) && e->c->tx_flow == FS_FLOW_FABRIC && fs_chan_tx_ready(ch);
}

static bool fs_ep_peek_idle(struct fs_ep *ep)
{
  for (struct fs_ep_ent *e = ep->idle; e; e = e->inext)
    if (fs_ep_peek(e))
      return true;
  return false;
}

/* Spin up to ep->spin_us for fabric readiness before the kernel sleep,
 * asking the kernel (without sleeping) every 64 looks for the other fds.
 * The clock is read only then (see fs_wait_spin: where the clock source
 * is emulated a read costs microseconds); *spun_us is estimated from the
 * looks and the time one takes.  Returns kernel events gathered meanwhile
 * (>0), 0, or -errno. */
static int fs_ep_spin(struct fs_ep *ep, int epfd, uint32_t budget_us, struct epoll_event *kev, int room,
                      const sigset_t *mask, bool *ready, uint64_t *spun_us)
{
  struct timespec zero = { 0, 0 };
  uint32_t npi = __atomic_load_n(&ep->ns_look, __ATOMIC_RELAXED);
  uint64_t first = 0;
  *ready = false;
  for (unsigned i = 1;; i++) {
    pthread_mutex_lock(&ep->lock);
    bool r = fs_ep_peek_idle(ep);
    pthread_mutex_unlock(&ep->lock);
    if (r) {
      *ready = true;
      *spun_us = (uint64_t)i * npi / 1000u;
      return 0;
    }
    for (int k = 0; k < 8; k++)
      __builtin_ia32_pause();
    if ((i & 63) == 0) {
      int k = fs_ep_kwait(epfd, kev, room, &zero, mask);
      int e = errno;
      uint64_t spent = fs_clock_spin_check(&first, &npi, i, 64);
      __atomic_store_n(&ep->ns_look, npi, __ATOMIC_RELAXED);
      *spun_us = spent / 1000u;
      if (k != 0)
        return k < 0 ? -e : k;
      if (spent >= (uint64_t)budget_us * 1000u)
        return 0;
    }
  }
}

static void fs_ep_adapt(struct fs_ep *ep, uint64_t w)
{
  ep->spin_us = fs_wait_adapt_us(ep->spin_us, w);
}

static uint32_t fs_ep_eval(struct fs_ep_ent *e, uint32_t kernel, bool arm)
{
  struct fs_conn *c = e->c;
  if (__builtin_expect(c->connecting, 0) && (kernel & EPOLLOUT) && !(kernel & (EPOLLERR | EPOLLHUP)))
    fs_sock_check_connected(c, e->fd, true);
  struct fs_chan *ch = fs_cutover_chan(c);
  if (!ch)
    return kernel & (e->events | EPOLLERR | EPOLLHUP);
  fs_cutover_service(c, e->fd);
  short r = fs_sockio_ready(c, ch, (short)e->events, (short)kernel, arm);
  return (uint32_t)(unsigned short)r & (e->events | EPOLLERR | EPOLLHUP);
}

/* Arm e, then look (Dekker with the peer's kick): what is there already is
 * looked at in the next pass; otherwise its peer's next publish wakes us
 * (ep->lock held). */
static void fs_ep_arm(struct fs_ep *ep, struct fs_ep_ent *e)
{
  fs_ep_idle_del(ep, e);
  struct fs_chan *ch = __atomic_load_n(&e->c->chan, __ATOMIC_ACQUIRE);
  if (fs_ep_eval(e, 0, true) && (!(e->events & EPOLLET) || (ch && fs_ep_moved(e, ch))))
    fs_ep_recheck_add(ep, e);
}

/* e was looked at and not armed: peek at it from now on, arm it before a
 * sleep (ep->lock held). */
static void fs_ep_idle_add(struct fs_ep *ep, struct fs_ep_ent *e)
{
  if (e->on_idle || e->on_recheck || !__atomic_load_n(&e->c->chan, __ATOMIC_ACQUIRE))
    return;
  e->on_idle = true;
  e->iprev = NULL;
  e->inext = ep->idle;
  if (ep->idle)
    ep->idle->iprev = e;
  else
    ep->idle_tail = e;
  ep->idle = e;
  if (++ep->nidle > FS_EP_IDLE_MAX)
    fs_ep_arm(ep, ep->idle_tail);
}

/* About to sleep in the kernel: arm every idle entry.  False if one had
 * something already (it is on the recheck list: do not sleep). */
static bool fs_ep_arm_idle(struct fs_ep *ep)
{
  while (ep->idle)
    fs_ep_arm(ep, ep->idle);
  return ep->recheck == NULL;
}

/* Report ev for entry e: an fd appears at most once per epoll_wait result
 * (applications free per-fd state on the first event), so a second source
 * for the same entry (TCP and wake fd, or the fabric pre-check) is merged.
 * src[i] names the entry behind out[i] (NULL for untracked fds). */
static int fs_ep_emit(struct epoll_event *out, struct fs_ep_ent **src, int n, struct fs_ep_ent *e, uint32_t ev)
{
  for (int i = 0; i < n; i++)
    if (src[i] == e) {
      out[i].events |= ev;
      return n;
    }
  out[n].events = ev;
  out[n].data = e->data;
  src[n] = e;
  return n + 1;
}

/* Look at every entry that is (or may become) a fabric one in the next
 * pass; used when a wake's owner is unknown (ep->lock not held). */
static void fs_ep_recheck_fabric(struct fs_ep *ep)
{
  pthread_mutex_lock(&ep->lock);
  for (struct fs_ep_ent *e = ep->ents; e; e = e->next)
    if (e->wake_reg || __atomic_load_n(&e->c->chan, __ATOMIC_ACQUIRE))
      fs_ep_recheck_add(ep, e);
  pthread_mutex_unlock(&ep->lock);
}

/* Entries whose wake fd could not be registered at ADD (the connection was
 * not up yet): finish their set-up (ep->lock held). */
static void fs_ep_setup(struct fs_ep *ep)
{
  for (struct fs_ep_ent *e = ep->ents; e && ep->nsetup > 0; e = e->next) {
    if (!e->needs_setup)
      continue;
    /* Connected shows as EPOLLOUT, which fs_ep_eval sees when the
     * application asked for it: no getpeername at every pass till then. */
    if (e->c->connecting && !(e->events & EPOLLOUT))
      fs_sock_check_connected(e->c, e->fd, false);
    /* Connected now: its wake fd comes with its rendezvous (the bell), or
     * now where the set has no bell. */
    bool up = e->c->dir && !e->c->connecting;
    if (up && ep->bell < 0 && fs_ep_bell(ep) < 0)
      fs_wake_for_epoll(e->c);
    fs_ep_reg_conn(ep, e);
    if (e->wake_reg || e->door_reg || (up && ep->bell >= 0) || (e->c->no_upgrade && !e->c->connecting) ||
        fs_conn_state(e->c) == FS_STATE_LISTEN) {
      e->needs_setup = false;
      ep->nsetup--;
      fs_ep_recheck_add(ep, e);
    }
  }
}

/* A fabric with its own event fd (rdma's completion channel): put it in the
 * kernel set beside the wake fd, with the same tag.  Done when the entry is
 * looked at, which the attach's wake-fd write guarantees (ep->lock held). */
static void fs_ep_reg_wait(struct fs_ep *ep, struct fs_ep_ent *e)
{
  struct fs_chan *ch = __atomic_load_n(&e->c->chan, __ATOMIC_ACQUIRE);
  if (!ch || ch->wait_fd < 0)
    return;
  int rc = fs_ep_add_wake(ep->epfd, ch->wait_fd, e);
  if (rc == 0 || rc == -EEXIST)
    e->wait_fd = ch->wait_fd;
}

/* Evaluate e and report it.  Level-triggered entries that were reported
 * are looked at again next time; an entry not reported is armed while a
 * thread sleeps on ep, idle otherwise. */
static int fs_ep_report(struct fs_ep *ep, int epfd, struct fs_ep_ent *e, uint32_t kernel, struct epoll_event *out,
                        struct fs_ep_ent **src, int n, int max)
{
  fs_ep_idle_del(ep, e);
  if (e->oneshot_fired)
    return n;
  bool arm = ep->sleepers > 0;
  struct fs_conn *c = e->c;
  bool masked = false;
  kernel |= e->kowed;
  e->kowed = 0;
  if (fs_cutover_chan(c)) {
    ep->had_chan = true;
    /* Its bell may not have been heard yet: register its wakes now (on
     * failure, or with nothing to register, the safety net stays on). */
    if (!e->wake_reg && !e->door_reg && !e->parked) {
      fs_ep_reg_conn(ep, e);
      if (!e->wake_reg && !e->door_reg)
        ep->any_fabric = true;
    }
    masked = c->tx_flow == FS_FLOW_FABRIC;
    if (e->wait_fd < 0)
      fs_ep_reg_wait(ep, e);
  }
  if (masked != e->out_masked)
    fs_ep_kmod(epfd, e, fs_ep_kernel_events(e));
  /* EPOLLET: the ring positions before the look, never after it.  Bytes
   * that land between the look and a later snapshot would be counted as
   * reported without being in the mask, and no later edge would come for
   * them: nginx, its 1 MiB reply sent, waited forever for the next request
   * of a keep-alive connection already in its ring. */
  struct fs_chan *ch = (e->events & EPOLLET) ? __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE) : NULL;
  uint64_t rx_tail = 0, tx_head = 0;
  if (ch) {
    rx_tail = fs_ring_load(&ch->rx.ctl->tail);
    tx_head = fs_ring_load(&ch->tx.ctl->head);
  }
  uint32_t r = fs_ep_eval(e, kernel, arm);
  /* Like the kernel, an edge reports the whole current mask.  Room made
   * by the peer's reading counts as an edge even when we were writable
   * (the kernel only counts it after a full buffer): a spurious edge costs
   * an EAGAIN, a missed one a hang. */
  if (ch && !e->edge_pending && !kernel && rx_tail == e->et_rx_tail && tx_head == e->et_tx_head)
    r = 0;
  if (!r) {
    if (!arm)
      fs_ep_idle_add(ep, e);
    return n;
  }
  if (n >= max) {
    /* No room: the next call.  The kernel's part goes with it: its
     * registration follows the application's EPOLLET and will not say it
     * again.  A door's expansion (up to 32 entries for one kernel event)
     * can fill the result before the batch's last events: a burst of 1000
     * upgrading connections left a few with their TCP bytes (or FIN) in
     * the socket, never reported (t_manyconn, echosrv -e). */
    e->kowed |= kernel;
    fs_ep_recheck_add(ep, e);
    return n;
  }
  e->edge_pending = false;
  if (ch) {
    e->et_rx_tail = rx_tail;
    e->et_tx_head = tx_head;
  }
  n = fs_ep_emit(out, src, n, e, r);
  if (e->events & EPOLLONESHOT) {
    e->oneshot_fired = true;
    fs_ep_kmod(epfd, e, 0);
  } else if (!(e->events & EPOLLET)) {
    fs_ep_recheck_add(ep, e);
  } else if (!arm) {
    fs_ep_idle_add(ep, e);
  }
  return n;
}

/* The kernel's events: the application's handed on, ours translated
 * (ep->lock held).  Returns the new count in out. */
static int fs_ep_results(struct fs_ep *ep, int epfd, const struct epoll_event *kst, int k, struct epoll_event *out,
                         struct fs_ep_ent **src, int n, int max)
{
  /* Entries a door names are reported now, unless the batch holds events
   * of plain registrations: one of those may be a connection that the
   * bell's pass below makes an entry, and its fd must not appear twice in
   * one result (stress: the server freed its state at the first and used
   * it at the second).  They then go on the re-check list. */
  bool plain = false;
  for (int i = 0; i < k && !plain; i++)
    plain = !fs_ep_tag(ep, kst[i].data.u64);
  for (int i = 0; i < k; i++) {
    struct fs_ep_ent *e = fs_ep_tag(ep, kst[i].data.u64);
    if (!e) {
      src[n] = NULL;
      out[n++] = kst[i];
      continue;
    }
    if (e == FS_EP_STALE)
      continue;
    if (e->is_door) { /* connections rang: look at their entries now */
      struct fs_ep_ent *rang[32];
      int nr = fs_ep_door_event(ep, e, rang, plain ? 0 : 32);
      for (int j = 0; j < nr; j++)
        n = fs_ep_report(ep, epfd, rang[j], 0, out, src, n, max);
      continue;
    }
    if (e->is_bell) { /* wake fds to register: their entries are looked at next */
      struct fs_ep_ent *t = fs_ep_door_of_bell(ep); /* and the door's rings */
      if (t) {
        struct fs_ep_ent *rang[32];
        int nr = fs_ep_door_event(ep, t, rang, plain ? 0 : 32);
        for (int j = 0; j < nr; j++)
          n = fs_ep_report(ep, epfd, rang[j], 0, out, src, n, max);
      }
      fs_ep_pend_run(ep); /* edge-triggered: each ring is an edge */
      continue;
    }
    if (e->parked) { /* news for an fd nobody waits on here: forget it */
      fs_ep_list_del(&ep->parked, e);
      fs_ep_unlink(e);
      continue;
    }
    bool wake = kst[i].data.u64 & 1;
    n = fs_ep_report(ep, epfd, e, wake ? 0 : kst[i].events, out, src, n, max);
  }
  return n;
}

/* Nothing of ours to look at or arm: no entry (every registration plain,
 * engine/epoll.c), nothing queued, no fabric.  Read without the lock, as
 * if the lock had been taken a moment earlier: an entry made meanwhile is
 * looked at by the next call, as one made after a look under the lock. */
static bool fs_ep_simple(const struct fs_ep *ep)
{
  return __atomic_load_n(&ep->nents, __ATOMIC_RELAXED) == 0 && !__atomic_load_n(&ep->parked, __ATOMIC_RELAXED) &&
         __atomic_load_n(&ep->npend, __ATOMIC_ACQUIRE) == 0 && !__atomic_load_n(&ep->recheck, __ATOMIC_RELAXED) &&
         !__atomic_load_n(&ep->idle, __ATOMIC_RELAXED) && !__atomic_load_n(&ep->nwake, __ATOMIC_RELAXED) &&
         !__atomic_load_n(&ep->any_fabric, __ATOMIC_RELAXED);
}

int fs_ready_epoll_wait(int epfd, struct epoll_event *out, int max, const struct timespec *ts, const sigset_t *mask)
{
  fs_batch_flush(); /* the loop's last batch is over */
  struct fs_ep *ep = fs_ep_get(epfd, false);
  if (max <= 0)
    return -EINVAL;
  /* At most FS_EP_OUT events a call (fewer than asked is epoll's right;
   * what is left is looked at next call), so that src fits on the stack:
   * nginx asks 512, and a malloc and free per call were a seventh of the
   * instructions the library added to a connection-per-request. */
  enum { FS_EP_OUT = 128 };
  if (max > FS_EP_OUT)
    max = FS_EP_OUT;
  struct epoll_event kst[64];
  int kmax = max < 64 ? max : 64;
  struct fs_ep_ent *src[FS_EP_OUT];
  int ret;
  /* The deadline is set when the call first sleeps: until then the whole
   * timeout is left (no clock read for a call that finds work). */
  uint64_t deadline = 0;
  bool spun_nothing = false;
  for (;;) {
    int n = 0, k;
    if (fs_ep_simple(ep)) {
      /* One kernel call, its events handed on as they are; one of ours
       * (the bell: a connection to make an entry of) goes the long way. */
      struct timespec left;
      const struct timespec *t = ts && !deadline ? ts : fs_clock_left(ts, deadline, &left);
      if (ts && !deadline && (ts->tv_sec || ts->tv_nsec))
        deadline = fs_clock_deadline(ts);
      k = fs_ep_kwait(epfd, kst, kmax, t, mask);
      if (k < 0) {
        ret = -errno;
        break;
      }
      int i = 0;
      while (i < k && !fs_ep_tag(ep, kst[i].data.u64))
        i++;
      if (i < k)
        goto results;
      memcpy(out, kst, (size_t)k * sizeof *kst);
      ret = k;
      break;
    }
    /* 1. Entries to look at again (reported last time, new, modified). */
    pthread_mutex_lock(&ep->lock);
    fs_ep_pend_run(ep);
    if (ep->nsetup > 0)
      fs_ep_setup(ep);
    struct fs_ep_ent *list = ep->recheck;
    ep->recheck = NULL;
    while (list) {
      struct fs_ep_ent *e = list;
      list = e->rnext;
      e->on_recheck = false;
      n = fs_ep_report(ep, epfd, e, 0, out, src, n, max);
    }
    /* 2. Idle fabric entries whose rings say they have news (none of them
     * waits for a sleep: a busy loop must not starve a quiet entry).  Their
     * policies bound the spin below (FABSOCK_SPIN_US=0: none). */
    uint32_t spin_us = 0;
    bool busy = false;
    for (struct fs_ep_ent *e = ep->idle, *nx; e; e = nx) {
      nx = e->inext;
      uint32_t b = fs_wait_spin_bound(&e->c->policy, ep->spin_us, &busy);
      spin_us = b > spin_us ? b : spin_us;
      if (fs_ep_peek(e))
        n = fs_ep_report(ep, epfd, e, 0, out, src, n, max);
    }
    /* Spin while some fabric entry is idle: its peer publishes without a
     * wake as long as we do not sleep (the spin adapts to the gaps seen). */
    bool spin = ep->had_chan && ep->idle && !spun_nothing && spin_us > 0 && (busy || fs_wait_spin_worth());
    pthread_mutex_unlock(&ep->lock);
    /* 3. One kernel call for everything else (and to sleep). */
    struct timespec zero = { 0, 0 }, left;
    const struct timespec *t = n ? &zero : ts && !deadline ? ts : fs_clock_left(ts, deadline, &left);
    int room = max - n < kmax ? max - n : kmax;
    k = -1;
    bool spun_ready = false, spun = false;
    uint64_t spun_us = 0, slept_at = 0;
    /* Nothing ready and we would sleep: spin on the fabric rings first. */
    if (n == 0 && spin && (!t || t->tv_sec || t->tv_nsec)) {
      spun = true;
      k = fs_ep_spin(ep, epfd, spin_us, kst, room, mask, &spun_ready, &spun_us);
      if (k < 0) {
        ret = k;
        break;
      }
      if (spun_ready || k > 0)
        fs_ep_adapt(ep, spun_us);
      if (spun_ready) {
        /* Step 2 reports it.  If that reports nothing, this call does not
         * spin again (no livelock). */
        spun_nothing = true;
        continue;
      }
      if (k == 0)
        k = -1;
    }
    /* Safety net: with fabric entries, sleep in 20 ms slices and look at
     * every fabric entry after an empty slice, so a lost wake costs
     * milliseconds, never a hang (see fs_wait_sleep). */
    struct timespec slice = { 0, 20 * 1000000L };
    bool sliced = false;
    if (k < 0 && fs_ep_fabric(ep) && (!t || t->tv_sec > 0 || t->tv_nsec > slice.tv_nsec)) {
      t = &slice;
      sliced = true;
    }
    bool sleeps = k < 0 && room > 0 && (!t || t->tv_sec || t->tv_nsec);
    if (sleeps) {
      /* Arm every idle entry first; one that had news already is looked at
       * instead of sleeping. */
      pthread_mutex_lock(&ep->lock);
      bool ok = fs_ep_arm_idle(ep);
      if (ok)
        ep->sleepers++;
      pthread_mutex_unlock(&ep->lock);
      if (!ok)
        continue;
      if (ts && !deadline)
        deadline = fs_clock_deadline(ts);
      if (spun)
        slept_at = fs_clock_us();
    }
    if (k < 0)
      k = room > 0 ? fs_ep_kwait(epfd, kst, room, t, mask) : 0;
    if (sleeps) {
      int saved = errno;
      pthread_mutex_lock(&ep->lock);
      ep->sleepers--;
      pthread_mutex_unlock(&ep->lock);
      errno = saved;
    }
    if (k == 0 && !sliced && n == 0 && fs_ep_fabric(ep)) {
      /* The application's own timeout, shorter than a slice (or zero: a
       * loop that polls), ran out: the safety net still looks at every
       * fabric entry, in the next call, once a slice (or once in 1024
       * empty polls, which read no clock). */
      int saved = errno;
      bool sweep;
      if (t && (t->tv_sec || t->tv_nsec)) {
        uint64_t now = fs_clock_ns();
        sweep = now - __atomic_load_n(&ep->swept_ns, __ATOMIC_RELAXED) >= (uint64_t)slice.tv_nsec;
        if (sweep)
          __atomic_store_n(&ep->swept_ns, now, __ATOMIC_RELAXED);
      } else {
        sweep = (__atomic_add_fetch(&ep->empty_polls, 1, __ATOMIC_RELAXED) & 1023) == 0;
      }
      if (sweep)
        fs_ep_recheck_fabric(ep);
      errno = saved;
    }
    if (k == 0 && sliced) {
      /* A whole slice passed without news: no peer is busy, so no spin
       * before the next one (nor its /proc/loadavg read).  An idle worker
       * holding an upgraded connection made 5 system calls and a 50 us
       * spin every 20 ms; now one call. */
      spun_nothing = true;
      fs_ep_recheck_fabric(ep);
      if (ts && fs_clock_ns() >= deadline) {
        ret = 0;
        break;
      }
      continue;
    }
    if (slept_at && k > 0) {
      int saved = errno;
      fs_ep_adapt(ep, spun_us + (fs_clock_us() - slept_at));
      errno = saved;
    }
    if (k < 0) {
      ret = n ? n : -errno;
      break;
    }
  results:
    pthread_mutex_lock(&ep->lock);
    n = fs_ep_results(ep, epfd, kst, k, out, src, n, max);
    pthread_mutex_unlock(&ep->lock);
    if (n > 0 || k == 0) {
      ret = n;
      break;
    }
    /* Only wake edges with nothing to report: sleep again for the rest. */
    if (ts && !deadline)
      deadline = fs_clock_deadline(ts); /* they came during the spin */
    if (ts && fs_clock_ns() >= deadline) {
      ret = 0;
      break;
    }
  }
  fs_batch_begin(ret); /* the loop now answers these: wakes may wait for its next call */
  return ret;
}
