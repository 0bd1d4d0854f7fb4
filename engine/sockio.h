/* Socket engine, data half: send/recv over TCP or a fabric channel, the
 * SWITCH/REVERT cutover, and blocking (spin, then sleep). */
#ifndef FS_ENGINE_SOCKIO_H
#define FS_ENGINE_SOCKIO_H

#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "fabric/chan.h"
#include "base/lock.h"
#include "engine/cancel.h"
#include "engine/conn.h"
#include "engine/io.h"
#include "engine/sock.h"

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

/* What a TCP recvfrom/recvmsg reports besides the bytes, for a receive
 * the kernel did not make: no address, no control data, no flags. */
static inline void fs_sockio_no_meta(struct fs_io *io)
{
  if (io->op == FS_IO_RECVFROM && io->from && io->fromlen)
    *io->fromlen = 0;
  if (io->op == FS_IO_RECVMSG) {
    io->msg->msg_namelen = 0;
    io->msg->msg_controllen = 0;
    io->msg->msg_flags = 0;
  }
}

/* A receive with MSG_TRUNC where the kernel's cannot serve it (a channel,
 * or hooks that see every byte): the bytes are read into scratch memory
 * through recv (the caller's entry point, called without MSG_TRUNC) and
 * dropped; the count, or -errno. */
ssize_t fs_sockio_discard(struct fs_conn *c, int fd, struct fs_io *io, fs_io_fn recv);

/* A send with MSG_FASTOPEN through send (the caller's entry point): on a
 * socket not connected yet with an address, the connect it is (TCP Fast
 * Open); the send's result. */
ssize_t fs_sockio_fastopen(struct fs_conn *c, int fd, struct fs_io *io, fs_io_fn send);

/* fs_sock_tcp_io on c's socket under lock l, which a cancel of the call
 * (a cancellation point) unlocks on its way out (engine/cancel.h).  A call
 * that cannot block needs that only once the process cancels threads. */
ssize_t fs_sockio_tcp_locked_slow(fs_lock_t *l, int fd, struct fs_io *io);
/* Before a fork: what the cleanup handler above calls in libc (setjmp,
 * the handler's registration) bound now, in the parent (engine/sockfork.c). */
void fs_sockio_tcp_bind(void);

/* A non-blocking TCP read (a peek if io's flags say so) into io's buffers
 * after `skip` bytes, at most `limit` of them: the count or -errno. */
ssize_t fs_sockio_tcp_read(int fd, struct fs_io *io, size_t skip, size_t limit);

static inline ssize_t fs_sockio_tcp_locked(const struct fs_conn *c, fs_lock_t *l, int fd, struct fs_io *io)
{
  bool cannot_block = c->nonblock || (fs_io_flags(io) & MSG_DONTWAIT);
  if (cannot_block && !__atomic_load_n(&fs_cancel_seen, __ATOMIC_RELAXED))
    return fs_sock_tcp_io(fd, io);
  return fs_sockio_tcp_locked_slow(l, fd, io);
}

#endif
