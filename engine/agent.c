/* The agent thread.  See engine/agent.h.  Everything here uses FS_REAL()
 * only. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "base/hot.h"
#include "base/clock.h"
#include "base/fdreg.h"
#include "base/lock.h"
#include "base/proc.h"
#include "base/log.h"
#include "base/real.h"
#include "base/stat.h"
#include "engine/agent.h"
#include "engine/agent_state.h"
#include "engine/trim.h"
#include "fabric/fabric.h"
#include "policy/policy.h"

#define A fs_agent_state

/* An upgrade past the byte threshold starts this long after it was asked
 * for: a short connection (a request per connection: ab, a CGI, a client
 * process per query) has closed by then and costs no rendezvous, where
 * one that lives on loses 2 ms of a transfer that goes on for longer.
 * Not with upgrade=0 (at connect, asked for at once). */
#define FS_AGENT_UPGRADE_DELAY_NS 2000000ull

/* A delayed upgrade wakes the agent only when its connection moves bytes
 * after its time came (fs_agent_nudge), or this long after it at the
 * latest.  Woken at each one's due time, the agent of wrk (a connection
 * per request, 12k a second) ran 870 times a second for jobs whose
 * connections had all closed, each a context switch on a CPU the
 * application wanted; now it runs about 50 times.  A connection that
 * crossed the threshold and went quiet upgrades up to this much later,
 * when it costs nobody anything. */
#define FS_AGENT_LAZY_NS 20000000ull

/* Set while the agent's only work is one delayed upgrade, of a connection
 * that received more than it sent, and its thread is not started
 * (fs_agent_queue).  A one-shot client (curl, a client process per
 * request) crosses its threshold on the reply and exits well within the
 * delay: the thread, its eventfd and the fd table grown for it were 300 us
 * of such a process's life, for an upgrade it never lived to run.  The
 * thread starts when the upgrade is due and the connection moves bytes
 * (fs_agent_nudge), when a second job comes, at a send on a connection
 * still on TCP, or when the process is about to wait (engine/agent.h,
 * fs_agent_wait_point; engine/sockio_tcp.c; engine/wait.c).  FS_HOT:
 * every wait reads it. */
bool fs_agent_deferred FS_HOT;

/* A nudge does not kick an agent that runs this soon anyway. */
#define FS_AGENT_NUDGE_SLACK_NS 200000ull

/* When the agent must run j at the latest: a delayed upgrade (the only
 * job with a due time) waits for a nudge until FS_AGENT_LAZY_NS past it. */
static uint64_t fs_agent_job_at(const struct fs_agent_job *j)
{
  return j->due ? j->due + FS_AGENT_LAZY_NS : 0;
}

struct fs_agent_state fs_agent_state FS_HOT = {
  PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, false, -1, -1, { 0 }, NULL, NULL, UINT64_MAX, 0, false, 0
};

/* ---- watches ----------------------------------------------------------- */

static int fs_agent_nwatches(void)
{
  int n = 0;
  for (struct fs_agent_watch *w = A.watches; w; w = w->next)
    n++;
  return n;
}

static __thread bool fs_agent_self; /* this thread is the agent */

/* A.lock held.  The agent, asleep on the set it built before, is kicked
 * to take fd in (it takes it at its next wait when it is the caller: a
 * rendezvous it accepted). */
int fs_agent_watch(int fd, bool (*fn)(void *arg), void *arg)
{
  struct fs_agent_watch *w = calloc(1, sizeof *w);
  if (!w)
    return -ENOMEM;
  w->fd = fd;
  w->fn = fn;
  w->arg = arg;
  fs_fdreg_set(fd, true); /* the application's blanket closes skip it */
  fs_proc_fork_work_add(FS_FORK_AGENT);
  w->next = A.watches;
  A.watches = w;
  if (!fs_agent_self)
    fs_agent_kick();
  return 0;
}

/* A poll() holds a reference to each file it sleeps on until it returns:
 * a unix socket its caller closes stays bound to its name meanwhile, and
 * the name could not be bound again (a server's rendezvous names after
 * setuid: EADDRINUSE, and its peers found the old socket, root's, and gave
 * up with not-owner; t_xuser).  So a thread that drops a watch while the
 * agent polls (A.lock held) kicks it and waits until it is out of poll()
 * (it then waits for A.lock, holding nothing).  An epoll set holds no
 * reference.  Bounded: an agent that is not scheduled for a second is
 * waited for no longer. */
static void fs_agent_out_of_poll(void)
{
  uint32_t gen = __atomic_load_n(&A.poll_gen, __ATOMIC_ACQUIRE);
  int saved = errno;
  fs_agent_kick();
  uint64_t until = fs_clock_ns() + 1000000000ull;
  while (__atomic_load_n(&A.poll_gen, __ATOMIC_ACQUIRE) == gen && fs_clock_nap(until, 20000))
    ;
  errno = saved;
}

void fs_agent_unwatch(int fd)
{
  for (struct fs_agent_watch **pp = &A.watches; *pp; pp = &(*pp)->next)
    if ((*pp)->fd == fd) {
      struct fs_agent_watch *w = *pp;
      *pp = w->next;
      /* Leave the epoll set explicitly: close() alone does not when a
       * forked child still holds a copy, and the agent would be told of
       * it at every wait.  Asleep in a poll() or epoll_wait() that names
       * fd, the agent drops what it reports for it (fs_agent_watching). */
      bool in_ep = w->in_ep;
      if (in_ep && A.epfd >= 0)
        FS_REAL(epoll_ctl)(A.epfd, EPOLL_CTL_DEL, fd, NULL);
      free(w);
      if (!in_ep && A.polling && !fs_agent_self)
        fs_agent_out_of_poll();
      return;
    }
}

static bool fs_agent_evfd(void *arg)
{
  (void)arg;
  uint64_t v;
  (void)FS_REAL(read)(A.evfd, &v, sizeof v);
  return false;
}

void fs_agent_kick(void)
{
  uint64_t one = 1;
  if (A.evfd >= 0)
    (void)FS_REAL(write)(A.evfd, &one, sizeof one);
}

/* ---- jobs -------------------------------------------------------------- */

/* Offer c to each fabric the policy allows, in registration order. */
static void fs_agent_connect(struct fs_conn *c)
{
  if (!fs_host->may_upgrade(&c->link)) {
    fs_conn_put(c);
    return;
  }
  int reason = FS_REASON_REMOTE_HOST; /* no fabric of this build reaches the peer */
  FS_FOREACH_FABRIC(f) {
    if (c->policy.fabric != FS_FABRIC_AUTO && (int)c->policy.fabric != (*f)->id)
      continue;
    int rc = (*f)->connect(&c->link);
    if (rc == 0)
      return; /* the fabric holds c's reference now */
    reason = rc > 0 ? rc : -rc;
    if (rc > 0)
      break;
  }
  fs_host->failed(&c->link, reason);
  fs_conn_put(c);
}

static void fs_agent_run_jobs(void)
{
  pthread_mutex_lock(&A.qlock);
  struct fs_agent_job *jobs = A.jobs, *later = NULL;
  A.jobs = NULL;
  pthread_mutex_unlock(&A.qlock);
  uint64_t now = jobs ? fs_clock_ns() : 0;
  while (jobs) {
    struct fs_agent_job *j = jobs;
    jobs = j->next;
    if (j->due > now) {
      j->next = later;
      later = j;
      continue;
    }
    if (j->due)
      __atomic_store_n(&j->c->upgrade_lazy, false, __ATOMIC_RELAXED); /* no more nudges */
    if (j->fn) {
      /* May block (a re-send on TCP): drop the agent lock so fork and
       * others go on. */
      pthread_mutex_unlock(&A.lock);
      j->fn(j->c);
      fs_conn_put(j->c);
      pthread_mutex_lock(&A.lock);
    } else {
      fs_agent_connect(j->c);
    }
    free(j);
  }
  if (later) {
    pthread_mutex_lock(&A.qlock);
    struct fs_agent_job *t = later;
    while (t->next)
      t = t->next;
    t->next = A.jobs;
    A.jobs = later;
    pthread_mutex_unlock(&A.qlock);
  }
}

/* ---- the thread -------------------------------------------------------- */

static int fs_agent_next_timeout(void)
{
  int timeout = -1;
  pthread_mutex_lock(&A.qlock);
  bool any = A.jobs != NULL;
  uint64_t due = any ? UINT64_MAX : 0;
  for (struct fs_agent_job *j = A.jobs; j; j = j->next) {
    uint64_t at = fs_agent_job_at(j);
    if (at < due)
      due = at;
  }
  A.wake_at = any ? due : UINT64_MAX;
  pthread_mutex_unlock(&A.qlock);
  if (any) { /* jobs waiting for their time */
    uint64_t now = fs_clock_ns();
    timeout = due > now ? (int)((due - now + 999999u) / 1000000u) : 0;
  }
  FS_FOREACH_FABRIC(f) {
    int t = (*f)->next_timeout();
    if (t >= 0 && (timeout < 0 || t < timeout))
      timeout = t;
  }
  if (A.trim_at) {
    uint64_t now = fs_clock_ns();
    int t = A.trim_at > now ? (int)((A.trim_at - now + 999999u) / 1000000u) : 0;
    if (timeout < 0 || t < timeout)
      timeout = t;
  }
  return timeout;
}

/* Idle rings give their memory back (engine/trim.h), once a period while
 * this process holds a channel; a process without one is never woken. */
static void fs_agent_trim(void)
{
  if (!fs_trim_chans()) {
    A.trim_at = 0;
    return;
  }
  uint64_t now = fs_clock_ns();
  if (A.trim_at && now >= A.trim_at)
    fs_trim_idle();
  if (!A.trim_at || now >= A.trim_at)
    A.trim_at = now + (uint64_t)FS_TRIM_PERIOD_MS * 1000000u;
}

/* The epoll set, made with its fds in when the watches outgrow a poll()
 * (the agent's thread, A.lock held).  False if it cannot be: the agent
 * polls the first FS_AGENT_POLL_MAX then, the rest at a later wait. */
static bool fs_agent_ep_sync(void)
{
  if (A.epfd < 0) {
    A.epfd = FS_FDREG_MAKE(FS_REAL(epoll_create1)(EPOLL_CLOEXEC));
    if (A.epfd < 0)
      return false;
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &A.evwatch };
    if (FS_REAL(epoll_ctl)(A.epfd, EPOLL_CTL_ADD, A.evfd, &ev) < 0) {
      fs_fdreg_close(A.epfd);
      A.epfd = -1;
      return false;
    }
  }
  for (struct fs_agent_watch *w = A.watches; w; w = w->next) {
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = w };
    if (!w->in_ep && FS_REAL(epoll_ctl)(A.epfd, EPOLL_CTL_ADD, w->fd, &ev) == 0)
      w->in_ep = true;
  }
  return true;
}

static void fs_agent_ep_close(void)
{
  for (struct fs_agent_watch *w = A.watches; w; w = w->next)
    w->in_ep = false;
  if (A.epfd >= 0)
    fs_fdreg_close(A.epfd);
  A.epfd = -1;
}

/* Is w (which was ready on fd; -1: any) still watched?  Dropped while the
 * agent slept (a change of user closing a listener), it is freed memory. */
static bool fs_agent_watching(const struct fs_agent_watch *w, int fd)
{
  if (w == &A.evwatch)
    return true;
  for (const struct fs_agent_watch *x = A.watches; x; x = x->next)
    if (x == w && (fd < 0 || x->fd == fd))
      return true;
  return false;
}

/* Sleep until a watched fd is ready, a kick or the timeout (A.lock held,
 * dropped meanwhile); what is ready, in pw[] (n of them) with the fd each
 * was ready on in fds[] (-1: its own, from the epoll set). */
static int fs_agent_wait(struct fs_agent_watch **pw, int *fds, int timeout)
{
  struct pollfd pfd[FS_AGENT_POLL_MAX];
  int nw = fs_agent_nwatches() + 1;
  if (A.epfd >= 0 && nw <= FS_AGENT_POLL_MAX / 2)
    fs_agent_ep_close();
  if ((A.epfd >= 0 || nw > FS_AGENT_POLL_MAX) && fs_agent_ep_sync()) {
    struct epoll_event ev[FS_AGENT_POLL_MAX];
    int epfd = A.epfd;
    pthread_mutex_unlock(&A.lock);
    int got = FS_REAL(epoll_wait)(epfd, ev, FS_AGENT_POLL_MAX, timeout);
    pthread_mutex_lock(&A.lock);
    for (int i = 0; i < got; i++) {
      pw[i] = ev[i].data.ptr;
      fds[i] = -1;
    }
    return got > 0 ? got : 0;
  }
  int n = 0;
  pw[n] = &A.evwatch;
  pfd[n++] = (struct pollfd){ .fd = A.evfd, .events = POLLIN };
  for (struct fs_agent_watch *w = A.watches; w && n < FS_AGENT_POLL_MAX; w = w->next) {
    pw[n] = w;
    pfd[n++] = (struct pollfd){ .fd = w->fd, .events = POLLIN };
  }
  A.polling = true;
  pthread_mutex_unlock(&A.lock);
  int got = FS_REAL(poll)(pfd, (nfds_t)n, timeout);
  __atomic_add_fetch(&A.poll_gen, 1, __ATOMIC_RELEASE); /* its files let go (fs_agent_out_of_poll) */
  pthread_mutex_lock(&A.lock);
  A.polling = false;
  int k = 0;
  for (int i = 0; got > 0 && i < n; i++) {
    if (!pfd[i].revents)
      continue;
    if (pfd[i].revents & POLLNVAL) {
      /* Closed without an unwatch: reported at every poll() (epoll drops
       * it), so the watch goes. */
      if (fs_agent_watching(pw[i], pfd[i].fd)) {
        fs_log(FS_LOG_DEBUG, "agent: fd %d closed while watched; dropped", pfd[i].fd);
        fs_agent_unwatch(pfd[i].fd);
      }
      continue;
    }
    pw[k] = pw[i];
    fds[k++] = pfd[i].fd;
  }
  return k;
}

/* arg: non-NULL if fs_agent_start grew the fd table already. */
static void *fs_agent_main(void *arg)
{
  struct fs_agent_watch *pw[FS_AGENT_POLL_MAX];
  int fds[FS_AGENT_POLL_MAX];
  fs_agent_self = true;
  if (!arg)
    fs_fdreg_reserve(A.evfd);
  pthread_mutex_lock(&A.lock);
  for (;;) {
    int n = fs_agent_wait(pw, fds, fs_agent_next_timeout());
    for (int i = 0; i < n; i++) {
      if (!fs_agent_watching(pw[i], fds[i]))
        continue;
      /* A watch dropped by this call may be named again later in pw[]:
       * stop (level-triggered, the rest come back at once). */
      if (pw[i]->fn(pw[i]->arg))
        break;
    }
    fs_agent_run_jobs();
    FS_FOREACH_FABRIC(f)
      (*f)->tick();
    fs_agent_trim();
  }
  return NULL;
}

/* Start the agent (A.lock held). */
int fs_agent_start(void)
{
  if (A.running)
    return 0;
  fs_proc_fork_work_add(FS_FORK_AGENT);
  const char *what = "eventfd";
  bool thread = false;
  fs_fdreg_make_begin();
  A.evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  int err = errno;
  if (A.evfd < 0) {
    fs_fdreg_make_end();
    goto fail;
  }
  /* The agent puts its fds high (base/fdreg.h): grow the table for them
   * now, while we may be the only thread, or the agent's first rendezvous
   * waits ~10 ms for the kernel (curl's 20 MiB download was over before
   * its upgrade began).  With threads already, the agent does it first.
   * Alone, its own goes up there too, before anything refers to it: at
   * the lowest free number it took the one the application's next
   * socket() or open() expected, for good. */
  bool reserved = fs_proc_single_threaded();
  if (reserved)
    A.evfd = fs_fdreg_high(A.evfd); /* up there: the table grows to it (fs_fdreg_reserve's work) */
  fs_fdreg_set(A.evfd, true);
  fs_fdreg_make_end();
  A.evwatch = (struct fs_agent_watch){ .fd = A.evfd, .fn = fs_agent_evfd };
  /* The table into its file first (base/stat.h): the agent writes rows
   * (its upgrades), and a copy made with a second thread about may miss
   * a store.  So a process is listed from its first upgrade attempt on,
   * and a one-shot client, whose agent never starts (fs_agent_queue
   * defers it), makes no file. */
  fs_stat_publish();
  /* Every signal blocked on the agent: the application's handlers run on
   * its own threads.  Given with the attributes where glibc can (2.32):
   * masking ours around the create cost two system calls more. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&at, 256 * 1024);
  bool masked = false;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  masked = pthread_attr_setsigmask_np(&at, &all) == 0;
#endif
  if (!masked)
    pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t tid;
  int rc = pthread_create(&tid, &at, fs_agent_main, reserved ? &A : NULL);
  pthread_attr_destroy(&at);
  if (!masked)
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  what = "pthread_create";
  thread = true;
  if ((err = rc) != 0)
    goto fail;
  __atomic_store_n(&A.running, true, __ATOMIC_RELEASE); /* after evfd: fs_agent_queue reads it unlocked */
  if (fs_agent_deferred)
    __atomic_store_n(&fs_agent_deferred, false, __ATOMIC_RELAXED);
  return 0;
fail:;
  /* Once: a process that cannot make the thread fails at every connection. */
  static bool told FS_HOT;
  fs_log(told ? FS_LOG_DEBUG : FS_LOG_WARN, "cannot start the rendezvous agent (%s: %s%s); connections stay on TCP",
         what, strerror(err), thread && err == EAGAIN ? "; is RLIMIT_NPROC too low?" : "");
  told = true;
  if (A.evfd >= 0)
    fs_fdreg_close(A.evfd);
  A.evfd = -1;
  return -EAGAIN;
}

/* A job the agent cannot take (no memory, no thread): an upgrade fails
 * (resources), any other job runs here and now, as a last resort. */
static void fs_agent_refused(struct fs_conn *c, void (*fn)(struct fs_conn *c))
{
  if (!fn)
    fs_host->failed(&c->link, FS_REASON_RESOURCES);
  else
    fn(c);
}

/* The thread could not start: every queued job is refused (a deferred
 * one waited with others queued behind it). */
static void fs_agent_refuse_queued(void)
{
  pthread_mutex_lock(&A.qlock);
  struct fs_agent_job *jobs = A.jobs;
  A.jobs = NULL;
  pthread_mutex_unlock(&A.qlock);
  while (jobs) {
    struct fs_agent_job *j = jobs;
    jobs = j->next;
    __atomic_store_n(&j->c->upgrade_lazy, false, __ATOMIC_RELAXED);
    fs_agent_refused(j->c, j->fn);
    fs_conn_put(j->c);
    free(j);
  }
}

static void fs_agent_start_deferred_locked(void);

void fs_agent_start_deferred(void)
{
  pthread_mutex_lock(&A.lock);
  fs_agent_start_deferred_locked();
}

void fs_agent_start_deferred_try(void)
{
  if (pthread_mutex_trylock(&A.lock) == 0)
    fs_agent_start_deferred_locked();
}

/* A.lock held; lets it go. */
static void fs_agent_start_deferred_locked(void)
{
  int saved = errno;
  int rc = 0;
  if (__atomic_load_n(&fs_agent_deferred, __ATOMIC_RELAXED)) {
    __atomic_store_n(&fs_agent_deferred, false, __ATOMIC_RELAXED);
    pthread_mutex_lock(&A.qlock);
    A.wake_at = fs_clock_ns(); /* its first look: now */
    pthread_mutex_unlock(&A.qlock);
    rc = fs_agent_start();
    /* Its first wait would sleep to the job's lazy deadline (20 ms on): a
     * nudge that started it was the kick the job waited for. */
    if (rc == 0)
      fs_agent_kick();
  }
  pthread_mutex_unlock(&A.lock);
  if (rc < 0)
    fs_agent_refuse_queued();
  errno = saved;
}

static void fs_agent_queue(struct fs_conn *c, void (*fn)(struct fs_conn *c))
{
  struct fs_agent_job *j = malloc(sizeof *j);
  if (!j) {
    fs_agent_refused(c, fn);
    return;
  }
  fs_conn_get(c);
  j->c = c;
  j->fn = fn;
  j->due = !fn && c->policy.upgrade_bytes > 0 ? fs_clock_ns() + FS_AGENT_UPGRADE_DELAY_NS : 0;
  uint64_t at = fs_agent_job_at(j);
  if (j->due) { /* before the job is visible: the agent clears it */
    c->upgrade_due = j->due;
    __atomic_store_n(&c->upgrade_lazy, true, __ATOMIC_RELEASE);
  }
  fs_proc_fork_work_add(FS_FORK_AGENT);
  /* Not started: queued first, then the thread, whose first look takes it
   * (no kick: an eventfd write, on the receive that crossed a one-shot
   * client's threshold).  Started already: not the agent lock, which the
   * agent holds through a whole batch of rendezvous (wrk -c400 upgrading at
   * connect against a server without libfabsock: the application's
   * connect()s queued behind 400 attempts, and 332 of its requests timed
   * out). */
  if (!__atomic_load_n(&A.running, __ATOMIC_ACQUIRE)) {
    pthread_mutex_lock(&A.lock);
    if (!A.running) {
      pthread_mutex_lock(&A.qlock);
      bool alone = A.jobs == NULL;
      j->next = A.jobs;
      A.jobs = j;
      pthread_mutex_unlock(&A.qlock);
      /* The thread when it is due (fs_agent_deferred), for a connection
       * that crossed on what it received (a reply, a download): one that
       * sends (an upload, a stream) and then sleeps without a socket call
       * or a wait would wait for its upgrade until it wakes. */
      if (alone && j->due && c->tcp_rx > c->tcp_tx) {
        __atomic_store_n(&fs_agent_deferred, true, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&A.lock);
        return;
      }
      int rc = fs_agent_start();
      pthread_mutex_unlock(&A.lock);
      if (rc < 0)
        fs_agent_refuse_queued();
      return;
    }
    pthread_mutex_unlock(&A.lock);
  }
  /* A delayed upgrade rides on the agent's next wake when that comes no
   * later than one more delay: with a connection a request (ab: 20,000 a
   * second) the agent wakes once in a while for a batch, not once per
   * connection, and the application pays no eventfd write each time. */
  pthread_mutex_lock(&A.qlock);
  j->next = A.jobs;
  A.jobs = j;
  bool kick = j->due == 0 || A.wake_at > at + FS_AGENT_UPGRADE_DELAY_NS;
  if (kick && at < A.wake_at)
    A.wake_at = at; /* it recomputes once kicked: no second kick before */
  pthread_mutex_unlock(&A.qlock);
  if (kick)
    fs_agent_kick();
}

void fs_agent_upgrade(struct fs_conn *c)
{
  fs_agent_queue(c, NULL);
}

void fs_agent_run(struct fs_conn *c, void (*fn)(struct fs_conn *c))
{
  fs_agent_queue(c, fn);
}

uint64_t fs_agent_wake_at(void)
{
  pthread_mutex_lock(&A.qlock);
  uint64_t at = A.wake_at;
  pthread_mutex_unlock(&A.qlock);
  return at;
}

void fs_agent_nudge(struct fs_conn *c)
{
  uint64_t now = fs_clock_ns();
  bool lazy = true;
  if (now < c->upgrade_due ||
      !__atomic_compare_exchange_n(&c->upgrade_lazy, &lazy, false, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
    return;
  if (__builtin_expect(__atomic_load_n(&fs_agent_deferred, __ATOMIC_RELAXED), 0)) {
    fs_agent_start_deferred(); /* its first look runs the job, due now */
    return;
  }
  pthread_mutex_lock(&A.qlock);
  bool kick = A.wake_at > now + FS_AGENT_NUDGE_SLACK_NS;
  if (kick)
    A.wake_at = now; /* one kick for the nudges of this moment */
  pthread_mutex_unlock(&A.qlock);
  if (kick)
    fs_agent_kick();
}

