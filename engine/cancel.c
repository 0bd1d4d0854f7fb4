#include <errno.h>
#include <stdlib.h>

#include "base/hot.h"
#include "base/lock.h"
#include "base/proc.h"
#include "engine/cancel.h"

__thread int fs_cancel_saved __attribute__((tls_model("initial-exec")));
bool fs_cancel_seen FS_HOT;

/* A thread that ever slept in the library (held cancellation off there) has
 * a record on this list, for pthread_cancel to find; it leaves at the
 * thread's exit (the key's destructor). */
struct fs_cancel_rec {
  pthread_t self;
  bool asked; /* atomic */
  struct fs_cancel_rec *next;
};

static pthread_mutex_t fs_cancel_lock FS_HOT = PTHREAD_MUTEX_INITIALIZER;
static struct fs_cancel_rec *fs_cancel_recs FS_HOT;
static pthread_key_t fs_cancel_key FS_HOT;
static pthread_once_t fs_cancel_once FS_HOT = PTHREAD_ONCE_INIT;
static __thread struct fs_cancel_rec *fs_cancel_mine __attribute__((tls_model("initial-exec")));

static void fs_cancel_gone(void *arg)
{
  struct fs_cancel_rec *r = arg;
  pthread_mutex_lock(&fs_cancel_lock);
  for (struct fs_cancel_rec **p = &fs_cancel_recs; *p; p = &(*p)->next)
    if (*p == r) {
      *p = r->next;
      break;
    }
  pthread_mutex_unlock(&fs_cancel_lock);
  fs_cancel_mine = NULL;
  free(r);
}

static void fs_cancel_key_make(void)
{
  (void)pthread_key_create(&fs_cancel_key, fs_cancel_gone);
}

/* This thread's record, made at its first hold.  Without memory for it a
 * cancel still acts at the boundary, only not while the thread sleeps. */
static void fs_cancel_register(void)
{
  if (fs_cancel_mine)
    return;
  fs_proc_fork_work_add(FS_FORK_CANCEL);
  int saved = errno;
  struct fs_cancel_rec *r = calloc(1, sizeof *r);
  (void)pthread_once(&fs_cancel_once, fs_cancel_key_make);
  if (r && pthread_setspecific(fs_cancel_key, r) == 0) {
    r->self = pthread_self();
    pthread_mutex_lock(&fs_cancel_lock);
    r->next = fs_cancel_recs;
    fs_cancel_recs = r;
    pthread_mutex_unlock(&fs_cancel_lock);
    fs_cancel_mine = r;
  } else {
    free(r);
  }
  errno = saved;
}

void fs_cancel_hold(void)
{
  if (fs_cancel_saved)
    return;
  int old = PTHREAD_CANCEL_ENABLE;
  (void)pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
  fs_cancel_saved = old + 1;
  fs_cancel_register();
}

bool fs_cancel_asked(void)
{
  struct fs_cancel_rec *r = fs_cancel_mine;
  return r && fs_cancel_saved == PTHREAD_CANCEL_ENABLE + 1 && __atomic_load_n(&r->asked, __ATOMIC_ACQUIRE);
}

void fs_cancel_release_slow(void)
{
  int old = fs_cancel_saved - 1;
  fs_cancel_saved = 0;
  struct fs_cancel_rec *r = fs_cancel_mine;
  bool asked = r && __atomic_exchange_n(&r->asked, false, __ATOMIC_ACQ_REL);
  (void)pthread_setcancelstate(old, NULL);
  if (old == PTHREAD_CANCEL_ENABLE && asked) {
    int saved = errno;
    pthread_testcancel(); /* acts: this thread unwinds from here */
    errno = saved;
  } else if (asked && r) {
    __atomic_store_n(&r->asked, true, __ATOMIC_RELEASE); /* for when it is enabled again */
  }
}

void fs_cancel_note(pthread_t t)
{
  pthread_mutex_lock(&fs_cancel_lock);
  for (struct fs_cancel_rec *r = fs_cancel_recs; r; r = r->next)
    if (pthread_equal(r->self, t))
      __atomic_store_n(&r->asked, true, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&fs_cancel_lock);
}

void fs_cancel_fork_child(void)
{
  fs_lock_fork_reset_mutex(&fs_cancel_lock);
  fs_cancel_recs = fs_cancel_mine;
  if (fs_cancel_mine)
    fs_cancel_mine->next = NULL;
}
