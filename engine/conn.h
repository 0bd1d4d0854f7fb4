/* The connection object: one per tracked TCP socket (shared by its dups).
 *
 * Lifetime: reference counted.  Memory is type-stable: freed objects go to a
 * free list and are only ever reused as connections, which is what lets the
 * fd table hand out references without a lock (see engine/fdtab.h). */
#ifndef FS_ENGINE_CONN_H
#define FS_ENGINE_CONN_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "base/lock.h"
#include "base/reason.h"
#include "base/stat.h"
#include "fabric/fabric.h"
#include "policy/policy.h"

/* Values are part of the stat file format: append only. */
enum fs_conn_state {
  FS_STATE_PASSTHROUGH = 0, /* never accelerated: calls go straight to libc */
  FS_STATE_TCP,             /* established on TCP; eligible for upgrade */
  FS_STATE_UPGRADING,       /* fabric being set up while TCP carries data */
  FS_STATE_FABRIC,          /* data on the fabric; TCP idle, for liveness */
  FS_STATE_DOWNGRADING,     /* REVERT sent; back to TCP once drained */
  FS_STATE_LISTEN,          /* listening socket */
  FS_STATE_UNCONNECTED,     /* created, not yet connected or listening */
  FS_STATE_CLOSED,
};
_Static_assert(FS_STATE_CLOSED == FS_STAT_STATE_CLOSED, "stat file format names CLOSED");
_Static_assert(FS_FABRIC_TCP == FS_STAT_FABRIC_TCP, "stat file format names TCP");

const char *fs_conn_state_name(int state);

struct fs_chan;     /* fabric channel (fabric/chan.h) */
struct fs_hookset;  /* hook instances (hooks/hook.h) */
struct fs_door;     /* an epoll set's doorbell (engine/door.h) */
struct fs_door_home; /* a thread's claim on its connections (engine/door.h) */

struct fs_conn {
  uint32_t refs;              /* atomic */
  uint32_t state;             /* atomic; enum fs_conn_state */
  fs_lock_t lock;             /* state changes, fabric attach and teardown (base/lock.h) */
  fs_lock_t txlock;           /* one sender at a time: SWITCH/REVERT ordering */
  fs_lock_t rxlock;           /* one receiver at a time */
  /* What fabrics see of it (fabric/fabric.h), by name here too. */
  union {
    struct fs_link link;
    struct {
      FS_LINK_FIELDS
    };
  };
  uint8_t dir;                /* enum fs_dir; 0 until connected/accepted */
  uint8_t reason;             /* enum fs_reason */
  uint8_t tx_flow, rx_flow;   /* enum fs_flow (fabric/chan.h) per direction */
  bool nonblock;              /* O_NONBLOCK as last set through us */
  bool connecting;            /* non-blocking connect in progress */
  bool peer_known;            /* peer already holds what getpeername would say */
  bool local_known;           /* local already holds what getsockname would say */
  bool no_upgrade;            /* never try (again) */
  bool upgrade_queued;        /* a rendezvous is queued or running */
  bool upgrade_lazy;          /* queued with its delay, not yet run: the next
                                 I/O after upgrade_due nudges the agent; atomic */
  bool shut_wr, shut_rd;      /* shutdown() seen */
  bool hook_closed;           /* a hook closed the connection */
  bool served;                /* listening: some fabric serves rendezvous beside it
                                 here (atomic; a fork child does not) */
  uint64_t name_tried_ns;     /* listening, shared since fork: when this process
                                 last tried to serve its names (fs_agent_take_names) */
  bool peer_revert_done;      /* we answered the peer's rx revert */
  bool reverted;              /* back on TCP for good; the channel is dead */
  bool tx_back;               /* our tx went back to TCP for good (a REVERT in
                                 the ring), rx still reads the ring up to the
                                 peer's REVERT or EOF (fs_sock_revert_tx) */
  bool peer_close_seen;       /* one send after the peer closed was taken */
  bool peer_dead;             /* the peer's process vanished without closing its end */
  bool fork_shared;           /* forked with its channel: another process's copy
                                 may have switched a direction (cutover.h) */
  bool reset_tx, reset_rx;    /* owed ECONNRESET, once each (fs_cutover_peer_died) */
  bool linger_abort;          /* SO_LINGER {1, 0}: close() resets */
  bool cork_app, cork_kernel; /* TCP_CORK as the application set it and as the
                                 kernel has it: they differ only while tx is
                                 on a fabric (engine/sockopt.c) */
  bool more_tcp;              /* the last send on TCP had MSG_MORE: its tail may
                                 wait in the kernel, as under a cork */
  bool resend_queued;         /* a re-send for the peer's revert is queued */
  bool shared_hist;           /* accepted end another process held too (fork):
                                 upgrades only once we alone hold it, with byte
                                 counts from the kernel (fs_cutover_resync) */
  bool resync_tx, resync_rx;  /* counts to take from the kernel before the
                                 SWITCH each direction (txlock / rxlock) */
  bool kernel_io;             /* handed to the kernel for good (fdopen, splice):
                                 stays on TCP, even if not connected yet */
  bool used;                  /* sent, received or waited on here (atomic): an
                                 accepted end unused may yet be handed on */
  int resend_fd;              /* the fd to re-send on */
  bool resend_own;            /* closed before the re-send: resend_dup is the
                                 job's own dup of the socket (txlock) */
  int resend_dup;
  uint32_t spin_us;           /* adaptive spin budget */
  uint32_t tx_news;           /* the channel's news count at our last send (txlock) */
  /* A sender and a receiver asleep on wake_fd (each under its direction's
   * lock, so at most one each; atomic), and the room the sender waits for:
   * whichever drains the wake fd passes the wake on (engine/sockio.c). */
  uint32_t tx_sleeping, rx_sleeping;
  uint32_t pollers;           /* poll/select calls that armed its rings (under lock) */
  uint32_t blind_rx;          /* threads asleep on its TCP socket without its wake
                                 fd, which it had none of yet (engine/wake.h); atomic */
  uint32_t attach_held;       /* our `attached` flag waits for them; atomic */
  size_t tx_need;
  size_t rx_need;             /* the bytes a sleeping receiver waits for (1: any) */
  uint32_t rcvlowat;          /* SO_RCVLOWAT as set through us (0: never, i.e. 1) */
  uint32_t sndbuf, rcvbuf;    /* SO_SNDBUF/SO_RCVBUF set through us (the kernel's
                                 doubled values; 0: never); atomic */
  uint32_t peer_rcvbuf;       /* the peer's SO_RCVBUF as last seen (txlock) */
  int32_t timeo[2];           /* SO_SNDTIMEO [0] and SO_RCVTIMEO [1] as the kernel
                                 has them, ms: -1 none, 0 not known here (ask it:
                                 engine/wait.h, fs_wait_timeo_of); atomic */
  uint32_t nfds;              /* fds in this process naming it; atomic */
  uint32_t visit;             /* dedupe mark for whole-table walks */
  uint32_t ino;               /* accepted end: the socket's inode (stat, holders) */
  int32_t fork_child;         /* shared_hist: the last child forked with it */
  int32_t fork_first;         /* shared_hist: the first child forked with it, whose
                                 stat table may stay in its own memory (sockfork.c) */
  uint64_t tcp_tx, tcp_rx;    /* bytes carried by TCP so far (SWITCH/REVERT) */
  uint64_t fab_tx, fab_rx;    /* bytes carried by the fabric */
  char *ovh;                  /* TCP bytes read past the peer's SWITCH, for after its
                                 REVERT (engine/overhang.h; rxlock) */
  size_t ovh_off, ovh_len;    /* where they start in ovh, how many are left (atomic) */
  uint64_t trim_tx;           /* agent: fab_tx at its last trim pass (engine/trim.c) */
  bool trimmed;               /* agent: tx ring trimmed empty since fab_tx last moved */
  uint64_t trim_rx;           /* agent: fab_rx at its last trim pass */
  uint8_t rx_quiet;           /* agent: passes since fab_rx last moved (to 2) */
  uint64_t crossed_ns;        /* accepting end: when the threshold was crossed */
  bool ino_late;              /* accepting end: ino is published at crossed_ns
                                 (from a listener shared since fork: engine/sock.c) */
  uint64_t upgrade_due;       /* connecting end: when its queued upgrade may run */
  uint64_t hold_ns;           /* agent: when a request first waited for its use */
  uint64_t alive_ns;          /* the peer half-closed TCP and was alive then (coarse ns) */
  uint64_t live_ns;           /* rx: when TCP was last asked whether the peer went away */
  bool tcp_news;              /* a poll or sleep saw the TCP socket stir since (atomic) */
  struct fs_stat_conn *stat;  /* may be NULL (stats off) */
  struct fs_hookset *hooks;   /* may be NULL */
  struct fs_chan *chan;       /* atomic pointer; set while on a fabric */
  void *ep_ents;              /* epoll entries naming it (engine/epoll.c); under lock */
  /* The one epoll set holding an fd of it as the application registered it
   * (its events and data, no entry of ours: engine/epoll.c, "plain"), until
   * its wake fd makes that an entry.  Under lock (ep_plain is also read
   * atomically without it, to skip the lock when NULL). */
  void *ep_plain;
  int ep_plain_fd;
  uint32_t ep_plain_events;
  uint64_t ep_plain_data;
  /* The door its peer rings instead of a wake fd of ours (engine/door.h;
   * set once, at the rendezvous, before the channel; referenced), and
   * its slot there.  wake_fd is then local: leased from the process's pool
   * while a blocking call or a poll waits (engine/wake.h), written by
   * whoever drains the door. */
  struct fs_door *door;
  uint32_t door_slot;
  /* The thread that slept on it last while on TCP (engine/door.h, thread
   * doors; referenced, changed under lock), whose door it takes. */
  struct fs_door_home *door_home;
  uint32_t wake_users;        /* waits that entered its door (under lock) */
  bool wake_leased;           /* wake_fd is leased: back to the pool after them */
  bool wake_pooled;           /* wake_fd was a lease made its own: back to the
                                 pool at release, never closed (engine/wake.h) */
  uint32_t wake_seq;          /* odd while a lease changes (fs_wake_fd_own) */
  struct fs_conn *free_next;  /* free list link */
};

/* A new connection with one reference, state UNCONNECTED; NULL if out of memory. */
struct fs_conn *fs_conn_new(int fd, int family);

/* In a child after fork: the pool's lock, which a thread of the parent may
 * have held, goes back to free. */
void fs_conn_pool_fork_child(void);

static inline void fs_conn_get(struct fs_conn *c)
{
  __atomic_fetch_add(&c->refs, 1, __ATOMIC_RELAXED);
}

/* No fd of this process names it any more: the application closed it (a
 * rendezvous still running for it must make nothing). */
static inline bool fs_conn_closed(const struct fs_conn *c)
{
  return __atomic_load_n(&c->nfds, __ATOMIC_ACQUIRE) == 0;
}

/* Take a reference unless the object is already dead (refs == 0). */
static inline bool fs_conn_tryget(struct fs_conn *c)
{
  uint32_t r = __atomic_load_n(&c->refs, __ATOMIC_RELAXED);
  while (r != 0)
    if (__atomic_compare_exchange_n(&c->refs, &r, r + 1, 1, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
      return true;
  return false;
}

void fs_conn_put(struct fs_conn *c);

static inline int fs_conn_state(const struct fs_conn *c)
{
  return (int)__atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
}

void fs_conn_set_state(struct fs_conn *c, int state, int reason);

/* Destructor hook for the engine (fabric teardown); set once at init. */
extern void (*fs_conn_release_hook)(struct fs_conn *c);

/* The connection's last fd in this process is gone without a close() we
 * saw (its number came back as another socket); set once at init. */
extern void (*fs_conn_last_fd_hook)(struct fs_conn *c);

/* The connection a fabric's link belongs to. */
static inline struct fs_conn *fs_conn_of(struct fs_link *l)
{
  return (struct fs_conn *)((char *)l - __builtin_offsetof(struct fs_conn, link));
}

/* r bytes moved before the channel (tx: sent): the sizes a fabric sizes
 * its rings by (fs_link.io_max: the largest call; rx_burst: the peer's
 * largest reply, what a request brought back before our next send, however
 * small the calls that read it).  Counted until the rendezvous runs: the
 * threshold queues it 2 ms ahead, and a reply still arriving then counts.
 * Hints: a lost race costs nothing. */
static inline void fs_conn_note_io(struct fs_conn *c, ssize_t r, bool tx)
{
  uint32_t big = r > (ssize_t)UINT32_MAX ? UINT32_MAX : (uint32_t)r;
  if (big > __atomic_load_n(&c->io_max, __ATOMIC_RELAXED))
    __atomic_store_n(&c->io_max, big, __ATOMIC_RELAXED);
  uint32_t was = __atomic_load_n(&c->rx_run, __ATOMIC_RELAXED), run = 0;
  if (!tx)
    run = was > UINT32_MAX - big ? UINT32_MAX : was + big;
  if (run != was)
    __atomic_store_n(&c->rx_run, run, __ATOMIC_RELAXED);
  if (run > __atomic_load_n(&c->rx_burst, __ATOMIC_RELAXED))
    __atomic_store_n(&c->rx_burst, run, __ATOMIC_RELAXED);
}

#endif
