/* C stdio over a connection.
 *
 * stdio reads and writes its stream's fd inside libc, past the read() and
 * write() we interpose: bytes a peer put in a ring are never read by fgets,
 * and what printf writes bypasses the ring.  fdopen(3) on a socket sends it
 * back to TCP for good (preload/socket.c); the streams libc opened itself,
 * stdin, stdout and stderr, sit on an inherited connection's fds in an
 * inetd-style program (inetd, systemd Accept=yes, socat EXEC nofork), and
 * are looked at here before an upgrade. */
#ifndef FS_ENGINE_STDIO_H
#define FS_ENGINE_STDIO_H

#include <stdbool.h>

#include "engine/conn.h"

bool fs_stdio_used_slow(const struct fs_conn *c);

/* Does a used stdin, stdout or stderr (one with a buffer: it has read or
 * written) sit on an fd of c?  Then c must stay on TCP (kernel-io).  The
 * standard streams are on fds 0-2 (a stream fdopen made elsewhere already
 * sent its connection to the kernel): a connection whose one fd is above
 * them is not looked at further (the three streams were a tenth of the
 * instructions the library adds to wrk's connection per request). */
static inline bool fs_stdio_used(const struct fs_conn *c)
{
  return (c->fd <= 2 || __atomic_load_n(&c->nfds, __ATOMIC_RELAXED) > 1) && fs_stdio_used_slow(c);
}

#endif
