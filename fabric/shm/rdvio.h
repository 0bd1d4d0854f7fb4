/* The shm rendezvous's plumbing (fabric/shm/rdv.h has the protocol).
 *
 * Names (abstract AF_UNIX, SOCK_SEQPACKET):
 *   "\0fabsock1/<4|6>/<address or *>/<port>"  served beside a TCP listener
 *   "\0fabsock1/p/<pid>"                       served by a process for every
 *                                              connection it holds, however it
 *                                              came to hold it (fork, accept) */
#ifndef FS_FABRIC_SHM_RDVIO_H
#define FS_FABRIC_SHM_RDVIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* Build the abstract name for family/address/port (wild = any address);
 * returns its length, the leading NUL included. */
int fs_rdv_name(char *buf, size_t len, const struct sockaddr *sa, bool wild);
/* Build the name process pid serves; its length as above. */
int fs_rdv_proc_name(char *buf, size_t len, int pid);

/* Send one message with nfds (<= 3) descriptors; 0 or -errno. */
int fs_rdv_sendfds(int ufd, const void *msg, size_t len, const int *fds, int nfds);
/* Receive one message and up to `max` fds (moved high, marked ours); every
 * fd beyond max is closed.  Returns the length or -errno (-EMFILE: the
 * kernel could not install them). */
ssize_t fs_rdv_recvfds(int ufd, void *msg, size_t len, int *fds, int max, int *nfds);
/* Close the received fds still open in fds[0..n) and forget them. */
void fs_rdv_closefds(int *fds, int n);

/* Look up the local socket whose local address is `local` and peer `peer`
 * (NETLINK_SOCK_DIAG exact match).  0 and *uid (and *inode, if not NULL: 0
 * when no process holds the socket any more) on success, -ENOENT if none. */
int fs_rdv_diag(const struct sockaddr *local, const struct sockaddr *peer, uint32_t *uid, uint32_t *inode);

#endif
