/* Exported readiness names: poll, ppoll, select, pselect, epoll_*.
 * A call naming no tracked fd goes straight to libc after one load per fd,
 * and one more: a wait of any kind ends this thread's batch of held wakes
 * (engine/batch.h). */
#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/select.h>

#include "engine/agent.h"
#include "engine/batch.h"
#include "engine/ready.h"
#include "preload/boundary.h"
#include "preload/export.h"
#include "engine/fdtab.h"
#include "base/real.h"

/* glibc 2.36 declares poll's and ppoll's fds write-only (access attribute),
 * so gcc 12 takes their entries, which these read, for uninitialized. */
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

/* A wait with this timeout may block (engine/agent.h, fs_agent_wait_point). */
static bool fs_poll_may_block(const struct timespec *ts)
{
  return !ts || ts->tv_sec != 0 || ts->tv_nsec != 0;
}

static bool fs_poll_tracked(const struct pollfd *fds, nfds_t n)
{
  if (!fs_fdtab_any())
    return false;
  for (nfds_t i = 0; i < n; i++)
    if (fs_fdtab_tracked(fds[i].fd))
      return true;
  return false;
}

FS_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
  fs_agent_wait_point(timeout != 0);
  if (!fs_poll_tracked(fds, n)) {
    fs_batch_flush();
    return FS_REAL(poll)(fds, n, timeout);
  }
  struct timespec ts = { timeout / 1000, (long)(timeout % 1000) * 1000000L };
  return (int)fs_boundary_ret(fs_ready_poll(fds, n, timeout < 0 ? NULL : &ts, NULL));
}

FS_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask)
{
  fs_agent_wait_point(fs_poll_may_block(ts));
  if (!fs_poll_tracked(fds, n)) {
    fs_batch_flush();
    return FS_REAL(ppoll)(fds, n, ts, mask);
  }
  return (int)fs_boundary_ret(fs_ready_poll(fds, n, ts, mask));
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

extern void __chk_fail(void) __attribute__((noreturn));
extern int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);
extern int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask, size_t fdslen);

FS_EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
  if (fdslen / sizeof *fds < n)
    __chk_fail();
  return poll(fds, n, timeout);
}

FS_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask, size_t fdslen)
{
  if (fdslen / sizeof *fds < n)
    __chk_fail();
  return ppoll(fds, n, ts, mask);
}

FS_EXPORT int select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
  fs_agent_wait_point(!tv || tv->tv_sec != 0 || tv->tv_usec != 0);
  if (!fs_ready_select_tracked(nfds, r, w, e)) {
    fs_batch_flush();
    return FS_REAL(select)(nfds, r, w, e, tv);
  }
  if (tv && (tv->tv_sec < 0 || tv->tv_usec < 0 || tv->tv_usec >= 1000000)) {
    errno = EINVAL;
    return -1;
  }
  struct timespec ts, t0, t1;
  if (tv) {
    ts.tv_sec = tv->tv_sec;
    ts.tv_nsec = tv->tv_usec * 1000L;
    clock_gettime(CLOCK_MONOTONIC, &t0);
  }
  int rc = fs_ready_select(nfds, r, w, e, tv ? &ts : NULL, NULL);
  if (tv) { /* Linux select reports the time left */
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long long used = (t1.tv_sec - t0.tv_sec) * 1000000LL + (t1.tv_nsec - t0.tv_nsec) / 1000;
    long long left = tv->tv_sec * 1000000LL + tv->tv_usec - used;
    if (left < 0)
      left = 0;
    tv->tv_sec = (time_t)(left / 1000000);
    tv->tv_usec = (suseconds_t)(left % 1000000);
  }
  return (int)fs_boundary_ret(rc);
}

FS_EXPORT int pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts, const sigset_t *mask)
{
  fs_agent_wait_point(fs_poll_may_block(ts));
  if (!fs_ready_select_tracked(nfds, r, w, e)) {
    fs_batch_flush();
    return FS_REAL(pselect)(nfds, r, w, e, ts, mask);
  }
  return (int)fs_boundary_ret(fs_ready_select(nfds, r, w, e, ts, mask));
}

FS_EXPORT int epoll_create(int size)
{
  return FS_REAL(epoll_create)(size);
}

FS_EXPORT int epoll_create1(int flags)
{
  return FS_REAL(epoll_create1)(flags);
}

FS_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
  if (!fs_fdtab_tracked(fd) && !fs_ready_epoll_tracked(epfd))
    return FS_REAL(epoll_ctl)(epfd, op, fd, ev);
  if (op != EPOLL_CTL_DEL && ev == NULL) {
    errno = EFAULT;
    return -1;
  }
  return (int)fs_boundary_ret(fs_ready_epoll_ctl(epfd, op, fd, ev));
}

static int fs_epoll_common(int epfd, struct epoll_event *ev, int max, const struct timespec *ts, const sigset_t *mask)
{
  return (int)fs_boundary_ret(fs_ready_epoll_wait(epfd, ev, max, ts, mask));
}

FS_EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
  fs_agent_wait_point(timeout != 0);
  if (!fs_ready_epoll_tracked(epfd)) {
    fs_batch_flush();
    return FS_REAL(epoll_wait)(epfd, ev, max, timeout);
  }
  struct timespec ts = { timeout / 1000, (long)(timeout % 1000) * 1000000L };
  return fs_epoll_common(epfd, ev, max, timeout < 0 ? NULL : &ts, NULL);
}

FS_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask)
{
  fs_agent_wait_point(timeout != 0);
  if (!fs_ready_epoll_tracked(epfd)) {
    fs_batch_flush();
    return FS_REAL(epoll_pwait)(epfd, ev, max, timeout, mask);
  }
  struct timespec ts = { timeout / 1000, (long)(timeout % 1000) * 1000000L };
  return fs_epoll_common(epfd, ev, max, timeout < 0 ? NULL : &ts, mask);
}

FS_EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *ts, const sigset_t *mask)
{
  fs_agent_wait_point(fs_poll_may_block(ts));
  if (!fs_ready_epoll_tracked(epfd)) {
    fs_batch_flush();
    return FS_REAL(epoll_pwait2)(epfd, ev, max, ts, mask);
  }
  return fs_epoll_common(epfd, ev, max, ts, mask);
}
