/* Exported io_uring set-up names.  An io_uring's submissions (recv, send,
 * accept, splice on a socket) go to the kernel without passing through any
 * call we interpose, so a connection on a fabric would starve them: its
 * bytes sit in a ring the kernel never sees.  A process that sets up a ring
 * therefore keeps every connection on TCP from then on, and brings back
 * any on a fabric first (engine/sock.h, fs_sock_kernel_only; stat shows
 * io-uring).
 *
 * The ring is made by the io_uring_setup system call.  liburing (2.2 and
 * later on x86-64) issues it inline, not through libc, so we catch it at
 * liburing's own entry points; a program that calls the system call itself
 * through syscall() is caught in preload/socket.c.  One that issues it inline
 * with no library at all is not seen (documented in libfabsock(7)). */
#include <errno.h>
#include <stddef.h>

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
