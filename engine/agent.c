/* The agent thread.  See engine/agent.h.  Everything here uses FS_REAL()
 * only. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "base/clock.h"
#include "base/fdreg.h"
#include "base/lock.h"
#include "base/proc.h"
#include "base/log.h"
#include "base/real.h"
#include "engine/agent.h"
#include "engine/trim.h"
#include "fabric/fabric.h"
#include "policy/policy.h"


/* An fd the agent watches for a fabric (or its own wake eventfd). */
struct fs_agent_watch {
  int fd;
  bool (*fn)(void *arg);
  void *arg;
  struct fs_agent_watch *next;
};

struct fs_agent_job {
  struct fs_conn *c;
  void (*fn)(struct fs_conn *c); /* NULL: an upgrade (fs_agent_connect) */
  uint64_t due;                  /* not before (CLOCK_MONOTONIC ns); 0 now;
                                    only a delayed upgrade has one */
  struct fs_agent_job *next;
};

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

/* A nudge does not kick an agent that runs this soon anyway. */
#define FS_AGENT_NUDGE_SLACK_NS 200000ull

/* When the agent must run j at the latest: a delayed upgrade (the only
 * job with a due time) waits for a nudge until FS_AGENT_LAZY_NS past it. */
static uint64_t fs_agent_job_at(const struct fs_agent_job *j)
{
  return j->due ? j->due + FS_AGENT_LAZY_NS : 0;
}

static struct {
  pthread_mutex_t lock;       /* agent state and the fabrics'; held across each batch */
  pthread_mutex_t qlock;      /* job queue */
  bool running;
  int epfd, evfd;
  struct fs_agent_watch evwatch;
  struct fs_agent_watch *watches;
  struct fs_agent_job *jobs;
  uint64_t wake_at;           /* qlock: the agent runs its jobs by then at the
                                 latest (UINT64_MAX: it sleeps until kicked) */
  uint64_t trim_at;           /* agent: the next idle-ring pass (0: none due) */
} A = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, false, -1, -1, { 0 }, NULL, NULL, UINT64_MAX, 0 };

#define FS_FOREACH_FABRIC(f) for (const struct fs_fabric_ops *const *f = fs_fabrics; *f; f++)

/* ---- watches ----------------------------------------------------------- */

static int fs_agent_add(struct fs_agent_watch *w)
{
  fs_fdreg_set(w->fd, true); /* the application's blanket closes skip it */
  struct epoll_event ev = { .events = EPOLLIN, .data.ptr = w };
  return FS_REAL(epoll_ctl)(A.epfd, EPOLL_CTL_ADD, w->fd, &ev) < 0 ? -errno : 0;
}

int fs_agent_watch(int fd, bool (*fn)(void *arg), void *arg)
{
  struct fs_agent_watch *w = calloc(1, sizeof *w);
  if (!w)
    return -ENOMEM;
  w->fd = fd;
  w->fn = fn;
  w->arg = arg;
  int rc = fs_agent_add(w);
  if (rc < 0) {
    free(w);
    return rc;
  }
  fs_proc_fork_work_add(FS_FORK_AGENT);
  w->next = A.watches;
  A.watches = w;
  return 0;
}

void fs_agent_unwatch(int fd)
{
  for (struct fs_agent_watch **pp = &A.watches; *pp; pp = &(*pp)->next)
    if ((*pp)->fd == fd) {
      struct fs_agent_watch *w = *pp;
      *pp = w->next;
      /* Leave the epoll set explicitly: close() alone does not when a
       * forked child still holds a copy, and the agent would then get
       * events for a watch it has freed. */
      FS_REAL(epoll_ctl)(A.epfd, EPOLL_CTL_DEL, fd, NULL);
      free(w);
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

/* arg: non-NULL if fs_agent_start grew the fd table already. */
static void *fs_agent_main(void *arg)
{
  struct epoll_event ev[16];
  if (!arg)
    fs_fdreg_reserve(A.evfd);
  pthread_mutex_lock(&A.lock);
  for (;;) {
    int timeout = fs_agent_next_timeout();
    int epfd = A.epfd;
    pthread_mutex_unlock(&A.lock);
    int n = FS_REAL(epoll_wait)(epfd, ev, 16, timeout);
    pthread_mutex_lock(&A.lock);
    for (int i = 0; i < n; i++) {
      struct fs_agent_watch *w = ev[i].data.ptr;
      /* A watch dropped by this call may be named again later in ev[]:
       * stop (level-triggered, the rest come back at once). */
      if (w->fn(w->arg))
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
static int fs_agent_start(void)
{
  if (A.running)
    return 0;
  fs_proc_fork_work_add(FS_FORK_AGENT);
  const char *what = "epoll_create1/eventfd";
  bool thread = false;
  fs_fdreg_make_begin();
  A.epfd = FS_REAL(epoll_create1)(EPOLL_CLOEXEC);
  A.evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  int err = errno;
  if (A.epfd < 0 || A.evfd < 0) {
    fs_fdreg_make_end();
    goto fail;
  }
  /* The agent puts its fds high (base/fdreg.h): grow the table for them
   * now, while we may be the only thread, or the agent's first rendezvous
   * waits ~10 ms for the kernel (curl's 20 MiB download was over before
   * its upgrade began).  With threads already, the agent does it first.
   * Alone, its own two go up there too, before anything refers to them:
   * at the lowest free numbers they took those the application's next
   * socket() or open() expected, for good. */
  bool reserved = fs_proc_threads() == 1;
  if (reserved) {
    fs_fdreg_reserve(A.evfd);
    A.epfd = fs_fdreg_high(A.epfd);
    A.evfd = fs_fdreg_high(A.evfd);
  }
  fs_fdreg_set(A.epfd, true);
  fs_fdreg_set(A.evfd, true);
  fs_fdreg_make_end();
  A.evwatch = (struct fs_agent_watch){ A.evfd, fs_agent_evfd, NULL, NULL };
  what = "epoll_ctl";
  if ((err = -fs_agent_add(&A.evwatch)) > 0)
    goto fail;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&at, 256 * 1024);
  pthread_t tid;
  int rc = pthread_create(&tid, &at, fs_agent_main, reserved ? &A : NULL);
  pthread_attr_destroy(&at);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  what = "pthread_create";
  thread = true;
  if ((err = rc) != 0)
    goto fail;
  A.running = true;
  return 0;
fail:;
  /* Once: a process that cannot make the thread fails at every connection. */
  static bool told;
  fs_log(told ? FS_LOG_DEBUG : FS_LOG_WARN, "cannot start the rendezvous agent (%s: %s%s); connections stay on TCP",
         what, strerror(err), thread && err == EAGAIN ? "; is RLIMIT_NPROC too low?" : "");
  told = true;
  if (A.epfd >= 0)
    fs_fdreg_close(A.epfd);
  if (A.evfd >= 0)
    fs_fdreg_close(A.evfd);
  A.epfd = A.evfd = -1;
  return -EAGAIN;
}

static void fs_agent_queue(struct fs_conn *c, void (*fn)(struct fs_conn *c))
{
  struct fs_agent_job *j = malloc(sizeof *j);
  int rc = -ENOMEM;
  if (j) {
    pthread_mutex_lock(&A.lock);
    rc = fs_agent_start();
    pthread_mutex_unlock(&A.lock);
  }
  if (rc < 0) {
    if (!fn)
      fs_host->failed(&c->link, FS_REASON_RESOURCES);
    else
      fn(c); /* last resort: inline */
    free(j);
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
  /* A delayed upgrade rides on the agent's next wake when that comes no
   * later than one more delay: with a connection a request (ab: 20,000 a
   * second) the agent wakes once in a while for a batch, not once per
   * connection, and the application pays no eventfd write each time. */
  fs_proc_fork_work_add(FS_FORK_AGENT);
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
  pthread_mutex_lock(&A.qlock);
  bool kick = A.wake_at > now + FS_AGENT_NUDGE_SLACK_NS;
  if (kick)
    A.wake_at = now; /* one kick for the nudges of this moment */
  pthread_mutex_unlock(&A.qlock);
  if (kick)
    fs_agent_kick();
}

/* ---- listeners and process events ------------------------------------- */

int fs_agent_listen(struct fs_conn *c, int fd)
{
  bool disabled = false;
  struct fs_policy_action act;
  struct fs_policy_query q = { fs_proc_name(), FS_DIR_ACCEPT, (struct sockaddr *)&c->local, NULL };
  fs_policy_match(fs_policy_get(&disabled), &q, &act);
  if (disabled || act.fabric == FS_FABRIC_TCP)
    return -1;
  int fabric = act.fabric;
  bool served = false;
  pthread_mutex_lock(&A.lock);
  if (fs_agent_start() == 0)
    FS_FOREACH_FABRIC(f)
      if (fabric == FS_FABRIC_AUTO || fabric == (*f)->id)
        served |= (*f)->listen(&c->link, fd);
  pthread_mutex_unlock(&A.lock);
  return served;
}

#define FS_AGENT_NAME_RETRY_NS 1000000000ull

void fs_agent_take_names(struct fs_conn *lc, int fd)
{
  uint64_t now = fs_clock_coarse_ns(), last = __atomic_load_n(&lc->name_tried_ns, __ATOMIC_RELAXED);
  if (__atomic_load_n(&lc->served, __ATOMIC_ACQUIRE) || (last && now - last < FS_AGENT_NAME_RETRY_NS) ||
      !__atomic_compare_exchange_n(&lc->name_tried_ns, &last, now | 1, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
    return;
  int saved = errno;
  if (fs_agent_listen(lc, fd) > 0) {
    __atomic_store_n(&lc->served, true, __ATOMIC_RELEASE);
    fs_log(FS_LOG_DEBUG, "fd %d: listener shared since fork, its names unserved: served from here now", fd);
  }
  errno = saved;
}

void fs_agent_unlisten(struct fs_conn *c)
{
  pthread_mutex_lock(&A.lock);
  FS_FOREACH_FABRIC(f)
    (*f)->unlisten(&c->link);
  pthread_mutex_unlock(&A.lock);
}

void fs_agent_retry_held(void)
{
  FS_FOREACH_FABRIC(f)
    if ((*f)->held()) {
      fs_agent_kick();
      return;
    }
}

void fs_agent_creds_changed(void)
{
  int saved = errno;
  pthread_mutex_lock(&A.lock);
  if (A.running)
    FS_FOREACH_FABRIC(f)
      (*f)->creds_changed();
  pthread_mutex_unlock(&A.lock);
  errno = saved;
}

static bool fs_agent_proc_served;
static uint64_t fs_agent_proc_failed_ns; /* when serving our own name last failed */

/* A fabric that could not serve the name (logged there) is asked again at
 * a later accept, a second later at the soonest: until then the peers of
 * this process's connections cannot find it. */
void fs_agent_serve_proc(void)
{
  if (__atomic_load_n(&fs_agent_proc_served, __ATOMIC_ACQUIRE))
    return;
  uint64_t failed = __atomic_load_n(&fs_agent_proc_failed_ns, __ATOMIC_RELAXED);
  if (failed && fs_clock_coarse_ns() - failed < 1000000000ull)
    return;
  pthread_mutex_lock(&A.lock);
  if (!fs_agent_proc_served && fs_agent_start() == 0) {
    bool all = true;
    FS_FOREACH_FABRIC(f)
      all = (*f)->serve_proc() && all;
    if (all)
      __atomic_store_n(&fs_agent_proc_served, true, __ATOMIC_RELEASE);
    else
      __atomic_store_n(&fs_agent_proc_failed_ns, fs_clock_coarse_ns() | 1, __ATOMIC_RELAXED);
  }
  pthread_mutex_unlock(&A.lock);
}

int fs_agent_ensure(void)
{
  pthread_mutex_lock(&A.lock);
  int rc = fs_agent_start();
  pthread_mutex_unlock(&A.lock);
  return rc;
}

void fs_agent_pause(void)
{
  pthread_mutex_lock(&A.lock);
}

void fs_agent_resume(void)
{
  pthread_mutex_unlock(&A.lock);
}

bool fs_agent_exit_drain(uint64_t deadline_ns)
{
  /* The agent holds its lock across each batch, briefly: wait for it, but
   * never past the deadline (exit() may come from a thread that holds it
   * no longer, or from a signal handler on a thread that does). */
  while (pthread_mutex_trylock(&A.lock) != 0)
    if (!fs_clock_nap(deadline_ns, 100000))
      return false;
  bool done = true;
  if (A.running)
    FS_FOREACH_FABRIC(f)
      done &= (*f)->exit_drain(deadline_ns);
  pthread_mutex_unlock(&A.lock); /* a later destructor may still close a listener */
  return done;
}

void fs_agent_before_fork(void)
{
  pthread_mutex_lock(&A.lock);
  pthread_mutex_lock(&A.qlock);
}

void fs_agent_after_fork(bool child)
{
  if (!child) {
    pthread_mutex_unlock(&A.qlock);
    pthread_mutex_unlock(&A.lock);
    return;
  }
  /* The child has no agent thread.  It does not serve the parent's
   * rendezvous names (the parent still does) and abandons in-flight
   * handshakes (the parent goes on serving them).  Each fabric closes its
   * own fds; the watches only go.  Only modules that made such state are
   * looked at (base/proc.h, fs_proc_fork_work): a process that never
   * started the agent forks at the cost of this page alone, whose locks
   * fs_agent_before_fork took. */
  if (fs_proc_fork_work_has(FS_FORK_FABRIC))
    FS_FOREACH_FABRIC(f)
      (*f)->after_fork_child();
  if (fs_proc_fork_work_has(FS_FORK_AGENT)) {
    for (struct fs_agent_watch *w = A.watches, *next; w; w = next) {
      next = w->next;
      free(w);
    }
    for (struct fs_agent_job *j = A.jobs, *next; j; j = next) {
      next = j->next;
      fs_conn_put(j->c);
      free(j);
    }
    A.watches = NULL;
    A.jobs = NULL;
    if (A.epfd >= 0)
      fs_fdreg_close(A.epfd);
    if (A.evfd >= 0)
      fs_fdreg_close(A.evfd);
    A.epfd = A.evfd = -1;
    A.running = false;
    fs_agent_proc_served = false; /* the name is the parent's: ours comes on demand */
    fs_agent_proc_failed_ns = 0;
  }
  fs_lock_fork_reset_mutex(&A.qlock);
  fs_lock_fork_reset_mutex(&A.lock);
}
