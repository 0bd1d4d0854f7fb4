/* The kernel's own calls on a connection's socket (engine/sock.h,
 * fs_sock_tcp_io; engine/sockio.h, fs_sockio_tcp_locked). */
#include <errno.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "base/lock.h"
#include "base/real.h"
#include "engine/agent.h"
#include "engine/batch.h"
#include "engine/sock.h"
#include "engine/sockio.h"

/* A call on a connection while the agent's start waits (engine/agent.h,
 * fs_agent_wait_point): a receive that may block looks first, without
 * blocking, and what is there already (a one-shot client's EOF) comes
 * back with no thread started; one that would block starts it, then
 * blocks.  MSG_WAITALL may not be cut short: it starts it at once.  A
 * receive that cannot block starts nothing; a send starts it.  True with
 * *r the result. */
static bool fs_sock_tcp_look(int fd, struct fs_io *io, ssize_t *r)
{
  int flags = fs_io_flags(io);
  if (io->op > FS_IO_RECVMSG) {
    /* A send after the reply that crossed: not a one-shot client (it may
     * sleep next, not in a wait of ours).  Under txlock maybe: only if
     * the agent lock is free, else at the next send. */
    fs_agent_start_deferred_try();
    return false;
  }
  if (flags & MSG_DONTWAIT)
    return false;
  if (!(flags & MSG_WAITALL)) {
    int saved = errno;
    flags |= MSG_DONTWAIT;
    switch (io->op) {
    case FS_IO_READ: /* read is recv with no flags, on a socket */
    case FS_IO_RECV: *r = FS_REAL(recv)(fd, io->iov[0].iov_base, io->iov[0].iov_len, flags); break;
    case FS_IO_RECVFROM:
      *r = FS_REAL(recvfrom)(fd, io->iov[0].iov_base, io->iov[0].iov_len, flags, io->from, io->fromlen);
      break;
    case FS_IO_RECVMSG: *r = FS_REAL(recvmsg)(fd, io->msg, flags); break;
    default: { /* FS_IO_READV */
      struct msghdr m = { .msg_iov = io->iov, .msg_iovlen = (size_t)io->iovcnt };
      *r = FS_REAL(recvmsg)(fd, &m, flags);
    }
    }
    if (*r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
      *r = *r < 0 ? -errno : *r;
      return true;
    }
    errno = saved;
  }
  fs_agent_start_deferred();
  return false;
}

ssize_t fs_sock_tcp_io(int fd, struct fs_io *io)
{
  fs_batch_flush(); /* the kernel call may block: nothing held meanwhile */
  ssize_t r;
  if (__builtin_expect(__atomic_load_n(&fs_agent_deferred, __ATOMIC_RELAXED), 0) && fs_sock_tcp_look(fd, io, &r))
    return r;
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

static void fs_sockio_nothing(void *arg)
{
  (void)arg;
}

void fs_sockio_tcp_bind(void)
{
  pthread_cleanup_push(fs_sockio_nothing, NULL);
  pthread_cleanup_pop(0);
}

/* The part of iov after `skip` bytes, as a new iovec (at most 64 entries). */
static int fs_iov_sub(const struct iovec *iov, int cnt, size_t skip, struct iovec *out)
{
  int n = 0;
  for (int i = 0; i < cnt && n < 64; i++) {
    if (skip >= iov[i].iov_len) {
      skip -= iov[i].iov_len;
      continue;
    }
    out[n].iov_base = (char *)iov[i].iov_base + skip;
    out[n].iov_len = iov[i].iov_len - skip;
    skip = 0;
    n++;
  }
  return n;
}

ssize_t fs_sockio_tcp_read(int fd, struct fs_io *io, size_t skip, size_t limit)
{
  struct iovec sub[64];
  int n = fs_iov_sub(io->iov, io->iovcnt, skip, sub);
  size_t tot = 0;
  for (int i = 0; i < n; i++) {
    if (tot + sub[i].iov_len > limit) {
      sub[i].iov_len = limit - tot;
      n = i + 1;
      tot = limit;
      break;
    }
    tot += sub[i].iov_len;
  }
  struct msghdr mh = { .msg_iov = sub, .msg_iovlen = (size_t)n };
  ssize_t r = FS_REAL(recvmsg)(fd, &mh, (io->flags & MSG_PEEK) | MSG_DONTWAIT);
  return r < 0 ? -errno : r;
}
