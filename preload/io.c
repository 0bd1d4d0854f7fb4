/* Exported data-path names: read/write/recv/send families, sendfile,
 * splice/tee/copy_file_range and the _FORTIFY_SOURCE variants.  An
 * untracked fd costs one load. */
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/sendfile.h>
#include <unistd.h>

#include "engine/adopt.h"
#include "engine/cancel.h"
#include "engine/sock.h"
#include "preload/boundary.h"
#include "preload/export.h"
#include "engine/fdtab.h"
#include "base/real.h"

/* A cancel pending when the call starts acts here, before it takes any
 * lock of ours (the call is a cancellation point), our reference dropped
 * on the way out; a cancel held off while it slept in the library acts at
 * its end, once the connection's locks and our reference are gone
 * (engine/cancel.h). */
static void fs_io_put(void *c)
{
  fs_conn_put(c);
}

static inline void fs_io_cancel_point(struct fs_conn *c)
{
  if (__builtin_expect(__atomic_load_n(&fs_cancel_seen, __ATOMIC_RELAXED), 0)) {
    pthread_cleanup_push(fs_io_put, c);
    pthread_testcancel();
    pthread_cleanup_pop(0);
  }
}

static ssize_t fs_io_recv(struct fs_conn *c, int fd, struct fs_io *io)
{
  fs_io_cancel_point(c);
  ssize_t r = fs_sock_recv(c, fd, io);
  fs_conn_put(c);
  fs_cancel_release();
  return fs_boundary_ret(r);
}

static ssize_t fs_io_send(struct fs_conn *c, int fd, struct fs_io *io)
{
  fs_io_cancel_point(c);
  ssize_t r = fs_sock_send(c, fd, io);
  fs_conn_put(c);
  fs_cancel_release();
  return fs_boundary_ret(r);
}

FS_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
  struct fs_conn *c = fs_fdtab_get(fd);
  if (!c)
    return FS_REAL(read)(fd, buf, n);
  struct iovec v = { buf, n };
  struct fs_io io = { .op = FS_IO_READ, .iov = &v, .iovcnt = 1 };
  return fs_io_recv(c, fd, &io);
}

/* A vector the kernel refuses (EINVAL for readv/writev, EMSGSIZE for
 * recvmsg/sendmsg) is refused by the kernel: it moves no byte, on a fabric
 * connection either.  A fabric took 1025 buffers and read "0 bytes" for -1. */
static inline bool fs_io_bad_vec(size_t n)
{
  return n > IOV_MAX;
}

FS_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
  struct fs_conn *c = fs_fdtab_get(fd);
  if (!c || fs_io_bad_vec((size_t)cnt))
    return FS_REAL(readv)(fd, iov, cnt);
  struct fs_io io = { .op = FS_IO_READV, .iov = (struct iovec *)iov, .iovcnt = cnt };
  return fs_io_recv(c, fd, &io);
}

FS_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
  struct fs_conn *c = fs_fdtab_get(fd);
  if (!c)
    return FS_REAL(recv)(fd, buf, n, flags);
  struct iovec v = { buf, n };
  struct fs_io io = { .op = FS_IO_RECV, .flags = flags, .iov = &v, .iovcnt = 1 };
  return fs_io_recv(c, fd, &io);
}

FS_EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *from, socklen_t *fromlen)
{
  struct fs_conn *c = fs_fdtab_get(fd);
  if (!c)
    return FS_REAL(recvfrom)(fd, buf, n, flags, from, fromlen);
  struct iovec v = { buf, n };
  struct fs_io io = { .op = FS_IO_RECVFROM, .flags = flags, .iov = &v, .iovcnt = 1,
                      .from = from, .fromlen = fromlen };
  return fs_io_recv(c, fd, &io);
}

FS_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
  struct fs_conn *c = fs_fdtab_get(fd);
  if (!c) {
    ssize_t r = FS_REAL(recvmsg)(fd, msg, flags);
    if (r >= 0 && msg && msg->msg_controllen) {
      int saved = errno;
      fs_adopt_scm_received(msg); /* connections handed to us (node cluster) */
      errno = saved;
    }
    return r;
  }
  if (!msg || fs_io_bad_vec(msg->msg_iovlen))
    return FS_REAL(recvmsg)(fd, msg, flags);
  struct fs_io io = { .op = FS_IO_RECVMSG, .flags = flags, .msg = msg,
                      .iov = msg->msg_iov, .iovcnt = (int)msg->msg_iovlen };
  return fs_io_recv(c, fd, &io);
}

/* recvmmsg/sendmmsg on a stream socket are loops of recvmsg/sendmsg; doing
 * them one by one keeps the fabric path and the byte accounting single. */
FS_EXPORT int recvmmsg(int fd, struct mmsghdr *v, unsigned n, int flags, struct timespec *t)
{
  if (!fs_fdtab_tracked(fd))
    return FS_REAL(recvmmsg)(fd, v, n, flags, t);
  unsigned i;
  for (i = 0; i < n; i++) {
    int f = flags & ~MSG_WAITFORONE;
    if (i > 0 && (flags & MSG_WAITFORONE))
      f |= MSG_DONTWAIT;
    ssize_t r = recvmsg(fd, &v[i].msg_hdr, f);
    if (r < 0) {
      if (i > 0)
        break;
      return -1;
    }
    v[i].msg_len = (unsigned)r;
    if (r == 0)
      return (int)i + 1;
  }
  return (int)i;
}

FS_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
  struct fs_conn *c = fs_fdtab_get(fd);
  if (!c)
    return FS_REAL(write)(fd, buf, n);
  struct iovec v = { (void *)buf, n };
  struct fs_io io = { .op = FS_IO_WRITE, .iov = &v, .iovcnt = 1 };
  return fs_io_send(c, fd, &io);
}

FS_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
  struct fs_conn *c = fs_fdtab_get(fd);
  if (!c || fs_io_bad_vec((size_t)cnt))
    return FS_REAL(writev)(fd, iov, cnt);
  struct fs_io io = { .op = FS_IO_WRITEV, .iov = (struct iovec *)iov, .iovcnt = cnt };
  return fs_io_send(c, fd, &io);
}

FS_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
  struct fs_conn *c = fs_fdtab_get(fd);
  if (!c)
    return FS_REAL(send)(fd, buf, n, flags);
  struct iovec v = { (void *)buf, n };
  struct fs_io io = { .op = FS_IO_SEND, .flags = flags, .iov = &v, .iovcnt = 1 };
  return fs_io_send(c, fd, &io);
}

FS_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *to, socklen_t tolen)
{
  struct fs_conn *c = fs_fdtab_get(fd);
  if (!c)
    return FS_REAL(sendto)(fd, buf, n, flags, to, tolen);
  struct iovec v = { (void *)buf, n };
  struct fs_io io = { .op = FS_IO_SENDTO, .flags = flags, .iov = &v, .iovcnt = 1, .to = to, .tolen = tolen };
  return fs_io_send(c, fd, &io);
}

FS_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
  struct fs_conn *c = fs_fdtab_get(fd);
  if (!c) {
    /* An accelerated fd leaving for another process goes back to TCP first. */
    if (msg && msg->msg_controllen) {
      int saved = errno;
      fs_adopt_scm_sent(msg);
      errno = saved;
    }
    return FS_REAL(sendmsg)(fd, msg, flags);
  }
  if (!msg || fs_io_bad_vec(msg->msg_iovlen))
    return FS_REAL(sendmsg)(fd, msg, flags);
  struct fs_io io = { .op = FS_IO_SENDMSG, .flags = flags, .msg = (struct msghdr *)msg,
                      .iov = msg->msg_iov, .iovcnt = (int)msg->msg_iovlen };
  return fs_io_send(c, fd, &io);
}

FS_EXPORT int sendmmsg(int fd, struct mmsghdr *v, unsigned n, int flags)
{
  if (!fs_fdtab_tracked(fd))
    return FS_REAL(sendmmsg)(fd, v, n, flags);
  unsigned i;
  for (i = 0; i < n; i++) {
    ssize_t r = sendmsg(fd, &v[i].msg_hdr, flags);
    if (r < 0) {
      if (i > 0)
        break;
      return -1;
    }
    v[i].msg_len = (unsigned)r;
  }
  return (int)i;
}

/* sendfile to a tracked socket goes through the engine: on TCP it is the
 * kernel's own sendfile, counted (a peer without libfabsock, a short
 * connection: no copy through us); on a fabric the file is read straight
 * into the ring.  Where hooks must see the bytes (-EXDEV), the file is
 * read into a bounce buffer and sent through the engine from there. */
static ssize_t fs_sendfile_bounce(struct fs_conn *c, int out, int in, off_t *off, size_t n);

static ssize_t fs_sendfile_common(int out, int in, off_t *off, size_t n)
{
  struct fs_conn *c = fs_fdtab_get(out);
  if (!c)
    return FS_REAL(sendfile)(out, in, off, n);
  fs_io_cancel_point(c);
  struct fs_io sf = { .op = FS_IO_SENDFILE, .in_fd = in, .off = off, .count = n };
  ssize_t sr = fs_sock_send(c, out, &sf);
  if (sr == -EXDEV)
    sr = fs_sendfile_bounce(c, out, in, off, n);
  fs_conn_put(c);
  fs_cancel_release();
  return fs_boundary_ret(sr);
}

/* Through a buffer, where hooks must see the bytes. */
static ssize_t fs_sendfile_bounce(struct fs_conn *c, int out, int in, off_t *off, size_t n)
{
  char buf[65536];
  size_t done = 0;
  ssize_t err = 0;
  off_t pos = off ? *off : 0;
  while (done < n) {
    size_t want = n - done < sizeof buf ? n - done : sizeof buf;
    ssize_t r = off ? pread(in, buf, want, pos) : FS_REAL(read)(in, buf, want);
    if (r < 0) {
      err = -errno;
      break;
    }
    if (r == 0)
      break;
    struct iovec v = { buf, (size_t)r };
    struct fs_io io = { .op = FS_IO_SEND, .iov = &v, .iovcnt = 1 };
    ssize_t w = fs_sock_send(c, out, &io);
    if (w < 0) {
      err = w;
      if (!off)  /* the file position moved past bytes we could not send */
        lseek(in, -(off_t)r, SEEK_CUR);
      break;
    }
    if (!off && w < r)
      lseek(in, -(off_t)(r - w), SEEK_CUR);
    done += (size_t)w;
    pos += w;
    if (w < r)
      break;
  }
  if (off)
    *off = pos;
  return done == 0 && err < 0 ? err : (ssize_t)done;
}

FS_EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t n)
{
  return fs_sendfile_common(out, in, off, n);
}

FS_EXPORT ssize_t sendfile64(int out, int in, off_t *off, size_t n) __attribute__((alias("sendfile")));

/* Calls the kernel serves on its own, with a socket at either end: the
 * kernel socket must hold the connection's bytes, so a tracked connection
 * goes back to TCP first (on a fabric they would sit in its ring, and the
 * call would wait for them forever). */
static void fs_io_to_kernel(int fd)
{
  struct fs_conn *c = fs_fdtab_get(fd);
  if (c) {
    fs_sock_to_kernel(c, fd);
    fs_conn_put(c);
  }
}

FS_EXPORT ssize_t splice(int in, loff_t *off_in, int out, loff_t *off_out, size_t n, unsigned flags)
{
  fs_io_to_kernel(in);
  fs_io_to_kernel(out);
  return FS_REAL(splice)(in, off_in, out, off_out, n, flags);
}

FS_EXPORT ssize_t tee(int in, int out, size_t n, unsigned flags)
{
  fs_io_to_kernel(in);
  fs_io_to_kernel(out);
  return FS_REAL(tee)(in, out, n, flags);
}

FS_EXPORT ssize_t copy_file_range(int in, loff_t *off_in, int out, loff_t *off_out, size_t n, unsigned flags)
{
  fs_io_to_kernel(in);
  fs_io_to_kernel(out);
  return FS_REAL(copy_file_range)(in, off_in, out, off_out, n, flags);
}

/* _FORTIFY_SOURCE entry points: fail like glibc's own (__chk_fail) when the
 * buffer is too small, else take our path. */
extern void __chk_fail(void) __attribute__((noreturn));
extern ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
extern ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
extern ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                              struct sockaddr *from, socklen_t *fromlen);

FS_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
  if (n > buflen)
    __chk_fail();
  return read(fd, buf, n);
}

FS_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
  if (n > buflen)
    __chk_fail();
  return recv(fd, buf, n, flags);
}

FS_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                                 struct sockaddr *from, socklen_t *fromlen)
{
  if (n > buflen)
    __chk_fail();
  return recvfrom(fd, buf, n, flags, from, fromlen);
}
