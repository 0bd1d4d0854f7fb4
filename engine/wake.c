/* Wake eventfd on first need; attach held for blind sleepers.  See
 * engine/wake.h. */
#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>

#include "base/hot.h"
#include "base/fdreg.h"
#include "base/lock.h"
#include "base/proc.h"
#include "fabric/chan.h"
#include "engine/door.h"
#include "engine/wake.h"

/* Set by the epoll module with its first bell (engine/epoll.h): before
 * that no connection is in a set that waits for one. */
static void (*fs_wake_made_hook)(struct fs_conn *c);

void fs_wake_on_made(void (*fn)(struct fs_conn *c))
{
  __atomic_store_n(&fs_wake_made_hook, fn, __ATOMIC_RELEASE);
}

/* Set by the epoll module with its first door (engine/door.h). */
static void (*fs_wake_door_hook)(struct fs_conn *c);

void fs_wake_on_door(void (*fn)(struct fs_conn *c))
{
  __atomic_store_n(&fs_wake_door_hook, fn, __ATOMIC_RELEASE);
}

void fs_wake_own(struct fs_conn *c)
{
  int wfd = __atomic_load_n(&c->wake_fd, __ATOMIC_ACQUIRE);
  if (wfd >= 0)
    fs_chan_efd_write(wfd);
  void (*hook)(struct fs_conn *) = __atomic_load_n(&fs_wake_door_hook, __ATOMIC_ACQUIRE);
  if (hook && __atomic_load_n(&c->door, __ATOMIC_ACQUIRE))
    hook(c);
}

/* ---- leased wake fds (engine/wake.h) ------------------------------------ */

static pthread_mutex_t fs_wake_pool_lock FS_HOT = PTHREAD_MUTEX_INITIALIZER;
static int *fs_wake_pool FS_HOT;
static uint32_t fs_wake_pool_n FS_HOT, fs_wake_pool_cap FS_HOT;

/* An eventfd of the pool, or a new one (-1: none to be had; the waiter
 * then sleeps in bounded slices).  fd: the connection's, for the budget. */
static int fs_wake_pool_take(int fd)
{
  pthread_mutex_lock(&fs_wake_pool_lock);
  int efd = fs_wake_pool_n ? fs_wake_pool[--fs_wake_pool_n] : -1;
  pthread_mutex_unlock(&fs_wake_pool_lock);
  if (efd < 0 && fs_fdreg_budget_ok(fd, 1))
    efd = FS_FDREG_MAKE(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  return efd;
}

static void fs_wake_pool_give(int efd)
{
  /* Not read here (a system call on every sleep): a wake left in it costs
   * its next waiter one look more. */
  pthread_mutex_lock(&fs_wake_pool_lock);
  if (fs_wake_pool_n == fs_wake_pool_cap) {
    uint32_t cap = fs_wake_pool_cap ? 2 * fs_wake_pool_cap : 16;
    int *p = realloc(fs_wake_pool, cap * sizeof *p);
    if (p) {
      fs_wake_pool = p;
      fs_wake_pool_cap = cap;
    }
  }
  bool kept = fs_wake_pool_n < fs_wake_pool_cap;
  if (kept)
    fs_wake_pool[fs_wake_pool_n++] = efd;
  pthread_mutex_unlock(&fs_wake_pool_lock);
  /* Out of memory: lost to the pool, still never closed (see wake.h). */
  (void)kept;
}

/* Lease changes (c->lock held) are bracketed so that fs_wake_fd_own, which
 * runs with or without that lock, reads the fd and its flag as a pair. */
static void fs_wake_seq_begin(struct fs_conn *c)
{
  __atomic_store_n(&c->wake_seq, c->wake_seq + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
}

static void fs_wake_seq_end(struct fs_conn *c)
{
  __atomic_store_n(&c->wake_seq, c->wake_seq + 1, __ATOMIC_RELEASE);
}

int fs_wake_fd_own(struct fs_conn *c)
{
  for (;;) {
    uint32_t s = __atomic_load_n(&c->wake_seq, __ATOMIC_ACQUIRE);
    if (s & 1)
      continue;
    int fd = __atomic_load_n(&c->wake_fd, __ATOMIC_RELAXED);
    bool leased = __atomic_load_n(&c->wake_leased, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&c->wake_seq, __ATOMIC_RELAXED) == s)
      return leased ? -1 : fd;
  }
}

struct fs_door *fs_wake_door_enter(struct fs_conn *c, bool *leased)
{
  *leased = false;
  struct fs_door *d = __atomic_load_n(&c->door, __ATOMIC_ACQUIRE);
  if (!d)
    return NULL;
  int saved = errno;
  fs_lock(&c->lock);
  if (c->wake_users++ == 0 && c->wake_fd < 0) {
    int efd = fs_wake_pool_take(c->fd);
    if (efd >= 0) {
      fs_wake_seq_begin(c);
      c->wake_leased = true;
      __atomic_store_n(&c->wake_fd, efd, __ATOMIC_RELEASE);
      fs_wake_seq_end(c);
    }
  }
  fs_unlock(&c->lock);
  errno = saved;
  *leased = true;
  return d;
}

void fs_wake_door_leave(struct fs_conn *c)
{
  int efd = -1;
  fs_lock(&c->lock);
  if (c->wake_users > 0 && --c->wake_users == 0 && c->wake_leased) {
    efd = c->wake_fd;
    fs_wake_seq_begin(c);
    /* The fd first: a fork between the two leaves the child a lease
     * without an fd, never the parent's pool fd as its own. */
    __atomic_store_n(&c->wake_fd, -1, __ATOMIC_RELEASE);
    c->wake_leased = false;
    fs_wake_seq_end(c);
  }
  fs_unlock(&c->lock);
  if (efd >= 0) {
    int saved = errno;
    fs_wake_pool_give(efd);
    errno = saved;
  }
}

int fs_wake_door_fd(struct fs_door *d)
{
  return fs_door_mine(d) ? d->efd : fs_door_watch(d);
}

FS_FORK_TEXT void fs_wake_fork_child_conn(struct fs_conn *c)
{
  /* The parent's threads that held leases are not here (nor is whatever
   * held c->lock: a lease change may be half done, wake_seq odd). */
  c->wake_users = 0;
  c->wake_seq = 0;
  /* A lease made its own is the child's own now, shared with the parent as
   * any wake fd: closed at release, not put in the child's pool. */
  c->wake_pooled = false;
  if (c->wake_leased) {
    /* The child's copy of a parent's pool eventfd: nobody here writes it. */
    if (c->wake_fd >= 0)
      fs_fdreg_close(c->wake_fd);
    c->wake_leased = false;
    c->wake_fd = -1;
  }
}

bool fs_wake_conn_release(struct fs_conn *c)
{
  if (c->wake_users || c->wake_leased) { /* (no waiter is left: a lease is the pool's) */
    c->wake_users = 1;
    fs_wake_door_leave(c);
  }
  if (c->wake_fd >= 0 && c->wake_pooled) {
    fs_wake_pool_give(c->wake_fd); /* a waker may still hold its number */
    c->wake_fd = -1;
    c->wake_pooled = false;
  }
  return c->wake_fd >= 0;
}

FS_FORK_TEXT void fs_wake_fork_child(void)
{
  /* The parent's eventfds: a wake of ours there would be a wake of theirs.
   * No thread of the child has one (its connections forgot their leases).
   * A process that never made a connection has no pool: nothing looked at.
   * The lock reset by a store, not pthread_mutex_init: a call bound lazily
   * anew in every child (a dozen page faults: base/lock.h). */
  if (!fs_proc_fork_work_has(FS_FORK_CONN))
    return;
  fs_lock_fork_reset_mutex(&fs_wake_pool_lock);
  for (uint32_t i = 0; i < fs_wake_pool_n; i++)
    fs_fdreg_close(fs_wake_pool[i]);
  fs_wake_pool_n = 0;
}

int fs_wake_get(struct fs_conn *c)
{
  if (__atomic_load_n(&c->wake_fd, __ATOMIC_ACQUIRE) >= 0 && !__atomic_load_n(&c->wake_leased, __ATOMIC_ACQUIRE))
    return 0;
  int reason = 0, saved = errno; /* the application's, whatever happens here */
  bool made = false;
  fs_lock(&c->lock);
  if (c->wake_fd >= 0 && c->wake_leased) {
    /* A lease becomes its own for good (a fabric after a door: rdma; a
     * set without a bell), still never closed: a waker that read it as a
     * lease may write it yet (fs_wake_conn_release gives it back). */
    fs_wake_seq_begin(c);
    c->wake_leased = false;
    c->wake_pooled = true;
    fs_wake_seq_end(c);
    made = true;
  } else if (c->wake_fd < 0) {
    int efd = -1;
    /* High, as the library's other descriptors (base/fdreg.h): at the
     * lowest free number it took the number the application's next
     * socket() expected, one more per upgraded connection, and a program
     * that sizes its tables by its own count (wrk: 10 + 3 per connection)
     * got a number beyond them ("connect" errors). */
    if (fs_wake_fd_budget_ok(c->fd) && (efd = FS_FDREG_MAKE(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC))) >= 0) {
      /* Before any channel: whoever sees the channel sees this too. */
      __atomic_store_n(&c->wake_fd, efd, __ATOMIC_RELEASE);
      made = true;
    } else {
      reason = FS_REASON_RESOURCES;
      c->no_upgrade = true;
      if (!c->chan)
        fs_conn_set_state(c, FS_STATE_TCP, reason);
    }
  }
  fs_unlock(&c->lock);
  /* Before the channel: an epoll set that hears of it registers it before
   * the attach's wake, or looks at the entry after it. */
  void (*hook)(struct fs_conn *) = __atomic_load_n(&fs_wake_made_hook, __ATOMIC_ACQUIRE);
  if (made && hook && (__atomic_load_n(&c->ep_ents, __ATOMIC_ACQUIRE) || __atomic_load_n(&c->ep_plain, __ATOMIC_ACQUIRE)))
    hook(c);
  errno = saved;
  return reason;
}

/* Set the held flag, once (whoever takes attach_held): the channel it was
 * set on, or NULL. */
static struct fs_chan *fs_wake_release(struct fs_conn *c)
{
  if (!__atomic_exchange_n(&c->attach_held, 0, __ATOMIC_ACQ_REL))
    return NULL;
  struct fs_chan *ch = __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE); /* lives as long as c */
  if (ch)
    __atomic_store_n(&ch->me->attached, 1, __ATOMIC_RELEASE);
  return ch;
}

/* Dekker pair: the sleeper counts itself, then looks for a channel; the
 * attacher publishes the channel and the hold, then looks for sleepers.
 * One of the two sees the other. */
bool fs_wake_blind_enter(struct fs_conn *c)
{
  __atomic_add_fetch(&c->blind_rx, 1, __ATOMIC_SEQ_CST);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (!__atomic_load_n(&c->chan, __ATOMIC_ACQUIRE))
    return true;
  fs_wake_blind_leave(c);
  return false;
}

void fs_wake_blind_leave(struct fs_conn *c)
{
  if (__atomic_sub_fetch(&c->blind_rx, 1, __ATOMIC_SEQ_CST) != 0)
    return;
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  struct fs_chan *ch = __atomic_load_n(&c->attach_held, __ATOMIC_ACQUIRE) ? fs_wake_release(c) : NULL;
  if (ch)
    ch->ops->wake_peer(ch); /* rdma carries the flag in a message */
}

void fs_wake_attach_publish(struct fs_conn *c)
{
  __atomic_store_n(&c->attach_held, 1, __ATOMIC_RELEASE);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  /* None asleep: set it now (unless one that left just now took it). */
  if (__atomic_load_n(&c->blind_rx, __ATOMIC_ACQUIRE) == 0)
    (void)fs_wake_release(c);
}
