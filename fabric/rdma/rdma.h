/* The rdma fabric's channel: the two rings of fabric/ring.h over one RC queue
 * pair (librdmacm/libibverbs).  Connection management is fabric/rdma/rdmacm.h.
 *
 * Memory, per end: one region of 2 * size bytes (fabric/rdma/mr.h)
 *   [0, size)        rx ring data: the peer RDMA-WRITEs its records here
 *   [size, 2*size)   tx ring data: our records are built here and written
 *                    to the same offset of the peer's rx data; the peer
 *                    writes one record header here when it downgrades
 *                    (its partial-read state, so our re-send starts exactly
 *                    where its reading stopped; see fs_sock_downgrade)
 * Both ends use the same ring size.  At first only each ring's first page
 * is registered, and a producer keeps its records there (its window,
 * fabric/ring.h: FS_RDMA_WIN_SLACK bytes short of the page, room for the
 * control records that ignore the window); the handshake names the rx
 * page's key (fabric/rdma/rdmacm.h), the first immediates the tx page's.
 * A producer whose window is due to widen registers its whole region and
 * sends that key; an end that receives a whole-region key registers its
 * own and sends it back.  A producer writes past its first page only once
 * it holds both whole-region keys (its own sent), so the peer always has
 * the keys for the bytes it reads and the header it may write back; each
 * work request takes the page keys where its bytes lie in the first pages,
 * else the whole-region keys.  An end that cannot register (memlock) keeps
 * its window: slower, never stuck.  The ring control blocks are local
 * memory the peer never writes: positions arrive only as immediate data,
 * and a WRITE WITH IMMEDIATE completes only after every earlier WRITE of
 * the queue pair is placed, so a position is never believed before the
 * bytes below it are there.
 *
 * Immediate data, wire format v2 (FS_RDMA_VERSION; 32 bits, network order):
 *   bits 31-30 kind, bits 29-0 value
 *   0 DATA    the producer's tail mod 2^30: its records end there now
 *   1 CREDIT  the consumer's head mod 2^30: it freed the room below it
 *   2 FLAGS   bit 29 clear: bit 0 closed, bit 1 rx_revert, bit 2 attached:
 *             the sender's endpoint flags (struct fs_chan_ep); flags are
 *             only ever set.  Bit 29 set (v2): half a key of the sender's
 *             region, bit 28 which (0 its tx ring's first page, 1 the whole
 *             region), bit 16 which half (0 the low 16 bits, first; 1 the
 *             high, which completes it), bits 15-0 the half; bits 27-17
 *             zero.  Each end sends its tx page key before anything else
 *             on a queue pair (again after a resume); a key sent again
 *             replaces the last.
 *   3 RESUME  the sender's rx tail mod 2^30, the first thing each end posts
 *             on a new queue pair after a resume (fabric/rdma/heal.c): the
 *             peer writes its records again from there
 * A 30-bit value is the low bits of a position less than 2^30 ahead of the
 * last one (rings are at most 16 MiB), which makes it exact.  A position
 * outside what the ring allows is a hostile or broken peer: the channel is
 * dead (peer closed) and the TCP socket tells the application the rest.
 *
 * Threads: publish/credit/wake post under one lock; completions are polled
 * by whichever thread looks (try-lock, nobody waits for it); waiters arm
 * the receive queue, where data, credits and flags all arrive, and sleep on
 * its completion channel (fs_chan.wait_fd) where it has one of its own, or
 * on what the agent wakes for the device's (fabric/rdma/cq.h). */
#ifndef FS_FABRIC_RDMA_RDMA_H
#define FS_FABRIC_RDMA_RDMA_H

#include <stdbool.h>
#include <stdint.h>

#include "fabric/chan.h"

#define FS_RDMA_VERSION 2
#define FS_RDMA_IMM_DATA 0u
#define FS_RDMA_IMM_CREDIT 1u
#define FS_RDMA_IMM_FLAGS 2u
#define FS_RDMA_IMM_RESUME 3u
#define FS_RDMA_IMM_MASK 0x3fffffffu
#define FS_RDMA_FLAG_CLOSED 1u
#define FS_RDMA_FLAG_RX_REVERT 2u
#define FS_RDMA_FLAG_ATTACHED 4u
#define FS_RDMA_FLAG_KEY (1u << 29)
#define FS_RDMA_KEY_FULL (1u << 28)
#define FS_RDMA_KEY_HIGH (1u << 16)
#define FS_RDMA_KEY_BAD (0x7ffu << 17)
/* A producer's window on a ring whose first page alone is registered: the
 * page less room for the control records (SKIP, SWITCH, REVERT, EOF: at
 * most 40 bytes) a window lets past its end. */
#define FS_RDMA_WIN_SLACK 256u
/* How long a window that asked to grow waits for the peer's answer before
 * a sender that would wait goes back to TCP (fabric/rdma/widen.c). */
#define FS_RDMA_ASK_MS 50

/* Pure, for tests: the FLAGS value carrying half (high or low) of a key. */
static inline uint32_t fs_rdma_key_val(bool full, bool high, uint32_t key)
{
  return FS_RDMA_FLAG_KEY | (full ? FS_RDMA_KEY_FULL : 0) | (high ? FS_RDMA_KEY_HIGH | key >> 16 : key & 0xffffu);
}

/* Pure, for tests: take a key half into lo[2] (the low halves so far,
 * bit 31 set once one came).  1 and *key when v completes a key (*full:
 * which), 0 for a low half, -1 for a malformed value (an unknown bit, or a
 * high half before its low). */
static inline int fs_rdma_key_take(uint32_t lo[2], uint32_t v, bool *full, uint32_t *key)
{
  if ((v & FS_RDMA_KEY_BAD) || !(v & FS_RDMA_FLAG_KEY))
    return -1;
  *full = (v & FS_RDMA_KEY_FULL) != 0;
  uint32_t *l = &lo[*full];
  if (!(v & FS_RDMA_KEY_HIGH)) {
    *l = 1u << 31 | (v & 0xffffu);
    return 0;
  }
  if (!(*l >> 31))
    return -1;
  *key = (v & 0xffffu) << 16 | (*l & 0xffffu);
  *l = 0;
  return 1;
}

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
 * connection request).  side: 0 connecting end, 1 accepting end.  0 or
 * -errno. */
int fs_rdma_new(struct rdma_cm_id *id, uint32_t size, int side, struct fs_rdma **out);
/* How this end's waiters are woken, set before the attach that publishes
 * the channel: the connection's wake eventfd (not owned), or a slot of its
 * door (the reference is the channel's). */
void fs_rdma_set_wake(struct fs_rdma *r, int my_efd);
struct fs_bell_peer;
void fs_rdma_set_bell(struct fs_rdma *r, struct fs_bell_peer *bell, uint32_t slot);
/* Its waiters sleep on a completion channel of its own (fabric/rdma/cq.h):
 * woken by the connection's wake eventfd; else the agent rings them,
 * through its door where it has one. */
bool fs_rdma_own_channel(const struct fs_rdma *r);

/* What the peer's handshake said: its region's address and key, and
 * whether the key covers the whole region (FS_RDMACM_F_WHOLE).  Before the
 * channel carries bytes. */
void fs_rdma_set_peer(struct fs_rdma *r, uint64_t addr, uint32_t rkey, bool whole);

/* Our region's address and key, for our handshake message: true where the
 * key covers the whole region (registered whole from the start), else it is
 * the rx ring's first page's.  The same for the channel's life. */
bool fs_rdma_local(const struct fs_rdma *r, uint64_t *addr, uint32_t *rkey);

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
