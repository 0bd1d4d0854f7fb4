/* Wakes held back within an event loop's batch.
 *
 * An event loop whose epoll_wait returned several events answers each of
 * them before it waits again.  On a shared-memory ring the bytes of each
 * answer are visible to the peer at once; only the wake of a peer thread
 * asleep on the ring costs: an eventfd write, a cross-CPU interrupt and a
 * context switch, about 4 us each on a 2-vCPU guest, and nginx under wrk
 * made about one per request.  Held back to the end of the batch, the
 * peer's thread wakes once to several answers, as it does on kernel TCP,
 * where the answers pile up while the stack is slower.  The flush sets
 * every held slot before it writes a bell's eventfd (fs_bell_hold): the
 * woken thread may run at once in this one's place, and must find all of
 * its answers at that one wake, not one per wake.
 *
 * Rules (the peer must never wait on us for long):
 *   - A batch starts when this thread's epoll_wait returns two or more
 *     events (not poll or select: pgbench's poll loop ran slower), and
 *     ends at its next wait of any kind in the library (epoll, poll,
 *     select, a blocking send or receive, its spin, a TCP-path call), at
 *     fork, exec and thread exit, or when FS_BATCH_SLOTS connections are
 *     held.
 *   - Only a send that fits one ring record, on a fabric whose publish is
 *     only the wake (shm: the bytes are already in the peer's view), is
 *     held back; a stream's chunks wake the reader at once, so it copies
 *     while we write.
 *   - A held connection keeps a reference, so its channel (and the wake fd
 *     it writes) lives until the flush: a channel goes only with the last
 *     reference (engine/sock.c).
 * So a held wake waits at most for the rest of the batch: the handlers of
 * the events the loop already has (a peer that spins sees the bytes at
 * once).  A thread that blocks outside the library in the middle of a
 * batch delays a sleeping peer by at most the sleeper's bound
 * (FS_WAIT_BOUND_MS), never more. */
#ifndef FS_ENGINE_BATCH_H
#define FS_ENGINE_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/conn.h"
#include "fabric/chan.h"

#define FS_BATCH_SLOTS 128     /* held connections; one more wakes at once */

struct fs_batch {
  uint8_t on;                  /* a batch is open */
  uint8_t n;                   /* held: conn[0, n), each with a reference */
  uint8_t exit_hooked;         /* this thread's exit flushes (its key is set) */
  struct fs_conn *conn[FS_BATCH_SLOTS];
};

/* Initial-exec: the library is loaded at start (LD_PRELOAD), and the
 * untracked fast paths of poll and epoll_wait look at it: one load. */
extern __thread struct fs_batch fs_batch_tls __attribute__((tls_model("initial-exec")));

/* epoll_wait returns nev events to the application. */
void fs_batch_begin(int nev);

/* Wake every peer held back and close the batch (any wait, fork, exec).
 * errno is left alone: it runs before calls that may succeed. */
void fs_batch_flush_slow(void);
static inline void fs_batch_flush(void)
{
  if (__builtin_expect(fs_batch_tls.on, 0))
    fs_batch_flush_slow();
}

/* The sender published one record of c on ch: tell the peer now, or hold
 * the wake back while a batch is open.  Only for a fabric whose publish is
 * only a wake (fs_chan_shared_publish). */
void fs_batch_kick_slow(struct fs_conn *c, struct fs_chan *ch);
static inline void fs_batch_kick(struct fs_conn *c, struct fs_chan *ch)
{
  if (__builtin_expect(fs_batch_tls.on, 0) && ch->ops->publish == fs_chan_shared_publish)
    fs_batch_kick_slow(c, ch);
  else
    fs_chan_kick_data(ch);
}

#endif
