/* An epoll set's doorbell (base/bell.h), owner side: the connections of a
 * set give their peers the set's bell and a slot in it instead of a wake
 * eventfd of their own, so an upgraded connection costs this process no
 * descriptor and its peer at most one per set (docs/design.md 1.7).
 *
 * A door is referenced by the set that made it and by each connection
 * holding a slot; its eventfd stays open while any of them lives (the
 * peer rings it for as long as its channel does).  Whoever drains it (the
 * set's epoll_wait, a second set holding one of its connections, a
 * blocking call or a poll on one) hands each rung connection to all its
 * waiters (engine/epoll_door.c, fs_door_deliver).  Only the process that
 * made it drains it: a fork child's drain would take wakes its parent's
 * threads wait for; the child's waits on such connections fall back to
 * their bounded slices. */
#ifndef FS_ENGINE_DOOR_H
#define FS_ENGINE_DOOR_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "base/bell.h"
#include "engine/conn.h"

#define FS_DOOR_CHUNK 256u
#define FS_DOOR_CHUNKS (FS_BELL_SLOTS / FS_DOOR_CHUNK)

struct fs_door {
  uint32_t refs;                               /* atomic */
  int efd, memfd;
  struct fs_bell_page *page;
  pid_t pid;                                   /* the maker: only it drains */
  pthread_mutex_t lock;                        /* slot allocation */
  struct fs_conn **chunk[FS_DOOR_CHUNKS];      /* slot -> connection (atomic reads) */
  uint32_t next;                               /* slots below were handed out once */
  uint32_t *free;                              /* slots given back */
  uint32_t nfree, free_cap;
  struct fs_door *gnext;                       /* all doors (fs_door_by_efd) */
};

/* A new door with one reference.  0 or -errno. */
int fs_door_new(struct fs_door **out);
void fs_door_get(struct fs_door *d);
void fs_door_put(struct fs_door *d);

/* A slot for c (which must not have one): 0, or -ENOSPC. */
int fs_door_slot_get(struct fs_door *d, struct fs_conn *c, uint32_t *slot);
void fs_door_slot_put(struct fs_door *d, uint32_t slot);

static inline bool fs_door_mine(const struct fs_door *d)
{
  return d->pid == getpid();
}

/* Take the rung slots (fs_door_mine only), calling fn(arg, c) for each
 * connection still holding its slot (referenced during the call).  The
 * count of slots taken. */
unsigned fs_door_drain(struct fs_door *d, void (*fn)(void *arg, struct fs_conn *c), void *arg);

/* How a rung connection reaches its waiters (the readiness module's,
 * set before its first door is made: fs_door_deliver there). */
void fs_door_on_deliver(void (*fn)(void *arg, struct fs_conn *c));

/* A thread outside any epoll set (a blocking call, a poll) saw d's
 * eventfd readable: drain it, handing each rung connection to its
 * waiters.  Nothing in a process that did not make d. */
void fs_door_woken(struct fs_door *d);

/* The door whose eventfd is efd (referenced), or NULL. */
struct fs_door *fs_door_by_efd(int efd);

/* Any door alive in this process?  (One load.) */
bool fs_door_live(void);

#endif
