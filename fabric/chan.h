/* A fabric channel: the side channel of one TCP connection.
 *
 * Each direction is a ring (fabric/ring.h).  Each end has a small endpoint
 * block in shared memory (reference count across fork, closed flag).
 *
 * Wake-up: each end owns an eventfd.  A side that is about to sleep (or that
 * sits in poll/epoll) sets want_data/want_space in the ring control block;
 * the other side, after publishing, clears the flag and writes the eventfd.
 * A Dekker-style fence pair makes the "set flag, re-check, sleep" and
 * "publish, check flag, wake" sequences miss nothing.
 *
 * A fabric whose rings are not shared memory (rdma: each end has its own
 * copy, carried by the NIC) has real work in these ops: publish carries new
 * tx records to the peer, credit tells the peer about consumed room,
 * progress learns what the peer did (and updates the local ring control
 * blocks, so the ring code is the same on every fabric), and arm/drain
 * manage its own event fd (wait_fd), which waiters watch beside the
 * connection's wake eventfd. */
#ifndef FS_FABRIC_CHAN_H
#define FS_FABRIC_CHAN_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "fabric/ring.h"

enum fs_flow { FS_FLOW_TCP = 0, FS_FLOW_FABRIC = 1, FS_FLOW_EOF = 2 };

/* Shared per-end block.  Only what must survive the end's holders across
 * fork lives here; the flow state and locks are in the connection object,
 * which a fork copies (one process uses a forked connection at a time). */
struct fs_chan_ep {
  uint32_t refs;             /* conn objects (across processes) on this end; atomic */
  uint32_t closed;           /* every holder closed; atomic */
  uint32_t pid;              /* creator, for diagnostics */
  uint32_t rx_revert;        /* this end stopped reading its rx ring at its
                                head: the peer re-sends the rest on TCP; atomic */
  uint32_t attached;         /* this end's connection holds the channel; atomic.
                                Nobody switches its tx before the peer's is set:
                                until then the peer may read TCP without looking
                                at the ring, and a TCP EOF would cut the stream. */
  uint32_t reverted;         /* some holder of this end downgraded it: why
                                (enum fs_reason: exec, fd-passed, sandbox...),
                                0 never; every process sharing it after fork
                                goes back to TCP; atomic */
  uint32_t rcvbuf;           /* SO_RCVBUF this end's application set (the
                                kernel's doubled value), 0: never; the peer's
                                tx ring holds no more than its own SO_SNDBUF
                                and this (shm; rdma does not carry it); atomic */
};

struct fs_chan;
struct fs_stat_conn;

struct fs_chan_ops {
  const char *name;
  int fabric;                                 /* enum fs_fabric */
  bool polled;                                /* progress polls a queue: spinners
                                                 need no PAUSE between looks */
  /* Every op is filled in (fs_chan_nop and the shared-ring helpers below
   * serve a fabric with nothing special to do).  All may run in any thread. */
  void (*wake_peer)(struct fs_chan *ch);      /* after my ep flags changed */
  void (*release)(struct fs_chan *ch);        /* unmap, close local fds */
  void (*progress)(struct fs_chan *ch);       /* take in the peer's news; cheap if none */
  void (*publish)(struct fs_chan *ch);        /* producer: new tx records go to the peer */
  /* Producer, after publishing a REVERT, before the TCP bytes behind it:
   * return once the peer's next look at its ring (its progress, then a
   * peek) is sure to find every record published so far, so that those
   * TCP bytes are never read ahead of the SWITCH they follow
   * (engine/cutover.h).  shm: nothing to wait for (the ring is shared
   * memory); rdma: the writes completed.  Bounded: a fabric that does not
   * move is failing, and the receiver's read-past rule then resets. */
  void (*settle)(struct fs_chan *ch);
  void (*credit)(struct fs_chan *ch);         /* consumer: rx room freed */
  void (*arm)(struct fs_chan *ch);            /* next news raises wait_fd */
  void (*drain)(struct fs_chan *ch);          /* clear wait_fd */
  /* fork: true if the child may share this end (its ring memory is shared
   * with the child); false: the connection goes back to TCP before the fork. */
  bool (*fork_shares)(struct fs_chan *ch);
  /* In a child after fork: the parent still owns what the channel holds
   * (queue pairs, ...); never post, poll or destroy them here. */
  void (*forget)(struct fs_chan *ch);
  /* Process exit: true while writes may still be on their way (call again). */
  bool (*lingering)(struct fs_chan *ch);
  /* The peer's TCP socket (local/peer: our connection's addresses) closed
   * without its end of the channel: is no process holding that end any
   * more (it was killed)?  Asked only then; may cost a system call.  A
   * fabric that learns of it by itself (rdma's disconnect) says no. */
  bool (*peer_gone)(struct fs_chan *ch, const struct sockaddr *local, const struct sockaddr *peer);
  /* The tx direction has been idle a while and the caller holds the tx
   * lock (no write in progress): give back the memory of the tx ring's
   * free space where the fabric can (shm: its pages, for both processes;
   * registered rdma memory stays).  Bytes given back; *all: nothing is
   * left to give back before the next write (else ask again later: the
   * peer had not read everything). */
  size_t (*trim)(struct fs_chan *ch, bool *all);
};

struct fs_chan {
  const struct fs_chan_ops *ops;
  int side;                  /* 0 connecting end, 1 accepting end */
  struct fs_ring tx, rx;
  struct fs_chan_ep *me, *peer;
  int my_efd;                /* the connection's wake eventfd (not owned): I sleep on it */
  struct fs_stat_conn *stat; /* the connection's stat row (not owned) while it
                                holds the channel, else NULL; atomic.  The
                                fabric counts its resumes there. */
  int wait_fd;               /* the fabric's own event fd, or -1 (see above) */
  uint32_t news;             /* fabrics with progress: bumped by each look that took
                                something in (atomic; one writer at a time) */
  uint32_t broken;           /* the fabric failed under the stream (a queue pair
                                error, not the peer's close); the peer's end is
                                also marked closed; atomic */
  uint32_t cramped;          /* the tx ring cannot have more room than its window
                                (rdma: no memory to register the whole ring, or
                                the peer's process did not answer in 50 ms): a
                                sender that would wait for room goes back to TCP,
                                whose buffers take what a program may write before
                                it reads; atomic */
};

/* The data path's small steps are inline: under an emulated CPU (the
 * Soft-RoCE VM) every call and return costs a lookup, and a small message's
 * round trip made some sixty of them. */

/* Producer side, after publishing into tx: the peer learns of it. */
static inline void fs_chan_kick_data(struct fs_chan *ch)
{
  ch->ops->publish(ch);
}

/* Producer side, after a REVERT (see settle above). */
static inline void fs_chan_settle(struct fs_chan *ch)
{
  ch->ops->settle(ch);
}

/* Consumer side, after consuming from rx: the peer learns of the room. */
static inline void fs_chan_kick_space(struct fs_chan *ch)
{
  ch->ops->credit(ch);
}

/* For fabrics whose rings are shared memory (both ends see the same
 * control blocks): publish/credit wake the peer only if it asked. */
void fs_chan_shared_publish(struct fs_chan *ch);
void fs_chan_shared_credit(struct fs_chan *ch);

/* Explicit stubs for ops with nothing to do. */
void fs_chan_nop(struct fs_chan *ch);
bool fs_chan_yes(struct fs_chan *ch);
bool fs_chan_no(struct fs_chan *ch);
size_t fs_chan_trim_none(struct fs_chan *ch, bool *all);

/* Declare interest before sleeping; return true if already ready.  tx:
 * ready with `need` bytes of room, woken once `wake` (at least need) fit
 * (fs_ring_want_space). */
bool fs_chan_arm_rx(struct fs_chan *ch);
bool fs_chan_arm_tx(struct fs_chan *ch, size_t need, size_t wake);
/* Withdraw that interest (rx: data, tx: room): a waiter that woke for
 * something else and is off to work must not cost its peer a wake-up per
 * message until it sleeps again.  Only for a waiter that knows nobody else
 * of its process waits on these rings. */
void fs_chan_disarm(struct fs_chan *ch, bool rx, bool tx);

/* Add 1 to eventfd efd (a wake-up); errno is left alone. */
void fs_chan_efd_write(int efd);

/* Take in the peer's news. */
static inline void fs_chan_progress(struct fs_chan *ch)
{
  ch->ops->progress(ch);
}

/* Ready states (after taking in the peer's news). */
static inline bool fs_chan_rx_ready(struct fs_chan *ch)
{
  fs_chan_progress(ch);
  return !fs_ring_empty(&ch->rx);
}
bool fs_chan_tx_ready(struct fs_chan *ch);

/* The room that makes tx writable, as the kernel's TCP
 * (sk_stream_is_writeable): a third of what the ring may hold, not its
 * first free byte.  A program that writes a block in blocking mode whenever
 * poll says writable (socat) must not find itself blocked on a ring its
 * peer, doing the same, fills.  A sleeping sender asks to be woken at it
 * too (fs_ring_want_space), so readiness and wake agree. */
static inline size_t fs_chan_tx_mark(struct fs_chan *ch)
{
  return fs_ring_limit(&ch->tx) / 3;
}

static inline bool fs_chan_peer_closed(const struct fs_chan *ch)
{
  return __atomic_load_n(&ch->peer->closed, __ATOMIC_ACQUIRE) != 0;
}

static inline bool fs_chan_cramped(const struct fs_chan *ch)
{
  return __atomic_load_n(&ch->cramped, __ATOMIC_RELAXED) != 0;
}

/* The fabric failed under the stream: what was on it may be lost. */
static inline bool fs_chan_broken(const struct fs_chan *ch)
{
  return __atomic_load_n(&ch->broken, __ATOMIC_ACQUIRE) != 0;
}

/* The peer stopped reading its ring (exec, SCM_RIGHTS): what it did not
 * read must go again on TCP before anything new (fs_cutover_service). */
static inline bool fs_chan_peer_reverted(const struct fs_chan *ch)
{
  return __atomic_load_n(&ch->peer->rx_revert, __ATOMIC_ACQUIRE) != 0;
}

/* Drop one conn reference on the end: true if it was the last (across
 * processes sharing it since fork).  The last holder then writes what its
 * direction owes (the engine's EOF rule) and calls fs_chan_close_end.  The
 * mapping stays until ops->release (other threads may still be inside a
 * call). */
bool fs_chan_unref(struct fs_chan *ch);

/* Mark the end closed for the peer and wake it. */
void fs_chan_close_end(struct fs_chan *ch);

/* The connection was shut down while our fds stay open (a hook closed it):
 * mark the end closed for the peer now, as a TCP peer sees a shut-down
 * socket.  It reads what is in its rx ring, then EOF; its sends fail.  The
 * reference count is untouched: the last close still drops the end. */
void fs_chan_shut(struct fs_chan *ch);

/* Give up a channel nobody else can see yet (a rendezvous that failed):
 * unref, close the end, release. */
void fs_chan_detach(struct fs_chan *ch);

#endif
