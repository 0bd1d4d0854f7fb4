/* Descriptors that cross processes with SCM_RIGHTS.
 *
 * Leaving: an accelerated connection goes back to TCP first (fd-passed):
 * the other process may not run libfabsock.  Arriving: an accepted TCP
 * connection (its local port outside the ephemeral range) is adopted as
 * one forked with, so the process that serves it (a node cluster worker;
 * the primary accepted) upgrades once the sender closed its copy. */
#ifndef FS_ENGINE_ADOPT_H
#define FS_ENGINE_ADOPT_H

#include <sys/socket.h>

void fs_adopt_scm_sent(const struct msghdr *msg);
void fs_adopt_scm_received(const struct msghdr *msg);

#endif
