/* Single-producer/single-consumer record ring in shared memory.
 *
 * Wire format v3 (FS_RING_VERSION), little-endian host order, shared between
 * two processes of the same host:
 *
 *   A ring is `size` bytes (a power of two, multiple of 8) of data plus a
 *   control block.  `tail` (written by the producer) and `head` (written by
 *   the consumer) are free-running 64-bit byte positions; used = tail - head.
 *   Each sits in its own cache line with the flag its writer reads at every
 *   step: want_data (the consumer sleeps) beside tail, want_space (the
 *   producer sleeps) beside head, so a busy ring moves no line for them.
 *   (v1 had them the other way round: a line crossed twice per record.)
 *   want_space is 1 (wake me at the next room freed) or 2 (wake me once
 *   head reaches space_at, the low 32 bits of a position, compared
 *   modulo 2^32): a producer asleep for room a third of its ring wide is
 *   not woken at each of the consumer's reads only to sleep again (as the
 *   kernel's TCP wakes a writer when a third of its buffer is free).  A
 *   consumer that knows only 1 wakes at once on 2 as well (sooner, never
 *   wrong), and space_at is at or below the tail the producer had when it
 *   slept, so a consumer that empties the ring always wakes it.
 *   The data holds records, each 8-byte aligned:
 *
 *     u32 type | u32 len | payload[len] | pad to a multiple of 8
 *
 *   type 1 DATA    payload = application bytes (len >= 1)
 *   type 2 SWITCH  payload = u64 n: the sender wrote n bytes on TCP in total
 *                  before this record; read TCP up to n, then this ring
 *   type 3 REVERT  payload = u64 m: bytes sent on this ring in total; after
 *                  it the stream continues on TCP
 *   type 4 EOF     len 0: the sender shut down writing (shutdown or close)
 *   type 5 SKIP    len 0 (v3): nothing more in this lap; the next record is
 *                  at the ring's start.  Never at offset 0, never the last
 *                  record published (its producer publishes the record after
 *                  it in the same store of tail), never read by the
 *                  application: a consumer steps over it.
 *
 *   A header never wraps (8-aligned in an 8-multiple ring); a payload may
 *   wrap to the start.  SKIP lets a producer keep its DATA in the first
 *   `win` bytes of a large ring until the stream proves long (struct
 *   fs_ring): every page of a ring costs a page fault and a zeroed page the
 *   first time it is written (several microseconds each in a VM: a 4 MiB
 *   ring cost a 20 MiB download 5 ms, twice the rest of its time on shm);
 *   and go back to the start of a ring it finds empty (`rest`).
 *   The consumer may consume part of a DATA record: it then rewrites that
 *   record's header in place (the region is its own until head moves past
 *   it): len becomes the bytes left and the upper 24 bits of type the bytes
 *   already consumed (the producer always writes 0 there).
 *   So partial reads keep no private state and survive fork.  Rings are at
 *   most 16 MiB.  The producer always leaves FS_RING_RESERVE bytes free for the
 *   EOF/REVERT record, so close() never blocks on a full ring.
 *
 * A consumer never trusts the producer: every length is checked against what
 * is published, and a bad record makes the ring "corrupt" (-EPROTO). */
#ifndef FS_FABRIC_RING_H
#define FS_FABRIC_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define FS_RING_VERSION 3
#define FS_REC_DATA 1
#define FS_REC_SWITCH 2
#define FS_REC_REVERT 3
#define FS_REC_EOF 4
#define FS_REC_SKIP 5
#define FS_RING_HDR 8
#define FS_RING_RESERVE 32

struct fs_ring_ctl {
  uint64_t tail __attribute__((aligned(64))); /* producer; atomic */
  uint32_t want_data;                          /* consumer waits for data; atomic */
  uint64_t head __attribute__((aligned(64))); /* consumer; atomic */
  uint32_t want_space;                         /* producer waits for room (1, 2); atomic */
  uint32_t size;
  uint32_t space_at;                           /* want_space 2: wake at this head; atomic */
} __attribute__((aligned(64)));

/* A view of one ring: control block + data, both in a shared mapping. */
struct fs_ring {
  struct fs_ring_ctl *ctl;
  uint8_t *data;
  uint32_t size;
  /* Producer: a head read earlier (heads only grow, so a lower bound);
   * head itself is read only when this one shows too little room, so the
   * consumer's line stays with the consumer.  Atomic (readiness reads it). */
  uint64_t head_seen;
  /* Producer: the most it keeps in the ring (SO_SNDBUF + the peer's
   * SO_RCVBUF where an application set one), 0: the ring's size.  Its own,
   * never shared; control records ignore it.  Atomic. */
  uint32_t cap;
  /* Producer: DATA goes in the ring's first `win` bytes (then a SKIP), 0:
   * anywhere.  It doubles each time FS_RING_WIN_GROW times as many bytes
   * went through it, up to the whole ring.  Its own, never shared: the
   * consumer only steps over SKIP.  Atomic (readiness reads it). */
  uint32_t win;
  uint64_t win_moved;                          /* producer: DATA bytes since win was set */
  /* The fabric's: 0, or the widest window it can take now (rdma: the
   * part of the rings it registered).  A window due to widen past it stays
   * and sets win_ask instead, as does a write the window cuts short; once
   * the fabric lifts the limit (0), the window opens to the whole ring at
   * the producer's next record.  Atomic. */
  uint32_t win_lim;
  uint32_t win_ask;                            /* atomic */
  /* Producer: 0, or the offset from which a DATA record of at most
   * rest / FS_RING_REST_REC bytes that finds the ring empty goes back to
   * its start, behind a SKIP.  A connection of requests and replies then
   * keeps its records in the ring's first pages, where they walked the
   * whole ring lap after lap: with many connections their rings streamed
   * through the caches (nginx under wrk -c50 and -c400, fifty and four
   * hundred 256 KiB rings each way: 1.49x and 1.35x of plain TCP before,
   * 1.66x and 1.58x since; docs/design.md 2.2).  The fabric sets it (shm:
   * FS_RING_REST).  Its own, never shared.  Atomic (readiness reads it). */
  uint32_t rest;
  /* Producer: no look at head for `rest` before this tail (a look that
   * found data waits a quarter of `rest`: a stream whose consumer lags
   * does not fetch the consumer's line at every write).  Atomic. */
  uint64_t rest_next;
  /* Producer: the position of the last SKIP it wrote (never 0: a SKIP is
   * never at a ring's start), for a fabric that copies the ring (rdma
   * writes [tail, the next lap) as the SKIP's header alone).  Stored
   * before the tail that publishes it.  Atomic. */
  uint64_t skip_at;
  /* Producer: head at the last trim that left unread bytes (trim_held):
   * until head moves, a trim has nothing more to give back. */
  uint64_t trim_head;
  bool trim_held;
  /* This end's budget of kernel copies (base/kcopy.h), in bytes: while it
   * lasts, a copy of a page or more into or out of the ring is made by the
   * kernel and takes at least FS_RING_KC_CHARGE of it; 0: memcpy.  The
   * fabric sets it (shm: FS_RING_WIN_GROW times the first window, so a
   * transfer that ends before its window would grow never touches the
   * ring's pages itself); a trim that gave pages back sets it again to
   * kcopy0 (fs_ring_kcopy_renew).  Its own, never shared.  Atomic (a trim
   * may run beside). */
  uint32_t kcopy, kcopy0;
};

/* This end's kernel-copy budget back to its start: the ring's pages were
 * given back (a trim, ours of our tx ring or the peer's of our rx ring),
 * and are new again to whoever touches them next. */
static inline void fs_ring_kcopy_renew(struct fs_ring *r)
{
  __atomic_store_n(&r->kcopy, __atomic_load_n(&r->kcopy0, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
}

/* shm's `rest`, and the most a record may hold to go back (a quarter of
 * it).  Sixteen pages: a record that goes back at every look lands on
 * lines the reader has just read, which costs a round trip (ping-pong p50,
 * 5 rounds, against the build before: with 16 KiB, 4 KiB messages 2.46
 * against 2.29 us and 16 KiB ones 4.19 against 3.62; with 64 KiB, 2.49
 * against 2.47 and 3.77 against 3.57).  Records larger than the quarter
 * stay at tail: a 1 MiB ping-pong sent in quarters went back for each
 * quarter the reader had emptied, and took 2.75x as long (each written
 * over lines just read, then read back from the writer's cache: the L2
 * effect of fabric/shm/shm.h). */
#define FS_RING_REST (64u << 10)
#define FS_RING_REST_REC 4

/* Copies smaller than a page go by memcpy: a small message's page is
 * written again and again, and its one trap is soon paid back. */
#define FS_RING_KC_MIN 4096u
#define FS_RING_KC_CHARGE (64u << 10)

/* A ring larger than this starts with this window (fabric's choice: shm;
 * rdma starts with its registered first page, and win_lim).
 * 1 MiB: what the reply rule asks at most (fabric/shm/shm.h), so a reply
 * still goes in one call. */
#define FS_RING_WIN0 (1u << 20)
#define FS_RING_WIN_GROW 16
static inline uint32_t fs_ring_win0(uint32_t size)
{
  return size > FS_RING_WIN0 ? FS_RING_WIN0 : 0;
}

static inline uint64_t fs_ring_load(const uint64_t *p)
{
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

/* The producer's limit on bytes in the ring: its cap, else its window,
 * else its size. */
size_t fs_ring_limit(const struct fs_ring *r);

/* Producer: would the fabric's window limit (rdma's first page) cut a
 * write of `want` bytes short? */
bool fs_ring_win_short(const struct fs_ring *r, size_t want);

/* Bytes the producer could write as DATA payload right now (0 if none),
 * in one record, exact up to `want`: the consumer's head is read afresh
 * only when the one seen last leaves less room than that.  Below the cap,
 * if one is set; within the window, behind a SKIP where that leaves more. */
size_t fs_ring_space_for(struct fs_ring *r, size_t want);
static inline size_t fs_ring_space(struct fs_ring *r)
{
  return fs_ring_space_for(r, 1);
}

/* Producer, about to sleep for room: declare it (want_space, space_at)
 * so that the consumer wakes it once a record of `want` bytes fits, not
 * before (at most when the ring is empty).  The caller fences, then
 * looks again (Dekker with fs_ring_room_reached). */
#define FS_RING_WANT_ANY 1
#define FS_RING_WANT_AT 2
void fs_ring_want_space(struct fs_ring *r, size_t want);

/* Consumer, after consuming: is the producer's wait for room over (it
 * waits, and head reached what it asked)?  Clears its want_space if so:
 * the caller then wakes it. */
bool fs_ring_room_reached(struct fs_ring *r);

/* Producer: append one DATA record with up to `len` bytes gathered from iov
 * starting at byte `skip`; returns bytes taken (0 if full). */
size_t fs_ring_put_data(struct fs_ring *r, const struct iovec *iov, int iovcnt, size_t skip, size_t len);

/* Producer: append one DATA record with up to `len` bytes read from file fd
 * straight into the ring (sendfile: one copy, where a buffer took two), at
 * offset `off`, or from its position when off is -1.  Returns bytes taken,
 * 0 if the ring is full or the file ended there (*end set), or -errno
 * from the read (nothing appended). */
ssize_t fs_ring_put_file(struct fs_ring *r, int fd, off_t off, size_t len, bool *end);

/* Producer: append a control record (SWITCH/REVERT carry u64 val).  Uses the
 * reserve, so it succeeds unless the ring is badly broken (-ENOSPC). */
int fs_ring_put_ctl(struct fs_ring *r, uint32_t type, uint64_t val);

/* Consumer: the record at head.  Returns 1 and fills type/len/val (len is the
 * DATA bytes left), 0 if the ring is empty, -EPROTO if corrupt. */
int fs_ring_peek(const struct fs_ring *r, uint32_t *type, uint32_t *len, uint64_t *val);

/* Consumer: copy up to `max` bytes from DATA records into iov (starting at
 * byte `skip` of the iov), consuming them unless peek.  Stops at a non-DATA
 * record.  Returns bytes copied or -EPROTO. */
ssize_t fs_ring_get_data(struct fs_ring *r, const struct iovec *iov, int iovcnt, size_t skip, size_t max, bool peek);

/* Consumer: drop the (control) record at head. */
void fs_ring_pop(struct fs_ring *r);

/* DATA bytes readable before the first control record (FIONREAD). */
size_t fs_ring_readable(const struct fs_ring *r);
/* The same after the record at the head (a SWITCH, which a reader pops). */
size_t fs_ring_readable_past_head(const struct fs_ring *r);

/* Has the consumer what a reader needing `need` bytes waits for: that many
 * DATA bytes, or fewer with a control record behind them (EOF, REVERT,
 * SWITCH: nothing more comes on this ring before it)?  need <= 1: is the
 * ring not empty.  (SO_RCVLOWAT, MSG_PEEK | MSG_WAITALL.) */
bool fs_ring_data_ahead(const struct fs_ring *r, size_t need);

/* Is an EOF record queued behind the DATA records at head?  (The kernel
 * reports EPOLLRDHUP once the FIN arrived, before the data ahead of it is
 * read.)  Looks at FS_RING_EOF_SCAN records at most: false beyond. */
#define FS_RING_EOF_SCAN 64
bool fs_ring_eof_queued(const struct fs_ring *r);

/* Producer, with no write of its own in progress: give back the pages of
 * the free space (MADV_REMOVE; in a shared mapping they go for every
 * process that maps them, and come back zeroed at the next write).  No
 * page with an unread byte is touched (the consumer reads only [head,
 * tail)); an empty ring gives back every page.  Needs
 * page-aligned data; bytes given back, 0 if none, or -errno.  *empty:
 * the ring held no unread byte (nothing more to give back before the next
 * write); else a later call gives back what the consumer reads meanwhile,
 * and costs nothing while it reads nothing. */
ssize_t fs_ring_trim(struct fs_ring *r, bool *empty);

/* Does r hold DATA not consumed yet (past any SWITCH/REVERT at its head)? */
bool fs_ring_data_queued(const struct fs_ring *r);

/* Consumer, while waiting: load the record header at head along with tail.
 * The producer writes both; loading both in one iteration fetches both
 * cache lines at once, instead of the data only after tail said so. */
static inline void fs_ring_touch_head(const struct fs_ring *r)
{
  uint64_t head = __atomic_load_n(&r->ctl->head, __ATOMIC_RELAXED);
  (void)__atomic_load_n((const uint32_t *)(r->data + (head & (r->size - 1))), __ATOMIC_RELAXED);
}

/* Has anything ever been produced into the ring / consumed from it?  (A
 * fork-shared end: another holder may have moved it, engine/cutover.h.) */
static inline bool fs_ring_produced(const struct fs_ring *r)
{
  return fs_ring_load(&r->ctl->tail) != 0;
}

static inline bool fs_ring_consumed(const struct fs_ring *r)
{
  return __atomic_load_n(&r->ctl->head, __ATOMIC_ACQUIRE) != 0;
}

static inline bool fs_ring_empty(const struct fs_ring *r)
{
  return fs_ring_load(&r->ctl->tail) == __atomic_load_n(&r->ctl->head, __ATOMIC_RELAXED);
}

#endif
