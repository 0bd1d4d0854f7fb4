/* A connection's wake eventfd, made on first need, and the attach that
 * waits for threads asleep without it.
 *
 * The wake eventfd is what a peer writes once our end of a channel is
 * armed; before the upgrade it also tells our own sleepers that a channel
 * came.  Made at establish, it cost every connection an eventfd() and a
 * close() (2.5 us here: a short connection's largest cost) and an fd,
 * though most short connections never upgrade.  So it is made when it is
 * first needed: the rendezvous (its fd goes to the peer).  An epoll set
 * taking the connection makes none: the set has one bell for all its
 * entries, which the rendezvous rings so that the set registers the new
 * wake fd (engine/epoll.h); only a set without a bell makes it at once.
 *
 * A thread that sleeps on the TCP socket alone (a blocking receive, or a
 * poll, on a connection with no wake fd yet: "blind") would never hear of a
 * channel attached meanwhile.  That is harmless as long as the peer keeps
 * sending on TCP, and the peer moves its tx onto the ring only once our
 * end's `attached` flag is set.  So an attach with blind sleepers holds
 * that flag back; the last blind sleeper to leave sets it.  The peer's TCP
 * bytes in between wake them as TCP bytes always do. */
#ifndef FS_ENGINE_WAKE_H
#define FS_ENGINE_WAKE_H

#include <stdbool.h>

#include "base/fdreg.h"
#include "engine/conn.h"

/* Make c's wake eventfd if it has none.  0, or FS_REASON_RESOURCES (the
 * fd budget or eventfd() said no: c then stays on TCP for good). */
int fs_wake_get(struct fs_conn *c);

/* fn runs after fs_wake_get made a wake fd for a connection some epoll set
 * holds (fs_ready_epoll_wake_made; a hook, so that this module need not
 * know the readiness one, which knows it). */
void fs_wake_on_made(void (*fn)(struct fs_conn *c));

/* An epoll set without a bell takes c, or finishes setting it up: make
 * its wake fd if c is connected and may still upgrade (an event loop
 * sleeps on it). */
static inline void fs_wake_for_epoll(struct fs_conn *c)
{
  if (c->dir && !c->connecting && !c->no_upgrade)
    (void)fs_wake_get(c);
}

/* Wake our own waiters of c (its other direction, a poll, its epoll
 * sets): its wake fd, and its sets where its peer rings a door. */
void fs_wake_own(struct fs_conn *c);

/* fn runs for fs_wake_own of a connection with a door (the readiness
 * module's, set with its first door: fs_ready_door_kick). */
void fs_wake_on_door(void (*fn)(struct fs_conn *c));

/* c's peer rings a door (engine/door.h: its epoll set's, or the
 * process's where it was in no set): a waiter that sleeps outside the
 * door's drains (a blocking call, a poll) enters it.  Unless c has a wake
 * fd of its own, the wait leases one from the process's pool of eventfds
 * (whoever drains the door writes it) and gives it back at its leave: an
 * idle connection holds no descriptor, and the process holds as many as
 * it ever had waits at once.  Pool fds are never closed while the process
 * runs, so a waker that read c's lease just before it went back writes an
 * eventfd of ours (a spurious look elsewhere), never an fd the
 * application has since opened.  Returns the door (*leased: leave it), or
 * NULL: c has none.  A door another process made (a fork child's) is
 * slept on through fs_door_watch. */
struct fs_door *fs_wake_door_enter(struct fs_conn *c, bool *leased);
void fs_wake_door_leave(struct fs_conn *c);

/* c's wake fd if it is its own (no lease): what an epoll set registers.
 * Lock-free (a seqcount); -1 if none. */
int fs_wake_fd_own(struct fs_conn *c);

/* The fd a waiter sleeps on for door d: its eventfd where d is ours
 * (drain it with fs_door_woken), else this thread's watch (engine/door.h,
 * fs_door_watch).  -1: none. */
int fs_wake_door_fd(struct fs_door *d);

/* c is released (no waiter left): its lease, or a lease it made its own,
 * goes back to the pool.  True: c->wake_fd is its own, the caller closes it. */
bool fs_wake_conn_release(struct fs_conn *c);

/* A fork child: leases the parent's threads held are void, its pool is the
 * parent's (fs_sock_after_fork, each connection; then the pool). */
void fs_wake_fork_child_conn(struct fs_conn *c);
void fs_wake_fork_child(void);

/* c may still upgrade and has no wake fd yet: a sleep on its TCP socket
 * would be blind to a channel attached meanwhile. */
static inline bool fs_wake_none(const struct fs_conn *c)
{
  return !c->no_upgrade && __atomic_load_n(&c->wake_fd, __ATOMIC_ACQUIRE) < 0;
}

/* The application may not get every fd it would get without us: near
 * RLIMIT_NOFILE no new connection is accelerated (fd: the socket's). */
static inline bool fs_wake_fd_budget_ok(int fd)
{
  return fs_fdreg_budget_ok(fd, 2); /* its wake fd and the peer's */
}

/* Before a sleep on the TCP socket alone of a connection that may still
 * upgrade: true (call fs_wake_blind_leave after it), or false: a channel
 * was attached meanwhile, look again (its wake fd is there). */
bool fs_wake_blind_enter(struct fs_conn *c);
void fs_wake_blind_leave(struct fs_conn *c);

/* fs_sock_attach, c->chan set: set our end's `attached` flag now (the
 * caller wakes the peer as it always did), or hold it for the last blind
 * sleeper, which sets it and wakes the peer. */
void fs_wake_attach_publish(struct fs_conn *c);

#endif
