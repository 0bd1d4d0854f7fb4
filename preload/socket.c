/* Exported socket-lifecycle names: socket, bind, listen, accept, connect,
 * shutdown, close (and syscall(SYS_close)), dup*, fcntl, ioctl, {get,set}sockopt.
 *
 * Pattern: one fd-table load; an fd we do not track goes straight to libc. */
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/fdreg.h"
#include "engine/adopt.h"
#include "engine/agent.h"
#include "engine/ready.h"
#include "engine/sock.h"
#include "engine/sockopt.h"
#include "preload/boundary.h"
#include "preload/export.h"
#include "preload/proc.h"
#include "preload/uring.h"
#include "engine/fdtab.h"
#include "engine/inherit.h"
#include "base/real.h"

FS_EXPORT int socket(int domain, int type, int protocol)
{
  int fd = FS_REAL(socket)(domain, type, protocol);
  if (fd >= 0 && (domain == AF_INET || domain == AF_INET6)) {
    int saved = errno;
    fs_sock_created(fd, domain, type, protocol);
    errno = saved;
  }
  return fd;
}

FS_EXPORT int socketpair(int domain, int type, int protocol, int sv[2])
{
  return FS_REAL(socketpair)(domain, type, protocol, sv);
}

FS_EXPORT int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
  return FS_REAL(bind)(fd, addr, len);
}

FS_EXPORT int listen(int fd, int backlog)
{
  int rc = FS_REAL(listen)(fd, backlog);
  if (rc == 0) {
    struct fs_conn *c = fs_fdtab_get(fd);
    if (c) {
      int saved = errno;
      fs_sock_listening(c, fd);
      fs_conn_put(c);
      errno = saved;
    }
  }
  return rc;
}

/* The peer's address comes back from accept itself, into the caller's
 * buffer or, given none, into ours: the library then needs no
 * getpeername.  A truncated one (a short buffer) is not used. */
static int fs_accept_common(int fd, struct sockaddr *addr, socklen_t *len, int flags, bool four)
{
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  struct sockaddr *a = addr ? addr : (struct sockaddr *)&ss;
  socklen_t *l = addr ? len : &sl, asked = addr && len ? *len : sl;
  struct fs_conn *lc = fs_fdtab_get(fd);
  if (!lc) {
    /* Handed over (socket activation)?  Adopted before the accept: its
     * names are served before a socket from it exists, or a peer asking
     * in between found neither names nor a listed listener. */
    int saved = errno;
    lc = fs_inherit_listener(fd);
    errno = saved;
  }
  int nfd = four ? FS_REAL(accept4)(fd, a, l, flags) : FS_REAL(accept)(fd, a, l);
  if (lc) {
    int saved = errno;
    if (nfd >= 0) {
      bool whole = l && *l <= asked;
      fs_sock_accepted(lc, fd, nfd, four ? flags : 0, whole ? a : NULL, whole ? *l : 0);
    }
    fs_conn_put(lc);
    errno = saved;
  }
  return nfd;
}

FS_EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
  return fs_accept_common(fd, addr, len, 0, false);
}

FS_EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
  return fs_accept_common(fd, addr, len, flags, true);
}

FS_EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
  int rc = FS_REAL(connect)(fd, addr, len);
  struct fs_conn *c = fs_fdtab_get(fd);
  if (c) {
    int saved = errno;
    fs_sock_connect_done(c, fd, rc < 0 ? -saved : 0, addr, len);
    fs_conn_put(c);
    errno = saved;
  }
  return rc;
}

FS_EXPORT int shutdown(int fd, int how)
{
  struct fs_conn *c = fs_fdtab_get(fd);
  if (!c)
    return FS_REAL(shutdown)(fd, how);
  int rc = fs_sock_shutdown(c, fd, how);
  fs_conn_put(c);
  return (int)fs_boundary_ret(rc);
}

/* Drop our entry, then close the kernel fd.  The order matters: the fabric's
 * EOF must be on its way before the peer can see the TCP socket close. */
static void fs_forget(int fd)
{
  struct fs_conn *c = fs_fdtab_take(fd);
  if (c) {
    int saved = errno;
    fs_sock_close(c, fd);
    errno = saved;
  }
}

FS_EXPORT int close(int fd)
{
  /* Not while the library makes one at a low number (base/fdreg.h); a
   * socket of the application's own is never one of those. */
  if (fs_fdreg_windows_open() && !fs_fdtab_tracked(fd))
    fs_fdreg_settle(fd);
  /* One of ours (see fs_fdreg_set): the application never opened
   * it, so closing it is a blanket close; it stays ours. */
  if (__builtin_expect(fs_fdreg_is(fd), 0))
    return 0;
  fs_forget(fd);
  if (__builtin_expect(fs_ready_epoll_tracked(fd), 0))
    fs_ready_epoll_close(fd);
  return FS_REAL(close)(fd);
}

/* A call the kernel serves from here on: back to TCP, byte-exact, for good
 * (kernel-io), errno as it was. */
static void fs_kernel_io(struct fs_conn *c, int fd)
{
  int saved = errno;
  fs_sock_to_kernel(c, fd);
  errno = saved;
}

/* stdio reads and writes its stream's fd inside libc, past read() and
 * write() above: a socket handed to it goes back to TCP for good
 * (kernel-io), or its peer's bytes would sit in a ring that fgets never
 * reads.  fdopen(3) is where a program does that; stdin and stdout on an
 * inherited socket are looked at before an upgrade (engine/stdio.h). */
FS_EXPORT FILE *fdopen(int fd, const char *mode)
{
  struct fs_conn *c = fs_fdtab_get(fd);
  if (c) {
    fs_kernel_io(c, fd);
    fs_conn_put(c);
  }
  return FS_REAL(fdopen)(fd, mode);
}

/* fclose(3) closes the fd inside libc, where close() above never sees it:
 * a socket's entry would stay, and a file opened at that number next read
 * through it (-1 where the connection had been upgraded). */
FS_EXPORT int fclose(FILE *fp)
{
  int fd = fp != NULL ? fp->_fileno : -1; /* glibc's FILE; -1 if no fd */
  if (fd >= 0 && __builtin_expect(fs_fdtab_tracked(fd), 0))
    fs_forget(fd);
  return FS_REAL(fclose)(fp);
}

/* At load: a connection inherited on stdin/stdout (inetd style) is ours to
 * accelerate too; three fstat calls when none is a socket. */
__attribute__((constructor)) static void fs_preload_stdio(void)
{
  int saved = errno;
  fs_adopt_stdio();
  errno = saved;
}

/* syscall(SYS_close, fd): libuv (node) closes every descriptor this way,
 * so a socket closed by it would otherwise stay in our table as if open,
 * its stat row claiming a connection the process no longer holds.
 * syscall(SYS_io_uring_setup, ...): see preload/uring.c; syscall(SYS_seccomp,
 * SECCOMP_SET_MODE_FILTER, ...): see prctl in preload/proc.c. */
FS_EXPORT long syscall(long n, ...)
{
  va_list ap;
  va_start(ap, n);
  long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
  long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
  va_end(ap);
  if (n == SYS_close)
    return close((int)a);
  if (n == SYS_io_uring_setup)
    fs_preload_uring_seen();
  if (n == SYS_seccomp && a == SECCOMP_SET_MODE_FILTER)
    fs_preload_confined(); /* as prctl(PR_SET_SECCOMP) */
  return FS_REAL(syscall)(n, a, b, c, d, e, f);
}

/* close_range over [lo, hi] minus the library's own descriptors. */
static int fs_close_range_skip(unsigned lo, unsigned hi, int flags)
{
  unsigned cur = lo;
  while (cur <= hi && cur < FS_FDREG_MAX) {
    unsigned next = cur;
    while (next <= hi && next < FS_FDREG_MAX && !fs_fdreg_is((int)next))
      next++;
    if (next > cur && FS_REAL(close_range)(cur, next - 1, flags) < 0)
      return -1;
    if (next > hi || next >= FS_FDREG_MAX) {
      cur = next;
      break;
    }
    cur = next + 1; /* skip ours */
  }
  if (cur <= hi && cur >= FS_FDREG_MAX)
    return FS_REAL(close_range)(cur, hi, flags);
  return 0;
}

FS_EXPORT int close_range(unsigned lo, unsigned hi, int flags)
{
  if (lo > hi || (flags & ~(CLOSE_RANGE_UNSHARE | CLOSE_RANGE_CLOEXEC))) /* the kernel's answer */
    return FS_REAL(close_range)(lo, hi, flags);
  /* CLOSE_RANGE_CLOEXEC only marks fds; they are forgotten at exec. */
  if (!(flags & CLOSE_RANGE_CLOEXEC)) {
    int saved = errno;
    unsigned top = (unsigned)fs_fdtab_hiwater;
    for (unsigned fd = lo; fd < top && fd <= hi; fd++)
      fs_forget((int)fd);
    errno = saved;
  }
  /* The agent must not open a descriptor while the application closes
   * them all (it would take a number the application expects closed). */
  fs_agent_pause();
  fs_fdreg_settle(-1); /* and no other thread is making one (base/fdreg.h) */
  int rc = fs_close_range_skip(lo, hi, flags);
  fs_agent_resume();
  return rc;
}

FS_EXPORT void closefrom(int lowfd)
{
  int saved = errno;
  for (int fd = lowfd < 0 ? 0 : lowfd; fd < fs_fdtab_hiwater; fd++)
    fs_forget(fd);
  errno = saved;
  fs_agent_pause(); /* see close_range */
  fs_fdreg_settle(-1);
  if (fs_close_range_skip((unsigned)(lowfd < 0 ? 0 : lowfd), ~0U, 0) < 0) {
    /* Old kernel: fall back like glibc does. */
    for (int fd = lowfd < 0 ? 0 : lowfd; fd < 65536; fd++)
      if (!fs_fdreg_is(fd))
        FS_REAL(close)(fd);
  }
  fs_agent_resume();
  errno = saved;
}

/* A new fd that refers to the same open socket shares the connection. */
static void fs_dup_track(int oldfd, int newfd)
{
  int saved = errno;
  if (newfd != oldfd)
    fs_forget(newfd);
  struct fs_conn *c = fs_fdtab_get(oldfd);
  if (c) {
    /* Untracked (the high table could not be mapped), the new number reads
     * and writes the kernel socket: the connection's bytes must be there,
     * for good, and its fd count then matters to nothing. */
    if (fs_fdtab_install(newfd, c) < 0)
      fs_sock_to_kernel(c, oldfd);
    fs_conn_put(c);
  }
  errno = saved;
}

FS_EXPORT int dup(int fd)
{
  int nfd = FS_REAL(dup)(fd);
  if (nfd >= 0)
    fs_dup_track(fd, nfd);
  return nfd;
}

/* dup2/dup3 close nfd silently: forget it first, as close() would, but only
 * if fd is valid (otherwise the call fails and nfd stays open). */
static void fs_dup_prepare(int fd, int nfd)
{
  if (fd != nfd && fs_fdtab_tracked(nfd) && FS_REAL(fcntl)(fd, F_GETFD, 0) >= 0)
    fs_forget(nfd);
}

FS_EXPORT int dup2(int fd, int nfd)
{
  fs_dup_prepare(fd, nfd);
  int rc = FS_REAL(dup2)(fd, nfd);
  if (rc >= 0 && fd != nfd)
    fs_fdreg_set(nfd, false); /* the application took that number over */
  if (rc >= 0 && fd != nfd && fs_fdtab_tracked(fd))
    fs_dup_track(fd, rc);
  return rc;
}

FS_EXPORT int dup3(int fd, int nfd, int flags)
{
  fs_dup_prepare(fd, nfd);
  int rc = FS_REAL(dup3)(fd, nfd, flags);
  if (rc >= 0)
    fs_fdreg_set(nfd, false); /* the application took that number over */
  if (rc >= 0 && fs_fdtab_tracked(fd))
    fs_dup_track(fd, rc);
  return rc;
}

static int fs_fcntl_common(int fd, int cmd, long arg)
{
  if (fs_fdreg_windows_open() && !fs_fdtab_tracked(fd))
    fs_fdreg_settle(fd); /* a number the application closed is closed (base/fdreg.h) */
  int rc = FS_REAL(fcntl)(fd, cmd, arg);
  if (rc < 0)
    return rc;
  switch (cmd) {
  case F_DUPFD:
  case F_DUPFD_CLOEXEC:
    fs_dup_track(fd, rc);
    break;
  case F_SETFL: {
    struct fs_conn *c = fs_fdtab_get(fd);
    if (c) {
      fs_sock_set_nonblock(c, (arg & O_NONBLOCK) != 0);
      /* Signal-driven I/O (O_ASYNC, FIOASYNC): the kernel raises SIGIO
       * when its socket has bytes, and a ring's never make it: a program
       * waiting for the signal slept for good once its peer's bytes went
       * to a ring. */
      if (arg & O_ASYNC)
        fs_kernel_io(c, fd);
      fs_conn_put(c);
    }
    break;
  }
  default:
    break;
  }
  return rc;
}

FS_EXPORT int fcntl(int fd, int cmd, ...)
{
  va_list ap;
  va_start(ap, cmd);
  long arg = va_arg(ap, long);
  va_end(ap);
  return fs_fcntl_common(fd, cmd, arg);
}

FS_EXPORT int fcntl64(int fd, int cmd, ...) __attribute__((alias("fcntl")));

FS_EXPORT int ioctl(int fd, unsigned long req, ...)
{
  va_list ap;
  va_start(ap, req);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  struct fs_conn *c = fs_fdtab_get(fd);
  if (!c)
    return FS_REAL(ioctl)(fd, req, arg);
  int rc;
  if (req == FIONREAD) {
    int n;
    rc = fs_sockopt_fionread(c, fd, &n);
    if (rc == -ENOTSUP) {
      rc = FS_REAL(ioctl)(fd, req, arg);
    } else if (rc == 0) {
      *(int *)arg = n;
    } else {
      errno = -rc;
      rc = -1;
    }
  } else {
    rc = FS_REAL(ioctl)(fd, req, arg);
    if (rc == 0 && req == FIONBIO)
      fs_sock_set_nonblock(c, *(int *)arg != 0);
    else if (rc == 0 && req == FIOASYNC && *(int *)arg != 0)
      fs_kernel_io(c, fd); /* as O_ASYNC (fcntl above) */
  }
  fs_conn_put(c);
  return rc;
}

FS_EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
  int rc = FS_REAL(getsockopt)(fd, level, name, val, len);
  if (rc == 0 && level == IPPROTO_TCP && name == TCP_CORK) {
    struct fs_conn *c = fs_fdtab_get(fd);
    if (c) {
      fs_sockopt_get(c, level, name, val, len);
      fs_conn_put(c);
    }
  }
  return rc;
}

FS_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
  if (level == IPPROTO_TCP && name == TCP_CORK) {
    struct fs_conn *c = fs_fdtab_get(fd);
    bool here = c && fs_sockopt_set_here(c, level, name, val, len);
    if (c)
      fs_conn_put(c);
    if (here)
      return 0;
  }
  int rc = FS_REAL(setsockopt)(fd, level, name, val, len);
  if (rc == 0) {
    struct fs_conn *c = fs_fdtab_get(fd);
    if (c) {
      int saved = errno;
      fs_sockopt_set(c, fd, level, name, val, len);
      if (fs_sockopt_kernel_only(level, name, val, len))
        fs_sock_to_kernel(c, fd);
      fs_conn_put(c);
      errno = saved;
    }
  }
  return rc;
}
