/* The kernel's own calls on a connection's socket (engine/sock.h,
 * fs_sock_tcp_io; engine/sockio.h, fs_sockio_tcp_locked). */
#include <errno.h>
#include <pthread.h>

#include "base/lock.h"
#include "base/real.h"
#include "engine/batch.h"
#include "engine/sock.h"
#include "engine/sockio.h"

ssize_t fs_sock_tcp_io(int fd, struct fs_io *io)
{
  fs_batch_flush(); /* the kernel call may block: nothing held meanwhile */
  ssize_t r;
  switch (io->op) {
  case FS_IO_READ: r = FS_REAL(read)(fd, io->iov[0].iov_base, io->iov[0].iov_len); break;
  case FS_IO_READV: r = FS_REAL(readv)(fd, io->iov, io->iovcnt); break;
  case FS_IO_RECV: r = FS_REAL(recv)(fd, io->iov[0].iov_base, io->iov[0].iov_len, io->flags); break;
  case FS_IO_RECVFROM:
    r = FS_REAL(recvfrom)(fd, io->iov[0].iov_base, io->iov[0].iov_len, io->flags, io->from, io->fromlen);
    break;
  case FS_IO_RECVMSG: r = FS_REAL(recvmsg)(fd, io->msg, io->flags); break;
  case FS_IO_WRITE: r = FS_REAL(write)(fd, io->iov[0].iov_base, io->iov[0].iov_len); break;
  case FS_IO_WRITEV: r = FS_REAL(writev)(fd, io->iov, io->iovcnt); break;
  case FS_IO_SEND: r = FS_REAL(send)(fd, io->iov[0].iov_base, io->iov[0].iov_len, io->flags); break;
  case FS_IO_SENDTO:
    r = FS_REAL(sendto)(fd, io->iov[0].iov_base, io->iov[0].iov_len, io->flags, io->to, io->tolen);
    break;
  case FS_IO_SENDMSG: r = FS_REAL(sendmsg)(fd, io->msg, io->flags); break;
  case FS_IO_SENDFILE: r = FS_REAL(sendfile)(fd, io->in_fd, io->off, io->count); break;
  default: return -EINVAL;
  }
  return r < 0 ? -errno : r;
}

/* A kernel call that may block under one of our locks stays the
 * cancellation point it is: a cancel there unwinds through the unlock
 * (engine/cancel.h). */
static void fs_sockio_unlock_cancelled(void *l)
{
  fs_unlock(l);
}

ssize_t fs_sockio_tcp_locked_slow(fs_lock_t *l, int fd, struct fs_io *io)
{
  ssize_t r;
  pthread_cleanup_push(fs_sockio_unlock_cancelled, l);
  r = fs_sock_tcp_io(fd, io);
  pthread_cleanup_pop(0);
  return r;
}
