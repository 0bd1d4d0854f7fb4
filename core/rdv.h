/* Rendezvous: tie a fabric channel to exactly one TCP connection.
 *
 * Protocol v1 over an abstract AF_UNIX SOCK_SEQPACKET socket, named after
 * the listening TCP socket: "\0fabsock1/<4|6>/<address or *>/<port>".
 *
 *   request  (connecting end -> listener), 16 bytes, host order:
 *     u32 magic "FSRQ" | u16 version 1 | u16 fabric (2 = shm) | u32 ring_size | u32 flags (0)
 *     SCM_RIGHTS: [a dup of the client's TCP socket, the sealed memfd, the client's eventfd]
 *   reply    (listener -> connecting end), 16 bytes:
 *     u32 magic "FSRP" | u16 version 1 | u16 pad | u32 status (0 accept, else enum fs_reason) | u32 pad
 *     SCM_RIGHTS on accept: [the server's eventfd]
 *   ack      (connecting end -> listener), 8 bytes, only after an accept:
 *     u32 magic "FSAK" | u16 version 1 | u16 pad
 *
 * Three messages, because neither end may start using a channel the other
 * might abandon: the client attaches only once it has sent the ack; the
 * server attaches only once it has read the ack, and until then waits for
 * the ack or EOF (a client that timed out closes without acking).
 * Identity: the listener accepts only if the passed socket's local/peer
 * addresses are the reverse of a connection this process accepted (or will
 * accept: a request may be held until accept(), never answered for a socket
 * another process could accept), and the unix peer's uid is allowed.  Only a
 * holder of the client end can pass it.  The client, before passing
 * anything, checks with NETLINK_SOCK_DIAG that the server end of its TCP
 * connection is a local socket and that its uid is the unix peer's uid, so a
 * squatter of the abstract name (another uid) gets nothing.
 *
 * All of it runs on one agent thread per process; the application never
 * waits for a rendezvous. */
#ifndef FS_CORE_RDV_H
#define FS_CORE_RDV_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/conn.h"

#define FS_RDV_MAGIC_REQ 0x51525346u /* "FSRQ" */
#define FS_RDV_MAGIC_REP 0x50525346u /* "FSRP" */
#define FS_RDV_MAGIC_ACK 0x4b415346u /* "FSAK" */
#define FS_RDV_VERSION 1

struct fs_rdv_req {
  uint32_t magic;
  uint16_t version;
  uint16_t fabric;
  uint32_t ring_size;
  uint32_t flags;
};

struct fs_rdv_rep {
  uint32_t magic;
  uint16_t version;
  uint16_t pad;
  uint32_t status;
  uint32_t pad2;
};

struct fs_rdv_ack {
  uint32_t magic;
  uint16_t version;
  uint16_t pad;
};

/* Listening socket c (fd) becomes a rendezvous point. */
void fs_rdv_listen(struct fs_conn *c, int fd);

/* Queue an upgrade attempt for a connected (connecting-end) socket. */
void fs_rdv_upgrade(struct fs_conn *c);

/* Run fs_sockio_resend_job(c) on the agent thread. */
void fs_rdv_resend(struct fs_conn *c);

/* Listening socket c: listen on the rdma fabric beside it. */
void fs_rdv_listen_rdma(struct fs_conn *c);

/* Hold the agent between its batches (the application closes every fd:
 * the agent must not open one meanwhile, e.g. for a rendezvous of a
 * connection being closed).  Not from the agent thread. */
void fs_rdv_pause(void);
void fs_rdv_resume(void);

/* Wake the agent (work was queued for it). */
void fs_rdv_kick(void);

/* Agent thread, agent lock held: run fn on the agent whenever fd is
 * readable (level-triggered), for the agent's life.  0 or -errno. */
int fs_rdv_watch_fd(int fd, void (*fn)(void));

/* A connection was accepted: held requests may now be answered. */
void fs_rdv_accepted(void);

/* A listening socket is closed. */
void fs_rdv_unlisten(struct fs_conn *c);

/* Process exit (not the agent thread): with the agent lock, let closed
 * rdma connections land their last writes until deadline_ns (fs_clock_ns).
 * True if none is left waiting. */
bool fs_rdv_exit_drain(uint64_t deadline_ns);

/* Fork: the agent lock is held across fork so no rendezvous is half done. */
void fs_rdv_before_fork(void);
void fs_rdv_after_fork(bool child);

/* Build the abstract name for family/address/port (wild = any address). */
int fs_rdv_name(char *buf, size_t len, const struct sockaddr *sa, bool wild);

/* Look up the local socket whose local address is `local` and peer `peer`
 * (NETLINK_SOCK_DIAG exact match).  0 and *uid on success, -ENOENT if none. */
int fs_rdv_diag(const struct sockaddr *local, const struct sockaddr *peer, uint32_t *uid);

/* Check a received request; 0 or a reason (enum fs_reason). Pure. */
int fs_rdv_check_req(const struct fs_rdv_req *r, size_t len, int nfds);

#endif
