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

/* c's peer rings its epoll set's door (engine/door.h): a waiter outside
 * that set (a blocking call, a poll) sleeps on c's local wake fd, made now
 * if c has none (whoever drains the door writes it), and on the door
 * itself, in case nobody else drains it.  The door to sleep on, or NULL:
 * c has none, or it is another process's (fs_door_mine). */
struct fs_door *fs_wake_door(struct fs_conn *c);

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
