/* Rendezvous: tie a fabric channel to exactly one TCP connection.
 *
 * Protocol v1 over an abstract AF_UNIX SOCK_SEQPACKET socket, named after
 * the listening TCP socket: "\0fabsock1/<4|6>/<address or *>/<port>".
 *
 *   request  (connecting end -> listener), 16 bytes, host order:
 *     u32 magic "FSRQ" | u16 version 1 | u16 fabric (2 = shm) | u32 ring_size | u32 flags (0)
 *     SCM_RIGHTS: [a dup of the client's TCP socket, the sealed memfd, the client's eventfd]
 *   or, where the client's connection is in an epoll set with a doorbell
 *   (base/bell.h, engine/door.h), 24 bytes:
 *     ... | u32 flags (1: bell) | u32 slot (< 65536) | u32 pad
 *     SCM_RIGHTS: [TCP dup, memfd, the bell's eventfd, the bell's sealed memfd]
 *   reply    (listener -> connecting end), 16 bytes:
 *     u32 magic "FSRP" | u16 version 1 | u16 flags (0, or 1: bell) | u32 status (0 accept, else
 *     enum fs_reason) | u32 slot (bell) or 0
 *     SCM_RIGHTS on accept: [the server's eventfd], or [the bell's eventfd, the bell's memfd]
 *   Each end chooses for itself: either may ring a bell and be woken by
 *   an eventfd, or the other way round.
 *   ack      (connecting end -> listener), 8 bytes, only after an accept:
 *     u32 magic "FSAK" | u16 version 1 | u16 pad
 *   holder query (connecting end -> listener), 16 bytes, no fds, from a client
 *   that cannot read the stat tables (chrooted: HAProxy's worker) and needs the
 *   holder of the peer's socket (fabric/shm/rdvio.h, fs_rdv_dial_holder):
 *     u32 magic "FSWH" | u16 version 1 | u16 pad | u32 the socket's inode | u32 pad
 *   answered with a reply, no fds: status not-owner and slot = the pid of the
 *   one process whose table lists that socket; pending when none or several do
 *   (ask again); no-peer for a query it cannot read.  The pid is only a hint:
 *   the client proves it as any holder (its name's SO_PEERCRED pid, the
 *   socket's uid), and the tables are readable by everyone anyway.
 *
 * The server attaches before it replies (an attach that lost a race with
 * close or fork since the check answers not-owner: the client looks for
 * the holder); the client attaches once it has sent the ack, which only
 * ends the exchange.  Neither end moves its tx onto the ring before the
 * peer's `attached` flag is set, so an end that gave the channel up
 * unattached (a client that timed out closes without acking) leaves both
 * on TCP.  Server first, because servers fork right after accepting (sshd's
 * monitor, between its pre-auth child's exit and the session's fork): an
 * attached end forks with its channel; one that had waited for the ack
 * abandoned it and left the client on TCP for good.
 * Identity: the listener accepts only if the passed socket's local/peer
 * addresses are the reverse of a connection this process accepted (or will
 * accept: a request may be held until accept(), and then until this
 * process first uses the connection or hands it on (host->hold); never
 * answered for a socket another process could accept), and the unix peer's
 * uid is allowed.  Only a holder of the client end can pass it.  The
 * client, before passing anything, checks with NETLINK_SOCK_DIAG that the
 * server end of its TCP connection is a local socket and that its uid is
 * the unix peer's uid, so a squatter of the abstract name (another uid)
 * gets nothing.
 *
 * All of it runs on the engine's agent thread (engine/agent.h); the
 * application never waits for a rendezvous. */
#ifndef FS_FABRIC_SHM_RDV_H
#define FS_FABRIC_SHM_RDV_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "fabric/fabric.h"
#include "fabric/shm/rdvio.h"

#define FS_RDV_MAGIC_REQ 0x51525346u /* "FSRQ" */
#define FS_RDV_MAGIC_REP 0x50525346u /* "FSRP" */
#define FS_RDV_MAGIC_ACK 0x4b415346u /* "FSAK" */
#define FS_RDV_VERSION 1

struct fs_rdv_req {
  uint32_t magic;
  uint16_t version;
  uint16_t fabric;
  uint32_t ring_size;
  uint32_t flags;            /* 0, or FS_RDV_F_BELL */
  uint32_t slot;             /* FS_RDV_F_BELL only (FS_RDV_REQ_BELL_LEN) */
  uint32_t pad;
};
#define FS_RDV_REQ_LEN 16u
#define FS_RDV_REQ_BELL_LEN 24u
#define FS_RDV_F_BELL 1u

/* A doorbell offered to the peer (host->bell): lent fds, -1 if none. */
struct fs_rdv_bell {
  int efd, memfd;
  uint32_t slot;
};

struct fs_rdv_rep {
  uint32_t magic;
  uint16_t version;
  uint16_t pad;              /* 0, or FS_RDV_F_BELL */
  uint32_t status;
  uint32_t pad2;             /* FS_RDV_F_BELL: the slot */
};

#define FS_RDV_MAGIC_WHO 0x48575346u /* "FSWH" */
struct fs_rdv_who {
  uint32_t magic;
  uint16_t version;
  uint16_t pad;
  uint32_t inode;
  uint32_t pad2;
};

struct fs_rdv_ack {
  uint32_t magic;
  uint16_t version;
  uint16_t pad;
};

/* The shm fabric (fabric/fabric.h): its rendezvous runs on the engine's agent. */
extern const struct fs_fabric_ops fs_shm_fabric;

/* A received message that is a holder query (n bytes, nfds fds): answered
 * on ufd, true; else false. */
bool fs_rdv_who_answered(int ufd, const void *msg, ssize_t n, int nfds);

/* Check a received request; 0 or a reason (enum fs_reason). Pure. */
int fs_rdv_check_req(const struct fs_rdv_req *r, size_t len, int nfds);

#endif
