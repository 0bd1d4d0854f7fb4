/* Exported io_uring names.  An io_uring's submissions (recv, send, accept,
 * splice on a socket) go to the kernel without passing through any call we
 * interpose, so a connection on a fabric would starve them: its bytes sit
 * in a ring the kernel never sees.
 *
 * A ring liburing makes without a kernel poller (no IORING_SETUP_SQPOLL) is
 * followed: its submissions leave through liburing's own entry points,
 * interposed here, and before each the SQEs not yet taken are looked at
 * (engine/uring.h): a tracked socket one names goes back to TCP, byte-exact,
 * for good (kernel-io), as do sockets registered as its files; the rest of
 * the process keeps its fabrics.  MariaDB's InnoDB does its file I/O through
 * such a ring, which kept every one of its connections on TCP.
 *
 * Any other ring (the io_uring_setup system call made by the program:
 * libuv, Rust's libc crate; a kernel poller, which takes SQEs as they are
 * written; a build without liburing's header) keeps every connection of
 * the process on TCP from then on and brings back any on a fabric first
 * (engine/sock.h, fs_sock_kernel_only; stat shows io-uring).
 *
 * liburing (2.2 and later on x86-64) makes its system calls inline, not
 * through libc, so they are caught at liburing's exported names; a program
 * that calls the set-up system call through syscall() is caught in
 * preload/socket.c.  One that issues it inline with no library at all is not
 * seen (documented in libfabsock(7)). */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hot.h"
#include "base/reason.h"
#include "base/real.h"
#include "engine/sock.h"
#include "preload/export.h"
#include "preload/uring.h"

void fs_preload_uring_seen(void)
{
  int saved = errno;
  fs_sock_kernel_only(FS_REASON_IO_URING);
  errno = saved;
}

FS_EXPORT int io_uring_setup(unsigned entries, struct io_uring_params *p)
{
  fs_preload_uring_seen();
  return FS_REAL(io_uring_setup)(entries, p);
}

#ifndef FS_HAVE_LIBURING_H
FS_EXPORT int io_uring_queue_init(unsigned entries, struct io_uring *ring, unsigned flags)
{
  fs_preload_uring_seen();
  return FS_REAL(io_uring_queue_init)(entries, ring, flags);
}

FS_EXPORT int io_uring_queue_init_params(unsigned entries, struct io_uring *ring, struct io_uring_params *p)
{
  fs_preload_uring_seen();
  return FS_REAL(io_uring_queue_init_params)(entries, ring, p);
}

FS_EXPORT int io_uring_queue_init_mem(unsigned entries, struct io_uring *ring, struct io_uring_params *p,
                                      void *buf, size_t size)
{
  fs_preload_uring_seen();
  return FS_REAL(io_uring_queue_init_mem)(entries, ring, p, buf, size);
}
#else
#include <liburing.h>

#include "engine/uring.h"

/* The rings followed, by descriptor, for io_uring_enter(2)'s wrappers,
 * which name a ring by its fd alone.  A ring past the table is not
 * followed: the blanket rule. */
#define FS_URING_MAX 64
static pthread_mutex_t fs_uring_lock FS_HOT = PTHREAD_MUTEX_INITIALIZER;
static struct { int fd; struct io_uring *ring; } fs_urings[FS_URING_MAX];

static bool fs_uring_follow(struct io_uring *ring)
{
  bool ok = false;
  pthread_mutex_lock(&fs_uring_lock);
  for (int i = 0; i < FS_URING_MAX && !ok; i++)
    if (!fs_urings[i].ring || fs_urings[i].ring == ring) {
      fs_urings[i].fd = ring->ring_fd;
      fs_urings[i].ring = ring;
      ok = true;
    }
  pthread_mutex_unlock(&fs_uring_lock);
  return ok;
}

static struct io_uring *fs_uring_of_fd(int fd)
{
  struct io_uring *r = NULL;
  pthread_mutex_lock(&fs_uring_lock);
  for (int i = 0; i < FS_URING_MAX && !r; i++)
    if (fs_urings[i].ring && fs_urings[i].fd == fd)
      r = fs_urings[i].ring;
  pthread_mutex_unlock(&fs_uring_lock);
  return r;
}

/* A ring made: followed, or the blanket rule.  rc: liburing's. */
static int fs_uring_made(int rc, struct io_uring *ring, unsigned flags)
{
  if (rc == 0 && ((flags & IORING_SETUP_SQPOLL) || !fs_uring_follow(ring)))
    fs_preload_uring_seen();
  return rc;
}

/* The SQEs the next submission takes: from the kernel's head to what the
 * program queued (liburing publishes its queue at the submission). */
static void fs_uring_look(struct io_uring *ring)
{
  if (!ring || fs_sock_refuse_all())
    return;
  struct io_uring_sq *sq = &ring->sq;
  unsigned head = __atomic_load_n(sq->khead, __ATOMIC_ACQUIRE);
  fs_uring_sqes(sq->sqes, (ring->flags & IORING_SETUP_SQE128) ? 1 : 0, sq->ring_mask, head, sq->sqe_tail);
}

FS_EXPORT int io_uring_queue_init(unsigned entries, struct io_uring *ring, unsigned flags)
{
  return fs_uring_made(FS_REAL(io_uring_queue_init)(entries, ring, flags), ring, flags);
}

FS_EXPORT int io_uring_queue_init_params(unsigned entries, struct io_uring *ring, struct io_uring_params *p)
{
  return fs_uring_made(FS_REAL(io_uring_queue_init_params)(entries, ring, p), ring, p ? p->flags : 0);
}

FS_EXPORT int io_uring_queue_init_mem(unsigned entries, struct io_uring *ring, struct io_uring_params *p,
                                      void *buf, size_t size)
{
  /* It returns the bytes of buf it used (liburing 2.5), or -errno. */
  int rc = FS_REAL(io_uring_queue_init_mem)(entries, ring, p, buf, size);
  (void)fs_uring_made(rc < 0 ? rc : 0, ring, p ? p->flags : 0);
  return rc;
}

FS_EXPORT void io_uring_queue_exit(struct io_uring *ring)
{
  pthread_mutex_lock(&fs_uring_lock);
  for (int i = 0; i < FS_URING_MAX; i++)
    if (fs_urings[i].ring == ring)
      fs_urings[i].ring = NULL;
  pthread_mutex_unlock(&fs_uring_lock);
  FS_REAL(io_uring_queue_exit)(ring);
}

FS_EXPORT int io_uring_submit(struct io_uring *ring)
{
  fs_uring_look(ring);
  return FS_REAL(io_uring_submit)(ring);
}

FS_EXPORT int io_uring_submit_and_wait(struct io_uring *ring, unsigned wait_nr)
{
  fs_uring_look(ring);
  return FS_REAL(io_uring_submit_and_wait)(ring, wait_nr);
}

FS_EXPORT int io_uring_submit_and_wait_timeout(struct io_uring *ring, struct io_uring_cqe **cqe, unsigned wait_nr,
                                               struct __kernel_timespec *ts, sigset_t *sigmask)
{
  fs_uring_look(ring);
  return FS_REAL(io_uring_submit_and_wait_timeout)(ring, cqe, wait_nr, ts, sigmask);
}

FS_EXPORT int io_uring_submit_and_get_events(struct io_uring *ring)
{
  fs_uring_look(ring);
  return FS_REAL(io_uring_submit_and_get_events)(ring);
}

/* A wait with a timeout on a kernel without IORING_FEAT_EXT_ARG submits
 * what is queued, with its timeout SQE. */
FS_EXPORT int io_uring_wait_cqes(struct io_uring *ring, struct io_uring_cqe **cqe, unsigned wait_nr,
                                 struct __kernel_timespec *ts, sigset_t *sigmask)
{
  fs_uring_look(ring);
  return FS_REAL(io_uring_wait_cqes)(ring, cqe, wait_nr, ts, sigmask);
}

FS_EXPORT int io_uring_wait_cqe_timeout(struct io_uring *ring, struct io_uring_cqe **cqe,
                                        struct __kernel_timespec *ts)
{
  fs_uring_look(ring);
  return FS_REAL(io_uring_wait_cqe_timeout)(ring, cqe, ts);
}

FS_EXPORT int __io_uring_get_cqe(struct io_uring *ring, struct io_uring_cqe **cqe, unsigned submit,
                                 unsigned wait_nr, sigset_t *sigmask)
{
  if (submit)
    fs_uring_look(ring);
  return FS_REAL(__io_uring_get_cqe)(ring, cqe, submit, wait_nr, sigmask);
}

FS_EXPORT int io_uring_enter(unsigned fd, unsigned to_submit, unsigned min_complete, unsigned flags,
                             sigset_t *sig)
{
  if (to_submit)
    fs_uring_look(fs_uring_of_fd((int)fd));
  return FS_REAL(io_uring_enter)(fd, to_submit, min_complete, flags, sig);
}

FS_EXPORT int io_uring_enter2(unsigned fd, unsigned to_submit, unsigned min_complete, unsigned flags,
                              sigset_t *sig, size_t sz)
{
  if (to_submit)
    fs_uring_look(fs_uring_of_fd((int)fd));
  return FS_REAL(io_uring_enter2)(fd, to_submit, min_complete, flags, sig, sz);
}

FS_EXPORT int io_uring_register(unsigned fd, unsigned opcode, const void *arg, unsigned nr)
{
  fs_uring_register(opcode, arg, nr);
  return FS_REAL(io_uring_register)(fd, opcode, arg, nr);
}

FS_EXPORT int io_uring_register_files(struct io_uring *ring, const int *files, unsigned nr)
{
  fs_uring_files(files, nr);
  return FS_REAL(io_uring_register_files)(ring, files, nr);
}

FS_EXPORT int io_uring_register_files_tags(struct io_uring *ring, const int *files, const __u64 *tags, unsigned nr)
{
  fs_uring_files(files, nr);
  return FS_REAL(io_uring_register_files_tags)(ring, files, (const uint64_t *)tags, nr);
}

FS_EXPORT int io_uring_register_files_update(struct io_uring *ring, unsigned off, const int *files, unsigned nr)
{
  fs_uring_files(files, nr);
  return FS_REAL(io_uring_register_files_update)(ring, off, files, nr);
}

FS_EXPORT int io_uring_register_files_update_tag(struct io_uring *ring, unsigned off, const int *files,
                                                 const __u64 *tags, unsigned nr)
{
  fs_uring_files(files, nr);
  return FS_REAL(io_uring_register_files_update_tag)(ring, off, files, (const uint64_t *)tags, nr);
}
#endif
