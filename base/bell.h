/* A doorbell: one eventfd and one page of bits that many peers ring, so
 * that a process needs no descriptor per connection to be woken.
 *
 * The owner (an epoll set, engine/door.h) makes the eventfd and a sealed
 * memfd holding the page, and gives each connection a slot.  A peer keeps
 * one dup of the eventfd and one mapping per bell, whatever the number of
 * connections it rings through it (fs_bell_peer_get dedupes by the memfd's
 * inode), and rings a slot: the slot's bit, its word's summary bit, then
 * the eventfd only if nobody rang since the owner last looked (`rung`).
 * The owner's drain takes the bits and names the rung slots: no scan of
 * idle connections, one eventfd write per drain at most.
 *
 * Page format (shared memory, host byte order, version 1), FS_BELL_BYTES:
 *   u32 magic "FSBL" | u32 version 1 | u32 nslots (FS_BELL_SLOTS) | u32 rung
 *   u64 summary[FS_BELL_SUMS]  at 64: bit w%64 of summary[w/64] set when
 *                              bits[w] may hold a rung slot
 *   u64 bits[FS_BELL_WORDS]    at 64 + 8 * FS_BELL_SUMS: bit s%64 of
 *                              bits[s/64] set when slot s rang
 * Ringer: set the slot's bit, then the summary bit, then exchange `rung`
 * with 1; write the eventfd if it was 0.  Drainer: read the eventfd, set
 * `rung` to 0, then exchange each summary word and each word it names
 * with 0 (all sequentially consistent).  A ring that the drain misses
 * found `rung` at 0 and wrote the eventfd again.  The page is the peer's
 * to write: a hostile peer can only set bits (spurious looks at our own
 * connections) or keep `rung` at 1 (its own wakes lost; every waiter
 * still sleeps in bounded slices).  Nothing in the page is trusted. */
#ifndef FS_BASE_BELL_H
#define FS_BASE_BELL_H

#include <stdbool.h>
#include <stdint.h>

#define FS_BELL_MAGIC 0x4c425346u /* "FSBL" */
#define FS_BELL_VERSION 1
#define FS_BELL_SLOTS 65536u
#define FS_BELL_WORDS (FS_BELL_SLOTS / 64)
#define FS_BELL_SUMS (FS_BELL_WORDS / 64)
#define FS_BELL_BYTES (64 + 8 * FS_BELL_SUMS + 8 * FS_BELL_WORDS)

struct fs_bell_page {
  uint32_t magic, version, nslots, rung;
  uint8_t pad[48];
  uint64_t summary[FS_BELL_SUMS];
  uint64_t bits[FS_BELL_WORDS];
};
_Static_assert(sizeof(struct fs_bell_page) == FS_BELL_BYTES, "bell page layout");

/* Owner: a new bell, its eventfd (non-blocking, close-on-exec, high) and
 * its sealed memfd, both registered as the library's; *page mapped.
 * 0 or -errno. */
int fs_bell_make(int *efd, int *memfd, struct fs_bell_page **page);
/* The same around an eventfd the owner has already (an epoll set's bell):
 * the memfd and its page alone. */
int fs_bell_make_page(int *memfd, struct fs_bell_page **page);

/* Owner: unmap (the caller closes the fds). */
void fs_bell_unmap(struct fs_bell_page *page);

/* Owner: take every rung slot, calling fn(arg, slot) once for each (in
 * any thread; several drainers get disjoint slots).  efd: read first, so
 * that a level-triggered waiter sleeps again; -1 where the drainer woke
 * on an edge (an epoll set's EPOLLET registration: each ring's write is an
 * edge whatever the count).  Returns the count. */
unsigned fs_bell_drain(struct fs_bell_page *page, int efd, void (*fn)(void *arg, uint32_t slot), void *arg);

/* Ringer: slot rang (see above); errno is left alone. */
void fs_bell_ring(struct fs_bell_page *page, int efd, uint32_t slot);

/* Hold back this thread's eventfd writes until fs_bell_release: a ring
 * sets its bits and takes `rung` at once, and only the write waits.  For
 * a loop that rings several slots of the same bells (a batch's wakes,
 * engine/batch.h): the first write wakes the owner, whose thread may run
 * at once in this one's place and drain only the slots rung so far; the
 * next ring then finds `rung` clear and wakes it again, one wake per slot.
 * Held, every slot is set before any owner wakes: one wake per bell.
 * Another ringer that finds `rung` taken relies on the held write, which
 * comes within the loop.  The caller keeps the eventfds open until the
 * release (FS_BELL_HELD writes are held; a ring past them writes now). */
#define FS_BELL_HELD 16
void fs_bell_hold(void);
void fs_bell_release(void);

/* A peer's bell as a ringer holds it: one per (bell) in the process,
 * shared by every connection that rings it. */
struct fs_bell_peer {
  struct fs_bell_page *page;
  int efd;
  uint32_t refs;             /* under the table's lock */
  uint64_t dev, ino;         /* the memfd's: the key */
  struct fs_bell_peer *next;
};

/* The peer's bell named by efd and memfd (both received, registered as
 * the library's: this call takes them over and closes them whatever
 * happens): the one already held, or a
 * new one after checking them (an eventfd; a sealed memfd of the right
 * size and format).  A new one keeps its eventfd: one descriptor more,
 * taken only within the budget (fs_fdreg_share_ok; budget_fd: the
 * connection's fd, the application's count as the budget reads it), else
 * -EMFILE; -1: no budget.  0, -EPROTO for
 * anything else, or -errno. */
int fs_bell_peer_get(int efd, int memfd, int budget_fd, struct fs_bell_peer **out);
void fs_bell_peer_put(struct fs_bell_peer *p);
/* The same for a bell of this process's own, its fds lent (kept open):
 * a ringer for wakes that start here (rdma's completions, taken by the
 * agent).  The one held if any (no descriptor), else one made from dups
 * of them, outside the peers' budget.  0 or -errno. */
int fs_bell_peer_own(int efd, int memfd, struct fs_bell_peer **out);

/* Ring slot of a peer's bell. */
static inline void fs_bell_peer_ring(struct fs_bell_peer *p, uint32_t slot)
{
  fs_bell_ring(p->page, p->efd, slot);
}

/* Peers' bells this process holds (for tests and stat). */
unsigned fs_bell_peer_count(void);

/* Is fd an eventfd (made non-blocking if it was not)?  0 or -EPROTO: a
 * peer could pass a pipe it never drains, or a file. */
int fs_bell_check_efd(int fd);

#endif
