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

struct fs_rdv_bell; /* rdv.h */

/* Build the abstract name for family/address/port (wild = any address);
 * returns its length, the leading NUL included. */
int fs_rdv_name(char *buf, size_t len, const struct sockaddr *sa, bool wild);
/* Build the name process pid serves; its length as above. */
int fs_rdv_proc_name(char *buf, size_t len, int pid);

/* A unix socket of the agent's (a dial, a name served again, a holder
 * query), high (base/fdreg.h); -1 and errno if none. */
int fs_rdv_unix_socket(void);
/* Bind unix socket ufd to the abstract name (n bytes) and listen: 0, or -1
 * and errno. */
int fs_rdv_bind_name(int ufd, const char *name, int n);

/* The server's reply (rdv.h): a refusal (status: the reason; efd -1),
 * or the accept: our wake eventfd, or our doorbell and our slot. */
void fs_rdv_reply(int ufd, uint32_t status, int efd);
void fs_rdv_accept(int ufd, int efd, const struct fs_rdv_bell *b);
/* A refusal (status) on a rendezvous connection not read yet, which is
 * then closed (ufd too). */
void fs_rdv_refuse(int ufd, uint32_t status);

/* The descriptors the application holds and will take, about: the lowest
 * free number (it takes the lowest), plus the connections in the accept
 * queue of TCP listener tcp_fd (-1: none).  A large number when none is
 * free.  any_fd: one of ours to dup for the probe (one descriptor for two
 * system calls). */
int fs_rdv_app_fds(int any_fd, int tcp_fd);

/* Send one message with nfds (<= 3) descriptors; 0 or -errno. */
int fs_rdv_sendfds(int ufd, const void *msg, size_t len, const int *fds, int nfds);
/* Receive one message and up to `max` fds (moved high, marked ours); every
 * fd beyond max is closed.  Returns the length or -errno (-EMFILE: the
 * kernel could not install them). */
ssize_t fs_rdv_recvfds(int ufd, void *msg, size_t len, int *fds, int max, int *nfds);
/* Close the received fds still open in fds[0..n) and forget them. */
void fs_rdv_closefds(int *fds, int n);

/* Whom a connecting end asks (its agent).  Internal answers besides 0 and
 * the FS_REASON_* codes: look again later (the peer's socket is held by
 * more than one process); nobody lists the peer's socket, but a process
 * of ours listens on its port (it accepted it a moment ago and lists it
 * soon, or it is not ours at all), or the listener's process said the
 * socket is not its own (a prefork worker lists it at the threshold); the
 * listener's name is served by another user than the peer socket's. */
#define FS_RDV_AGAIN (-1)
#define FS_RDV_UNLISTED (-2)
#define FS_RDV_OTHER_UID (-3)

/* Does a process of ours (any user) listen on TCP port `port`? */
bool fs_rdv_listened(uint16_t port);
/* Dial the names served beside the peer's listener on ufd (0, NO_PEER,
 * NOT_OWNER, RESOURCES or FS_RDV_OTHER_UID). */
int fs_rdv_dial_names(const struct sockaddr *peer, uint32_t diag_uid, int ufd);
/* Dial the process holding the peer's socket (inode), found in the stat
 * tables, or where they are out of sight (a chroot) named by the process
 * serving the peer's listener name (0, a FS_REASON_*, FS_RDV_AGAIN or
 * FS_RDV_UNLISTED).  told_shared: the listener's process said it does not
 * hold it. */
int fs_rdv_dial_holder(const struct sockaddr *peer, uint32_t diag_uid, uint32_t inode, int ufd, bool told_shared,
                       uint16_t port);

#endif
