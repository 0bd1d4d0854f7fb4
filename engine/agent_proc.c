/* The agent's listeners and process events (engine/agent.h): a listener's
 * rendezvous names, this process's own name, a change of user, fork and
 * exit.  Split from engine/agent.c, whose state it shares
 * (engine/agent_state.h). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "base/clock.h"
#include "base/fdreg.h"
#include "base/hot.h"
#include "base/lock.h"
#include "base/log.h"
#include "base/proc.h"
#include "engine/agent.h"
#include "engine/agent_state.h"
#include "policy/policy.h"

#define A fs_agent_state

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

static bool fs_agent_proc_served FS_HOT;
static uint64_t fs_agent_proc_failed_ns FS_HOT; /* when serving our own name last failed */

bool fs_agent_reachable(struct fs_conn *c)
{
  FS_FOREACH_FABRIC(f)
    if ((c->policy.fabric == FS_FABRIC_AUTO || (int)c->policy.fabric == (*f)->id) && (*f)->reachable(&c->link))
      return true;
  return false;
}

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

FS_FORK_TEXT void fs_agent_after_fork(bool child)
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
    fs_agent_deferred = false;
    if (A.epfd >= 0)
      fs_fdreg_close(A.epfd);
    if (A.evfd >= 0)
      fs_fdreg_close(A.evfd);
    A.epfd = A.evfd = -1;
    A.running = false;
    A.polling = false; /* the parent's agent's; none here */
    fs_agent_proc_served = false; /* the name is the parent's: ours comes on demand */
    fs_agent_proc_failed_ns = 0;
  }
  fs_lock_fork_reset_mutex(&A.qlock);
  fs_lock_fork_reset_mutex(&A.lock);
}
