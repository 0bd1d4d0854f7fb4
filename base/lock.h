/* A mutex for the data path's per-connection locks (a direction's lock, the
 * connection's own, the rdma channel's posting lock) and for the locks every
 * connection takes at its start and end (the connection pool's, the stat
 * table's).
 *
 * Uncontended, lock and unlock are one atomic instruction each, inline: no
 * call.  pthread_mutex_lock/unlock are a PLT hop and a type dispatch each,
 * four calls per small send or receive; on the emulated CPU of the Soft-RoCE
 * VM every call and return is a lookup, and natively they are a tenth of a
 * small message's cost.  Contended, a waiter sleeps on a private futex
 * (a direction's lock is held across a sleep for ring room or data).
 *
 * States: 0 free, 1 held, 2 held and maybe waited for (Drepper, "Futexes
 * Are Tricky", mutex 3).  Process-private: connection objects are copied,
 * not shared, by fork; whoever copies one re-initialises its locks (a
 * holder's thread does not exist in the child).  errno is left alone. */
#ifndef FS_BASE_LOCK_H
#define FS_BASE_LOCK_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint32_t v;
} fs_lock_t;

void fs_lock_wait(fs_lock_t *l, uint32_t seen);
void fs_lock_wake(fs_lock_t *l);

static inline void fs_lock_init(fs_lock_t *l)
{
  __atomic_store_n(&l->v, 0, __ATOMIC_RELAXED);
}

static inline bool fs_lock_try(fs_lock_t *l)
{
  uint32_t c = 0;
  return __atomic_compare_exchange_n(&l->v, &c, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

static inline void fs_lock(fs_lock_t *l)
{
  uint32_t c = 0;
  if (__builtin_expect(!__atomic_compare_exchange_n(&l->v, &c, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED), 0))
    fs_lock_wait(l, c);
}

static inline void fs_unlock(fs_lock_t *l)
{
  if (__builtin_expect(__atomic_exchange_n(&l->v, 0, __ATOMIC_RELEASE) == 2, 0))
    fs_lock_wake(l);
}

/* In a child after fork, a lock some thread of the parent may have held
 * goes back to free; stored only if it is not free already (the page is
 * shared copy-on-write with the parent: see below). */
static inline void fs_lock_fork_reset(fs_lock_t *l)
{
  if (__atomic_load_n(&l->v, __ATOMIC_RELAXED) != 0)
    __atomic_store_n(&l->v, 0, __ATOMIC_RELAXED);
}

/* In a child after fork, a default pthread mutex some thread of the parent
 * may have held goes back to free.  It is stored only if it is not free
 * already: after fork every page of ours is shared copy-on-write with the
 * parent, and the first store to one costs its process a fault and a 4 KiB
 * copy (2-3 us here), though most of these locks were free.  An unlocked one
 * holds exactly PTHREAD_MUTEX_INITIALIZER's bytes (glibc clears owner and
 * users at unlock).  A store, not pthread_mutex_init: a function the parent
 * never called is bound lazily in every child.  The model is on the stack,
 * not in static data: a page of the library's constants is one more fault
 * in a child. */
static inline void fs_lock_fork_reset_mutex(pthread_mutex_t *m)
{
  const pthread_mutex_t init = PTHREAD_MUTEX_INITIALIZER;
  const unsigned char *a = (const unsigned char *)m, *b = (const unsigned char *)&init;
  for (size_t i = 0; i < sizeof init; i++)
    if (a[i] != b[i]) {
      *m = init;
      return;
    }
}

/* A new mutex (calloc'd memory): PTHREAD_MUTEX_INITIALIZER's bytes, by a
 * store.  pthread_mutex_init was bound lazily in the first process that
 * called it: each PostgreSQL backend, whose postmaster never made an epoll
 * set, bound it afresh at its first wait (a symbol lookup through every
 * library of the process, and its pages faulted in). */
static inline void fs_lock_init_mutex(pthread_mutex_t *m)
{
  const pthread_mutex_t init = PTHREAD_MUTEX_INITIALIZER;
  *m = init;
}

#endif
