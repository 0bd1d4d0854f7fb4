/* Descriptors that cross processes with SCM_RIGHTS.
 *
 * Leaving: an accelerated connection goes back to TCP first (fd-passed):
 * the other process may not run libfabsock; a listener is shared from then
 * on.  Arriving: an accepted TCP connection (its local port outside the
 * ephemeral range) is adopted as one forked with, so the process that
 * serves it (a node cluster worker; the primary accepted) upgrades once the
 * sender closed its copy; a listener is adopted as one shared since fork
 * (node cluster with SCHED_NONE: each worker accepts).
 * Inherited across exec on fds 0-2: the same (fs_adopt_stdio). */
#ifndef FS_ENGINE_ADOPT_H
#define FS_ENGINE_ADOPT_H

#include <stdbool.h>
#include <sys/socket.h>

void fs_adopt_scm_sent(const struct msghdr *msg);

/* Track the listening TCP socket fd (domain dom) that this image did not
 * listen() on, as if it had.  shared: it came from another process that
 * may still accept on it (SCM_RIGHTS; node cluster with SCHED_NONE: the
 * primary listens, each worker accepts), so it is served as one shared since
 * fork: its name stays with the process that listened, which tells a peer
 * not-owner, and the peer finds the process that accepted by its own name.
 * True if it is tracked now. */
bool fs_adopt_listener(int fd, int dom, bool shared);
void fs_adopt_scm_received(const struct msghdr *msg);

/* An accepted TCP connection on fds 0-2 at start, inherited across exec
 * (inetd, systemd Accept=yes, sshd's re-exec), is adopted the same way
 * (0, 1 and 2 naming one socket share one connection).  Three fstat calls
 * when none is a socket. */
void fs_adopt_stdio(void);

#endif
