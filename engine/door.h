/* A doorbell (base/bell.h), owner side: an epoll set's, or the process's
 * for connections in no set.  Its connections give their peers the door
 * and a slot in it instead of a wake eventfd of their own, so an upgraded
 * connection costs this process no descriptor and its peer at most one
 * per door (docs/design.md 1.7).
 *
 * A door is referenced by the set that made it (or the process) and by
 * each connection holding a slot; its eventfd stays open while any of them
 * lives (the peer rings it for as long as its channel does).  Whoever
 * drains it (the set's epoll_wait, a second set holding one of its
 * connections, a blocking call or a poll on one) hands each rung
 * connection to all its waiters (engine/epoll_door.c, fs_door_deliver).
 * Only the process that made it drains it: a fork child's drain would
 * take wakes its parent's threads wait for; the child's blocking calls and
 * polls watch it instead (fs_door_watch). */
#ifndef FS_ENGINE_DOOR_H
#define FS_ENGINE_DOOR_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "base/bell.h"
#include "base/proc.h"
#include "engine/conn.h"

#define FS_DOOR_CHUNK 256u
#define FS_DOOR_CHUNKS (FS_BELL_SLOTS / FS_DOOR_CHUNK)

struct fs_door {
  uint32_t refs;                               /* atomic */
  int efd, memfd;
  struct fs_bell_page *page;
  pid_t pid;                                   /* the maker: only it drains */
  bool homed;                                  /* atomic: a thread's door (fs_door_home_*) */
  pthread_mutex_t lock;                        /* slot allocation */
  struct fs_conn **chunk[FS_DOOR_CHUNKS];      /* slot -> connection (atomic reads) */
  uint32_t next;                               /* slots below were handed out once */
  uint32_t *free;                              /* slots given back */
  uint32_t nfree, free_cap;
  struct fs_door *gnext;                       /* all doors (fs_door_by_efd) */
};

/* A new door with one reference: 0 or -errno.  efd: an eventfd of the
 * library's that the door takes over (closed when the door goes; on
 * failure the caller still holds it), or -1 for one of its own.  An epoll
 * set's door takes the set's bell (engine/epoll.h). */
int fs_door_new_on(int efd, struct fs_door **out);
static inline int fs_door_new(struct fs_door **out)
{
  return fs_door_new_on(-1, out);
}
void fs_door_get(struct fs_door *d);
void fs_door_put(struct fs_door *d);

/* A slot for c (which must not have one): 0, or -ENOSPC. */
int fs_door_slot_get(struct fs_door *d, struct fs_conn *c, uint32_t *slot);
void fs_door_slot_put(struct fs_door *d, uint32_t slot);

static inline bool fs_door_mine(const struct fs_door *d)
{
  return d->pid == fs_proc_self();
}

/* Take the rung slots (fs_door_mine only), calling fn(arg, c) for each
 * connection still holding its slot (referenced during the call).  The
 * count of slots taken.  edge: the caller woke on an epoll set's
 * edge-triggered registration of d's eventfd, which is then left unread:
 * a system call less at each wake of an event loop (a PostgreSQL backend
 * made one read() per query).  A level-triggered waiter (a blocking call,
 * a poll) that finds it readable without a ring drains it with a read,
 * one look more; none is lost either way. */
unsigned fs_door_drain(struct fs_door *d, bool edge, void (*fn)(void *arg, struct fs_conn *c), void *arg);

/* How a rung connection reaches its waiters (the readiness module's,
 * set before its first door is made: fs_door_deliver there). */
void fs_door_on_deliver(void (*fn)(void *arg, struct fs_conn *c));

/* A thread outside any epoll set (a blocking call, a poll) saw d's
 * eventfd readable: drain it, handing each rung connection to its
 * waiters.  Nothing in a process that did not make d. */
void fs_door_woken(struct fs_door *d);

/* A door another process made (a fork child's parent's) is never drained
 * here, but its waits need not end at their slices: a thread sleeping on
 * one of its connections watches it through an epoll set of its own,
 * holding the door's eventfd edge-triggered (each ring writes it: an edge
 * in every set watching it, reported while the eventfd is still readable,
 * which a drain by the parent's blocking call or poll ends; its event
 * loop's leaves it readable, a look more here: docs/design.md 1.7), made at its first
 * such wait and closed at the thread's exit.  The watch clears the page's `rung`
 * after each edge, so that the ringer writes the eventfd again.  Returns
 * the fd to sleep on, or -1 (no fd to spare: the slices remain). */
int fs_door_watch(struct fs_door *d);

/* fd (fs_door_mine(d) ? d->efd : fs_door_watch(d)) was readable: drain
 * d, or take the watch's edges. */
void fs_door_fd_woken(struct fs_door *d, int fd);

/* Is fd this thread's watch? */
bool fs_door_watch_is(int fd);

/* The door whose eventfd is efd (referenced), or NULL. */
struct fs_door *fs_door_by_efd(int efd);

/* Any door alive in this process?  (One load.) */
bool fs_door_live(void);

/* The process's door, for connections in no epoll set that no thread
 * marked as its own (below), or past the thread doors' cap: referenced,
 * made on first need, never closed (a fork child makes its own); NULL if
 * none can be had.  It is also one thread's door: the first home that
 * needs a door takes the process's if it is there and no home holds it,
 * and a home's door made first becomes the process's.  So a
 * single-threaded process holds one door, whichever of its connections
 * upgraded first (it held two: a client's first connection often
 * upgrades before its first wait marks it). */
struct fs_door *fs_door_proc_get(void);

/* Thread doors.  A connection in no epoll set used to get the process's
 * door, and every thread blocked on one of those (a thread per connection:
 * MariaDB, Java) slept on that one eventfd: each ring woke them all, one
 * drained it and woke the right one again (docs/design.md 1.7).  So a
 * thread that sleeps on a connection still on TCP (a blocking receive, a
 * poll) marks it as its own, and at the rendezvous the connection takes
 * that thread's door, made then: its peer's ring wakes the thread that
 * waits for it, and nobody else.  A thread's door costs two descriptors (at
 * most FS_DOOR_HOMES of them per process; past that, or past the fd budget,
 * the process's door serves).  A connection another thread serves later
 * still works (any thread of the process drains any of its doors). */
#define FS_DOOR_HOMES 64

/* The calling thread sleeps on c, which has no door yet. */
void fs_door_home_mark(struct fs_conn *c);

/* The same for a sleep on the TCP socket alone (a blocking receive, a
 * poll), but only once c has moved half its upgrade threshold: no
 * rendezvous can come for it yet (the connecting end asks once the bytes
 * either way reach the threshold, and its threshold crossing claims c,
 * fs_door_home_claim), and a process's first mark cost three system calls
 * (a thread key made once, getpid, gettid) on the first receive of every
 * one-shot client.  A connection marked later, or never, has the
 * process's door. */
static inline void fs_door_home_mark_blind(struct fs_conn *c)
{
  if (c->tcp_tx + c->tcp_rx >= c->policy.upgrade_bytes / 2)
    fs_door_home_mark(c);
}

/* The calling thread's I/O on c crossed the upgrade threshold (or its
 * connect queued an upgrade at 0 bytes): it marks c unless a thread did
 * already, before the rendezvous is queued (locked: the caller holds
 * c->lock).  That thread is the likeliest to wait on c,
 * and the rendezvous (2 ms later) may come before its first wait: c then
 * gave its peer the process's door, on which every thread blocked on such
 * a connection sleeps (t_herd: an idle thread woke at each of 300 replies
 * to the main thread's connection, in 2 runs of 17). */
void fs_door_home_claim(struct fs_conn *c, bool locked);

/* The door of the thread that marked c last, made now if need be
 * (referenced), or NULL (none marked it; no door to be had).  fd: c's,
 * for the budget. */
struct fs_door *fs_door_home_door(struct fs_conn *c, int fd);

/* c is released: its mark goes. */
void fs_door_home_forget(struct fs_conn *c);

/* Thread doors alive (for tests). */
unsigned fs_door_home_count(void);

#endif
