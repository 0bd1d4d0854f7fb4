/* The rdma fabric's channel: the two rings of fabric/ring.h over one RC queue
 * pair (librdmacm/libibverbs).  Connection management is fabric/rdma/rdmacm.h.
 *
 * Memory, per end: one registered region of 2 * size bytes
 *   [0, size)        rx ring data: the peer RDMA-WRITEs its records here
 *   [size, 2*size)   tx ring data: our records are built here and written
 *                    to the same offset of the peer's rx data; the peer
 *                    writes one record header here when it downgrades
 *                    (its partial-read state, so our re-send starts exactly
 *                    where its reading stopped; see fs_sock_downgrade)
 * Both ends use the same ring size.  The ring control blocks are local
 * memory the peer never writes: positions arrive only as immediate data,
 * and a WRITE WITH IMMEDIATE completes only after every earlier WRITE of
 * the queue pair is placed, so a position is never believed before the
 * bytes below it are there.
 *
 * Immediate data, wire format v1 (FS_RDMA_VERSION; 32 bits, network order):
 *   bits 31-30 kind, bits 29-0 value
 *   0 DATA    the producer's tail mod 2^30: its records end there now
 *   1 CREDIT  the consumer's head mod 2^30: it freed the room below it
 *   2 FLAGS   bit 0 closed, bit 1 rx_revert, bit 2 attached: the sender's
 *             endpoint flags (struct fs_chan_ep); flags are only ever set
 *   3 RESUME  the sender's rx tail mod 2^30, the first thing each end posts
 *             on a new queue pair after a resume (fabric/rdma/heal.c): the
 *             peer writes its records again from there
 * A 30-bit value is the low bits of a position less than 2^30 ahead of the
 * last one (rings are at most 16 MiB), which makes it exact.  A position
 * outside what the ring allows is a hostile or broken peer: the channel is
 * dead (peer closed) and the TCP socket tells the application the rest.
 *
 * Threads: publish/credit/wake post under one lock; completions are polled
 * by whichever thread looks (try-lock, nobody waits for it); waiters sleep
 * on the completion channel (fs_chan.wait_fd) armed for the receive queue,
 * where data, credits and flags all arrive. */
#ifndef FS_FABRIC_RDMA_RDMA_H
#define FS_FABRIC_RDMA_RDMA_H

#include <stdbool.h>
#include <stdint.h>

#include "fabric/chan.h"

#define FS_RDMA_VERSION 1
#define FS_RDMA_IMM_DATA 0u
#define FS_RDMA_IMM_CREDIT 1u
#define FS_RDMA_IMM_FLAGS 2u
#define FS_RDMA_IMM_RESUME 3u
#define FS_RDMA_IMM_MASK 0x3fffffffu
#define FS_RDMA_FLAG_CLOSED 1u
#define FS_RDMA_FLAG_RX_REVERT 2u
#define FS_RDMA_FLAG_ATTACHED 4u

struct rdma_cm_id;
struct fs_rdma;

#ifndef HAVE_RDMA
static inline struct fs_rdma *fs_rdma_of(struct fs_chan *ch) { (void)ch; return NULL; }
static inline void fs_rdma_forget(struct fs_chan *ch) { (void)ch; }
#else
/* The channel inside an rdma one (and back). */
struct fs_chan *fs_rdma_chan(struct fs_rdma *r);
struct fs_rdma *fs_rdma_of(struct fs_chan *ch); /* NULL unless ch is rdma */

/* Queue pair, completion queues and registered rings on id's device, and
 * receives posted; the id must have its route resolved (or be a
 * connection request).  side: 0 connecting end, 1 accepting end.  my_efd is
 * the connection's wake eventfd (not owned).  0 or -errno. */
int fs_rdma_new(struct rdma_cm_id *id, uint32_t size, int side, int my_efd, struct fs_rdma **out);

/* What the peer's handshake said: its region's address and key. */
void fs_rdma_set_peer(struct fs_rdma *r, uint64_t addr, uint32_t rkey);

/* Our region's address and key, for our handshake message. */
void fs_rdma_local(const struct fs_rdma *r, uint64_t *addr, uint32_t *rkey);

/* Mark the peer gone (disconnect, device removal): waiters wake. */
void fs_rdma_peer_gone(struct fs_rdma *r);

/* After fork, in the child: this process does not own the queue pair; it
 * must never post, poll or destroy (the parent still uses them). */
void fs_rdma_forget(struct fs_chan *ch);

/* Tear-down, first half (agent thread, or at process exit; never blocks):
 * true while writes we posted may still be on their way to a peer that has
 * not closed (the peer's ring keeps our last bytes and the EOF record only
 * if they land before the queue pair goes).  Call again until false, or
 * until the caller's deadline; a disconnect from the peer ends it
 * (fs_rdma_peer_gone). */
bool fs_rdma_lingering(struct fs_rdma *r);

/* Tear down (agent thread only): disconnects and frees everything, the id
 * included, at once; fs_rdma_lingering first for a channel that carried data. */
void fs_rdma_destroy(struct fs_rdma *r);

/* The id this channel runs on (its cm context). */
struct rdma_cm_id *fs_rdma_id(struct fs_rdma *r);

/* ---- resume onto a new queue pair (fabric/rdma/heal.c) ---- */
/* 0: the connecting end, 1: the accepting end. */
int fs_rdma_side(const struct fs_rdma *r);
/* The peer's region as its handshake said (a resume request names it). */
void fs_rdma_remote(const struct fs_rdma *r, uint64_t *addr, uint32_t *rkey);
/* Any thread: the queue pair failed or is wedged, or the peer's went
 * without its end closed.  Nothing is posted from now until the resume;
 * the agent is kicked.  False (nothing asked) if the channel is dead or the
 * peer closed its end. */
bool fs_rdma_resume_ask(struct fs_rdma *r, const char *why);
/* The resume state (FS_RDMA_RS_* of rdma_int.h; 0 none, 1 asked). */
uint32_t fs_rdma_resume_state(struct fs_rdma *r);
/* Agent: move the channel onto id's new queue pair (created here, on the
 * same rings and completion queues); the old pair is destroyed, its id is
 * the caller's.  0 or -errno. */
int fs_rdma_swap_qp(struct fs_rdma *r, struct rdma_cm_id *id);
/* Agent, accepting end, resume asked: destroy the queue pair (not its id),
 * so that the peer's stall watch finds it silent and resumes. */
void fs_rdma_drop_qp(struct fs_rdma *r);
/* Agent: the new pair is connected: say where our rx ring stands. */
void fs_rdma_resumed(struct fs_rdma *r);
/* Agent: no resume: the peer refused it (gone: as a disconnect, the peer
 * is gone), or it cannot be reached (the connection is reset). */
void fs_rdma_resume_failed(struct fs_rdma *r, const char *why, bool gone);
/* Agent: has the peer closed its end (after a look at what has arrived)? */
bool fs_rdma_peer_closed(struct fs_rdma *r);

#endif

/* Ring sizes (bytes per direction, powers of two; rdmacm carries the log2). */
#define FS_RDMA_RING_MIN (64u << 10)
#define FS_RDMA_RING_MAX (16u << 20)
#define FS_RDMA_RING_DEFAULT (256u << 10)

/* The ring size to use: asked (policy's ring size) if valid, else the default. */
static inline uint32_t fs_rdma_ring_size(uint32_t asked)
{
  if (asked >= FS_RDMA_RING_MIN && asked <= FS_RDMA_RING_MAX && !(asked & (asked - 1)))
    return asked;
  return FS_RDMA_RING_DEFAULT;
}

/* Pure, for tests: the 64-bit position a 30-bit value names after `last`. */
static inline uint64_t fs_rdma_unwrap(uint64_t last, uint32_t v)
{
  return last + ((v - (uint32_t)last) & FS_RDMA_IMM_MASK);
}

#endif
