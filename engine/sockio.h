/* Socket engine, data half: send/recv over TCP or a fabric channel, the
 * SWITCH/REVERT cutover, and blocking (spin, then sleep). */
#ifndef FS_ENGINE_SOCKIO_H
#define FS_ENGINE_SOCKIO_H

#include <stdbool.h>
#include <sys/types.h>

#include "fabric/chan.h"
#include "base/lock.h"
#include "engine/conn.h"
#include "engine/io.h"

/* Connection-level readiness for poll/epoll on a connection with a channel
 * (POLLIN/POLLOUT/POLLRDHUP/POLLHUP/POLLERR bits), given what the kernel
 * said about the TCP socket.  arm: declare interest so the peer wakes us. */
short fs_sockio_ready(struct fs_conn *c, struct fs_chan *ch, short want, short kernel, bool arm);

/* The ring is empty: has the peer's TCP socket closed (0), failed
 * (-errno), or said nothing (-EAGAIN)?  One MSG_PEEK. */
ssize_t fs_sockio_liveness(int fd);

/* The same, asked only when something was seen on the TCP socket since
 * (c->tcp_news) or every 10 ms, else -EAGAIN at once. */
ssize_t fs_sockio_live_check(struct fs_conn *c, int fd);

/* fs_sock_tcp_io under lock l, which a cancel of the blocked call
 * (a cancellation point) unlocks on its way out (engine/cancel.h). */
ssize_t fs_sockio_tcp_locked(fs_lock_t *l, int fd, struct fs_io *io);

#endif
