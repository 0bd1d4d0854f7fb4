/* rdma connection management: the rendezvous of the rdma fabric, on
 * librdmacm (RDMA_PS_TCP), run by the rendezvous agent thread (core/rdv.c).
 *
 * Beside every eligible TCP listen, an rdma_cm listener on the same address
 * and port.  A connecting end that wants rdma resolves a route from its TCP
 * local address to its TCP peer and connects with this private data
 * (wire format v1, 24 bytes, multi-byte fields in network order; it fits
 * the 56 bytes RoCE leaves a connect request):
 *
 *   u32 magic ("FSRC" request, "FSRA" accept) | u8 version 1 | u8 ring log2
 *   (16..24) | u16 TCP port (request: the client's; accept: the server's) |
 *   u64 address of the sender's region | u32 its rkey | u32 flags (0)
 *
 * A refusal carries   u32 magic "FSRJ" | u8 version 1 | u8 reason | u16 0
 * (reason: enum fs_reason).  The accepting end matches the request to the
 * one TCP connection it accepted from (client address, client port) on
 * (its address, the listening port); a request for a connection not yet
 * accepted waits up to FS_RDMACM_HOLD_MS for accept(), then is refused.
 * Each end attaches when the connection is established and then sends its
 * "attached" flag (core/rdma.h); nobody moves its tx before the peer's
 * flag arrived, so an end that gave up halfway leaves both on TCP. */
#ifndef FS_CORE_RDMACM_H
#define FS_CORE_RDMACM_H

#include <stdbool.h>
#include <stdint.h>

#include "core/conn.h"

#define FS_RDMACM_MAGIC_REQ 0x46535243u /* "FSRC" */
#define FS_RDMACM_MAGIC_ACC 0x46535241u /* "FSRA" */
#define FS_RDMACM_MAGIC_REJ 0x4653524au /* "FSRJ" */
#define FS_RDMACM_HOLD_MS 2000
#define FS_RDMACM_RING_LOG2_MIN 16
#define FS_RDMACM_RING_LOG2_MAX 24

struct fs_rdmacm_msg {
  uint32_t magic;
  uint8_t version;
  uint8_t ring_log2;
  uint16_t port;
  uint64_t addr;
  uint32_t rkey;
  uint32_t flags;
} __attribute__((packed));

struct fs_rdmacm_rej {
  uint32_t magic;
  uint8_t version;
  uint8_t reason;
  uint16_t pad;
} __attribute__((packed));

struct fs_rdma;

/* Check a received connect request (network order as received); 0 or a
 * reason (enum fs_reason).  Pure: for the fuzzer and unit tests. */
int fs_rdmacm_check_req(const void *data, size_t len, struct fs_rdmacm_msg *out);

#ifdef HAVE_RDMA
/* Agent thread: a verbs device exists and rdma_cm works (probed once). */
bool fs_rdmacm_available(void);
/* Agent thread: start an rdma upgrade of connecting end c.  0: under way
 * (c's reference is taken over); else a reason and c is untouched. */
int fs_rdmacm_connect(struct fs_conn *c);
/* Agent lock held: listen beside listening socket c / stop (the rdma listener
 * stays, orphaned, for connections accepted from it; a new listen on the
 * same address adopts it). */
void fs_rdmacm_listen(struct fs_conn *c);
void fs_rdmacm_unlisten(struct fs_conn *c);
/* Agent thread: timeouts, held requests, retired channels. */
void fs_rdmacm_tick(void);
/* ms until fs_rdmacm_tick has work (-1: none). */
int fs_rdmacm_next_timeout(void);
/* Requests are waiting for accept() (poke the agent on accept). */
bool fs_rdmacm_held(void);
/* Any thread: a channel is no longer used; the agent tears it down. */
void fs_rdmacm_retire(struct fs_rdma *r);
/* In a forked child: forget the parent's ids without touching them; rdma
 * stays off in a child of a process that had set it up. */
void fs_rdmacm_after_fork_child(void);
/* Is rdma off because of that? */
bool fs_rdmacm_fork_lost(void);
#else
static inline bool fs_rdmacm_fork_lost(void) { return false; }
static inline bool fs_rdmacm_available(void) { return false; }
static inline int fs_rdmacm_connect(struct fs_conn *c) { (void)c; return 1; }
static inline void fs_rdmacm_listen(struct fs_conn *c) { (void)c; }
static inline void fs_rdmacm_unlisten(struct fs_conn *c) { (void)c; }
static inline void fs_rdmacm_tick(void) {}
static inline int fs_rdmacm_next_timeout(void) { return -1; }
static inline bool fs_rdmacm_held(void) { return false; }
static inline void fs_rdmacm_after_fork_child(void) {}
#endif

#endif
