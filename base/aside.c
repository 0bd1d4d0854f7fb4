/* Work done aside, on a thread with a descriptor table of its own.  See
 * base/aside.h. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/aside.h"
#include "base/hot.h"
#include "base/log.h"
#include "base/proc.h"

#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1)
#endif

enum { ASIDE_OFF, ASIDE_STARTING, ASIDE_ON, ASIDE_NEVER };

/* One job slot.  `posted` and `done` count jobs: the thread works while
 * they differ, the caller waits until they are equal again.  One condition
 * variable serves both ways (callers are serialised, so at most two
 * threads wait on it).  Reset in a forked child, where the thread and any
 * job in flight belong to the parent. */
struct fs_aside {
  pthread_mutex_t caller; /* one job at a time */
  pthread_mutex_t m;      /* the fields below */
  pthread_cond_t cv;
  int state;
  pid_t pid;              /* the process the thread runs in */
  int (*job)(void *);
  void *arg;
  int result;
  uint64_t posted, done;
  bool forbid, last_aside;
};

#define FS_ASIDE_INIT { PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, \
                        ASIDE_OFF, 0, NULL, NULL, 0, 0, 0, false, false }
static struct fs_aside X = FS_ASIDE_INIT;
static __thread bool fs_aside_me __attribute__((tls_model("initial-exec")));
/* This thread is inside fs_aside_run: a job of its own (a signal handler's
 * call, a job asking for a job) runs in place rather than wait for itself. */
static __thread bool fs_aside_busy __attribute__((tls_model("initial-exec")));

static void *fs_aside_main(void *unused)
{
  (void)unused;
  fs_aside_me = true;
  /* A new, empty table: every descriptor from 0 up closed in the copy, none
   * in the application's.  One call, so no window in which this thread
   * holds a reference to an application's socket. */
  bool ok = syscall(SYS_close_range, 0u, ~0u, CLOSE_RANGE_UNSHARE) == 0;
  pthread_mutex_lock(&X.m);
  X.state = ok ? ASIDE_ON : ASIDE_NEVER;
  pthread_cond_broadcast(&X.cv);
  while (ok) {
    while (X.done == X.posted)
      pthread_cond_wait(&X.cv, &X.m);
    int (*job)(void *) = X.job;
    void *arg = X.arg;
    pthread_mutex_unlock(&X.m);
    int r = job(arg);
    pthread_mutex_lock(&X.m);
    X.result = r;
    X.done = X.posted;
    pthread_cond_broadcast(&X.cv);
  }
  pthread_mutex_unlock(&X.m);
  return NULL;
}

/* Is the thread there (started now if need be)?  X.m held. */
static bool fs_aside_ready(void)
{
  if (X.state == ASIDE_OFF && !X.forbid) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* no application signal lands here */
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 128 * 1024);
    pthread_t tid;
    int rc = pthread_create(&tid, &at, fs_aside_main, NULL);
    pthread_attr_destroy(&at);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
      return false; /* this job runs here; the next one tries again */
    X.state = ASIDE_STARTING;
    X.pid = getpid();
    while (X.state == ASIDE_STARTING)
      pthread_cond_wait(&X.cv, &X.m);
    if (X.state == ASIDE_NEVER)
      fs_log(FS_LOG_DEBUG, "aside: no CLOSE_RANGE_UNSHARE; background scans use the application's table");
  }
  /* A child forked without our fork() wrapper (a raw clone) has no
   * thread, whatever the state says. */
  return X.state == ASIDE_ON && X.pid == getpid();
}

int fs_aside_run(int (*job)(void *arg), void *arg)
{
  if (fs_aside_me || fs_aside_busy) {
    int saved = errno, r = job(arg);
    errno = saved;
    return r;
  }
  int saved = errno, cancel, r;
  fs_aside_busy = true;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel); /* the waits are cancellation points */
  fs_proc_fork_work_add(FS_FORK_ASIDE);
  pthread_mutex_lock(&X.caller);
  pthread_mutex_lock(&X.m);
  bool aside = fs_aside_ready();
  if (aside) {
    X.job = job;
    X.arg = arg;
    uint64_t mine = ++X.posted;
    pthread_cond_broadcast(&X.cv);
    while (X.done != mine)
      pthread_cond_wait(&X.cv, &X.m);
    r = X.result;
  }
  X.last_aside = aside;
  pthread_mutex_unlock(&X.m);
  if (!aside)
    r = job(arg);
  pthread_mutex_unlock(&X.caller);
  pthread_setcancelstate(cancel, NULL);
  fs_aside_busy = false;
  errno = saved;
  return r;
}

bool fs_aside_active(void)
{
  pthread_mutex_lock(&X.m);
  bool a = X.last_aside;
  pthread_mutex_unlock(&X.m);
  return a;
}

bool fs_aside_here(void)
{
  return fs_aside_me;
}

FS_FORK_TEXT void fs_aside_atfork_child(void)
{
  if (!fs_proc_fork_work_has(FS_FORK_ASIDE))
    return;
  struct fs_aside fresh = FS_ASIDE_INIT;
  fresh.forbid = X.forbid;
  X = fresh;
}

void fs_aside_forbid(void)
{
  fs_proc_fork_work_add(FS_FORK_ASIDE);
  pthread_mutex_lock(&X.m);
  X.forbid = true;
  pthread_mutex_unlock(&X.m);
}
