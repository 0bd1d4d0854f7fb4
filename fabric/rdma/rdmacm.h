/* rdma connection management: the rendezvous of the rdma fabric, on
 * librdmacm (RDMA_PS_TCP), run by the rendezvous agent thread (fabric/shm/rdv.c).
 *
 * Beside every eligible TCP listen, an rdma_cm listener on the same address
 * and port.  A connecting end that wants rdma resolves a route from its TCP
 * local address to its TCP peer and connects with this private data
 * (wire format v2, multi-byte fields in network order; 24 bytes, or 48 with
 * the authenticator; it fits the 56 bytes RoCE leaves a connect request):
 *
 *   u32 magic ("FSRC" request, "FSRA" accept) | u8 version 2 | u8 ring log2
 *   (16..24) | u16 TCP port (request: the client's; accept: the server's) |
 *   u64 address of the sender's region | u32 the rkey of its rx ring's first
 *   page (fabric/rdma/mr.h), or of its whole region (flag WHOLE) | u32 flags
 *   (bit 1, FS_RDMACM_F_WHOLE: the key covers the sender's whole region, rx
 *   ring then tx ring, registered whole from the start: the peer needs no
 *   key immediate from it, and where both ends say so neither producer keeps
 *   a window)
 *   [flags bit 0 (FS_RDMACM_F_MAC), no other bit defined:
 *    u64 sender's wall clock, ms since 1970 | 16 bytes of MAC]
 *
 * The MAC (policy rdma_key=FILE: a pre-shared key) is HMAC-SHA-256 under the
 * key, truncated to 16 bytes, over
 *   "fabsock-rdmacm-v1" (17 bytes) | the message's first 32 bytes (all of the
 *   above but the MAC) | client IP (16 bytes, IPv4 as ::ffff:a.b.c.d) |
 *   client TCP port (2) | server IP (16) | server TCP port (2) |
 *   [accept only: the request's 16-byte MAC]
 * so a message is bound to the one TCP connection both ends see, an accept
 * to the request it answers, and a request to a time: the accepting end
 * takes it only within FS_RDMACM_AUTH_WINDOW_MS of its own clock and only
 * once (it remembers the last FS_RDMACM_SEEN MACs it accepted; beyond that
 * many upgrades in the window the oldest are forgotten; a replay of one
 * then still needs a TCP connection with the same 4-tuple accepted and not
 * yet upgraded, i.e. the client port reused within the window).  An end
 * with a key refuses a peer message without a valid MAC (reason "auth");
 * an end without one ignores a MAC.  Addresses are the ones the TCP connection
 * has at both ends, which an rdma path never translates.
 *
 * A resume request ("FSRR", fabric/rdma/heal.c) has the same layout: the
 * client's TCP port, and the address and rkey of the *server's* region as
 * its accept said (who knows them holds this channel), sealed as a request
 * when there is a key.  It is sent by the connecting end of a channel whose
 * queue pair failed, from the same address to the same listener; the
 * accepting end moves that channel onto the new queue pair and accepts with
 * an "FSRA" naming the same region, or refuses (no such channel: the peer
 * is gone).
 *
 * A refusal carries   u32 magic "FSRJ" | u8 version 2 | u8 reason | u16 0
 * (reason: enum fs_reason).  The accepting end matches the request to the
 * one TCP connection it accepted from (client address, client port) on
 * (its address, the listening port); a request for a connection not yet
 * accepted waits up to FS_RDMACM_HOLD_MS for accept(), then is refused.
 * Each end attaches when the connection is established and then sends its
 * "attached" flag (fabric/rdma/rdma.h); nobody moves its tx before the peer's
 * flag arrived, so an end that gave up halfway leaves both on TCP. */
#ifndef FS_FABRIC_RDMA_RDMACM_H
#define FS_FABRIC_RDMA_RDMACM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fabric/fabric.h"

/* 2: the channel's immediates carry ring keys (fabric/rdma/rdma.h, wire
 * format v2); an end of version 1 is refused (reason "version": TCP). */
#define FS_RDMACM_VERSION 2
#define FS_RDMACM_MAGIC_REQ 0x46535243u /* "FSRC" */
#define FS_RDMACM_MAGIC_ACC 0x46535241u /* "FSRA" */
#define FS_RDMACM_MAGIC_REJ 0x4653524au /* "FSRJ" */
#define FS_RDMACM_MAGIC_RES 0x46535252u /* "FSRR" */
#define FS_RDMACM_HOLD_MS 2000
#define FS_RDMACM_RING_LOG2_MIN 16
#define FS_RDMACM_RING_LOG2_MAX 24
#define FS_RDMACM_F_MAC 1u
#define FS_RDMACM_F_WHOLE 2u
#define FS_RDMACM_MAC_LEN 16
#define FS_RDMACM_AUTH_WINDOW_MS 30000
#define FS_RDMACM_SEEN 256  /* MACs remembered against replay */

struct fs_rdmacm_msg {
  uint32_t magic;
  uint8_t version;
  uint8_t ring_log2;
  uint16_t port;
  uint64_t addr;
  uint32_t rkey;
  uint32_t flags;
} __attribute__((packed));

/* What follows a message whose flags have FS_RDMACM_F_MAC. */
struct fs_rdmacm_auth {
  uint64_t time_ms;
  uint8_t mac[FS_RDMACM_MAC_LEN];
} __attribute__((packed));

struct fs_rdmacm_wire {
  struct fs_rdmacm_msg m;
  struct fs_rdmacm_auth a;
} __attribute__((packed));

/* Accepted requests' MACs, newest times last in no order (a replay cache). */
struct fs_rdmacm_seen {
  uint8_t mac[FS_RDMACM_SEEN][FS_RDMACM_MAC_LEN];
  uint64_t time_ms[FS_RDMACM_SEEN];
};

struct fs_rdmacm_rej {
  uint32_t magic;
  uint8_t version;
  uint8_t reason;
  uint16_t pad;
} __attribute__((packed));

struct fs_rdma;

/* Check a received connect or resume request (network order as received); 0 or a
 * reason (enum fs_reason).  *out in host order; *has_mac says whether the
 * authenticator follows (then it is in the raw data, for fs_rdmacm_verify).
 * Pure: for the fuzzer and unit tests. */
int fs_rdmacm_check_req(const void *data, size_t len, struct fs_rdmacm_msg *out, bool *has_mac);

struct sockaddr;
/* Fill w's authenticator (w->m in network order, flags with
 * FS_RDMACM_F_MAC): time now_ms, MAC over the TCP connection (client,
 * server: its two ends) and, for an accept, bind = the request's MAC. */
void fs_rdmacm_seal(struct fs_rdmacm_wire *w, const uint8_t key[32], const struct sockaddr *client,
                    const struct sockaddr *server, const uint8_t *bind, uint64_t now_ms);

/* 0 if the len bytes at data are a message with a MAC made with key for
 * that connection (and bind), else FS_REASON_AUTH.  A request (bind NULL)
 * must also be within FS_RDMACM_AUTH_WINDOW_MS of now_ms, and not in seen
 * (NULL: no replay check); a request that passes is added to seen. */
int fs_rdmacm_verify(const void *data, size_t len, const uint8_t key[32], const struct sockaddr *client,
                     const struct sockaddr *server, const uint8_t *bind, uint64_t now_ms,
                     struct fs_rdmacm_seen *seen);

#ifdef HAVE_RDMA
/* Agent thread: a verbs device exists and rdma_cm works (probed once). */
bool fs_rdmacm_available(void);
/* Agent thread: start an rdma upgrade of connecting end c.  0: under way
 * (c's reference is taken over); else a reason and c is untouched. */
int fs_rdmacm_connect(struct fs_link *c);
/* Agent lock held: listen beside listening socket c / stop (the rdma listener
 * stays, orphaned, for connections accepted from it; a new listen on the
 * same address adopts it). */
int fs_rdmacm_listen(struct fs_link *c);
void fs_rdmacm_unlisten(struct fs_link *c);
/* Agent thread: timeouts, held requests, retired channels. */
void fs_rdmacm_tick(void);
/* ms until fs_rdmacm_tick has work (-1: none). */
int fs_rdmacm_next_timeout(void);
/* Requests are waiting for accept() (poke the agent on accept). */
bool fs_rdmacm_held(void);
/* Any thread: a channel is no longer used; the agent tears it down. */
void fs_rdmacm_retire(struct fs_rdma *r);
/* Any thread: a channel asked for a resume (fs_rdma_resume_ask). */
void fs_rdmacm_resume_kick(void);
/* Agent lock held, process exit: run the retired channels' tear-down until
 * every one's last writes landed (or its peer is gone), or deadline_ns
 * (fs_clock_ns) passes.  True if none is left waiting. */
bool fs_rdmacm_exit_drain(uint64_t deadline_ns);
/* rdma has been set up in this process (any thread). */
bool fs_rdmacm_up(void);
/* In a forked child: forget the parent's ids without touching them; rdma
 * stays off in a child of a process that had set it up. */
void fs_rdmacm_after_fork_child(void);
/* Is rdma off because of that? */
bool fs_rdmacm_fork_lost(void);
/* The rdma fabric (fabric/fabric.h). */
extern const struct fs_fabric_ops fs_rdma_fabric;
#endif

#endif
