/* Readiness for poll/ppoll/select/pselect and epoll when tracked sockets
 * are involved.  For a connection on a fabric, readable means its rx ring
 * has data (or EOF, or the peer died); writable means the peer's ring has
 * room.  The kernel is asked about everything else, in one call, with each
 * fabric connection's wake eventfd added so that the one kernel call sleeps
 * for both. */
#ifndef FS_ENGINE_READY_H
#define FS_ENGINE_READY_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <stdint.h>
#include <time.h>

struct fs_conn;
struct fs_door;

/* ppoll-style: ts NULL = forever.  Returns count or -errno. */
int fs_ready_poll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask);

/* pselect-style over fd_sets. */
int fs_ready_select(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts, const sigset_t *mask);

/* True if any fd in the sets / array is tracked (else the caller goes
 * straight to libc). */
bool fs_ready_select_tracked(int nfds, const fd_set *r, const fd_set *w, const fd_set *e);

/* epoll: per-instance interest of tracked fds. */
bool fs_ready_epoll_tracked(int epfd);
int fs_ready_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);
int fs_ready_epoll_wait(int epfd, struct epoll_event *ev, int max, const struct timespec *ts, const sigset_t *mask);
/* An epoll fd is closed: forget its interest list. */
void fs_ready_epoll_close(int epfd);

/* A connection's last fd is closing: take it out of every epoll set. */
struct fs_conn;
void fs_ready_epoll_forget_conn(struct fs_conn *c);
/* c's wake fd was just made (its rendezvous): every epoll set holding c
 * registers it, woken by its bell if a thread sleeps there. */
void fs_ready_epoll_wake_made(struct fs_conn *c);

/* How many of the calling thread's polls, draining a door just now, armed
 * c (they look at it next: a delivery need not wake them). */
unsigned fs_ready_polling_here(const struct fs_conn *c);

/* Doors (engine/door.h).  The rendezvous offers c's peer the door of the
 * one epoll set c is in, or where it is in none the door of the thread
 * that slept on it last (or the process's): 0 and the door's eventfd,
 * memfd (lent, not to be closed) and c's slot, or -1: c is in more than
 * one set, or has a wake fd already, or FABSOCK_DOORBELL is off (the
 * caller makes a wake fd).  Once offered, c keeps its door until it is released. */
int fs_ready_door_offer(struct fs_conn *c, int *efd, int *memfd, uint32_t *slot);
void fs_ready_door_release(struct fs_conn *c);
/* c's own news (attached, reverted): its waiters look at it. */
void fs_ready_door_kick(struct fs_conn *c);
/* fd of c is about to be closed (c lives on in another fd): registrations
 * of that fd the library kept in kernel epoll sets go first. */
void fs_ready_epoll_fd_closing(struct fs_conn *c, int fd);

#endif
