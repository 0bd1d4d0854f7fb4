/* epoll over tracked sockets: what the interest lists (engine/epoll.c) and
 * the wait (engine/epoll_wait.c) share.  Private to those two files; the
 * entry points are declared in engine/ready.h. */
#ifndef FS_ENGINE_EPOLL_H
#define FS_ENGINE_EPOLL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

#include "engine/conn.h"

#define FS_EP_MAGIC 0x46534550u
#define FS_EP_ARENA (64u << 20)

struct fs_ep;

struct fs_ep_ent {
  uint32_t magic;
  bool alive, oneshot_fired, edge_pending, out_masked, wake_reg;
  bool parked;               /* DELeted, wake fds kept in the kernel set (ep->parked) */
  bool is_bell;              /* not an fd's entry: the tag of ep->bell */
  bool is_door;              /* not an fd's entry: the tag of a door's eventfd
                                (engine/door.h), referenced in `door` */
  bool door_reg;             /* its connection's door is in the kernel set:
                                its wakes reach us (counted in nwake) */
  struct fs_door *door;      /* is_door: the door it tags */
  bool tcp_parked;           /* parked with its TCP fd still in the kernel set */
  struct fs_ep *ep;
  int fd;
  struct fs_conn *c;
  uint32_t events;           /* the application's */
  epoll_data_t data;         /* the application's */
  struct fs_ep_ent *next;    /* in ep->ents, ep->parked, or the free list */
  struct fs_ep_ent *prev;    /* in ep->ents or ep->parked: O(1) removal */
  struct fs_ep_ent *cnext;   /* in the connection's list (c->ep_ents) */
  struct fs_ep_ent *rnext;   /* in ep->recheck */
  bool on_recheck;           /* look at it in the next epoll_wait */
  bool on_idle;              /* in ep->idle: a fabric entry not armed */
  struct fs_ep_ent *inext, *iprev; /* in ep->idle (newest first) */
  bool needs_setup;          /* its wake fd is not in the kernel set yet */
  int wait_fd;               /* its fabric's event fd in the kernel set, or -1 */
  uint32_t kmask;            /* the TCP fd's events in the kernel set */
  uint32_t kowed;            /* kernel events for it that found the result
                                full: reported by its next look (an EPOLLET
                                registration gives them only once) */
  /* EPOLLET on a fabric: the rx ring's tail and the tx ring's head at the
   * last report.  A wake or a re-check is an edge only if one moved since
   * (new data, new room) or the kernel reported something; edge_pending
   * (ADD, MOD) reports the state as it is. */
  uint64_t et_rx_tail, et_tx_head;
};

struct fs_ep {
  pthread_mutex_t lock;
  int epfd;
  uint32_t spin_us;          /* adaptive: how long epoll_wait spins on fabric rings */
  uint32_t ns_look;          /* what one look of that spin takes (learnt); atomic */
  int nents, nsetup;         /* entries; entries with needs_setup */
  int nidle, sleepers;       /* entries in idle; threads asleep in the kernel */
  int nwake;                 /* entries with their wake fd in the kernel set */
  bool any_fabric;           /* an entry on a fabric without it there (sticky) */
  bool had_chan;             /* some entry has been on a fabric (spinning pays) */
  uint64_t swept_ns;         /* last safety-net look after a short timeout; atomic */
  uint32_t empty_polls;      /* zero-timeout calls that found nothing; atomic */
  struct fs_ep_ent *ents;
  /* Level-triggered readiness without scanning every entry: an entry is
   * looked at again only if it was reported last time, was added or
   * modified, or the kernel woke us for it; every other fabric entry is
   * armed (its peer's next publish raises its wake fd) or idle. */
  struct fs_ep_ent *recheck;
  /* Fabric entries looked at but not armed.  Arming makes the peer pay a
   * system call (the wake) at its next publish; while this epoll is not
   * asleep nobody needs that, so entries are armed only when a thread is
   * about to sleep (or sleeps), and meanwhile each epoll_wait peeks at their
   * rings: a busy event loop and its busy peers exchange no wakes at all.
   * At most FS_EP_IDLE_MAX (the oldest are armed), which bounds the peek. */
  struct fs_ep_ent *idle, *idle_tail;
  /* Entries the application DELeted whose wake fds are still in the kernel
   * set.  Event loops (libevent, ae, libuv) DEL and ADD the same fd as their
   * interest changes, often at every request; kept registrations make the
   * re-ADD cost one system call, as on plain TCP, instead of three.  A
   * parked entry is dropped for good at its first wake event, at close of
   * its fd or of the epoll fd, or when its fd number comes back as another
   * connection. */
  struct fs_ep_ent *parked;
  /* The set's bell (an eventfd, edge-triggered, tagged bell_ent; -1 until
   * an entry may upgrade).  A connection makes its wake fd only at its
   * rendezvous, not when a set takes it: most short connections never
   * upgrade, and the wake fd cost each one an eventfd(), two epoll_ctl()
   * and a close() (nginx: 7 system calls per connection more than plain).
   * fs_ready_epoll_wake_made queues the connection in `pend` and rings the
   * bell; whoever waits on the set registers its wake fd (fs_ep_pend_run),
   * before or after the attach's wake: either way it looks at the entry.
   * pend_lock is a leaf lock (taken under a connection's). */
  int bell;
  struct fs_ep_ent *bell_ent;
  pthread_mutex_t pend_lock;
  struct fs_conn **pend;     /* referenced */
  int npend, pend_cap;       /* npend: atomic reads outside pend_lock */
  /* Doors (engine/door.h, docs/design.md 1.7): the set's own, which its
   * connections give their peers at the rendezvous (NULL until the first
   * does), and the tags of other sets' doors that connections of ours
   * hold (a connection ADDed to a second set, or kept after its first set
   * closed), linked by `next`.  Each eventfd is in the kernel set once,
   * edge-triggered.  `door` is made under door_lock, not the set's lock:
   * the agent makes it at a rendezvous, holding its own lock, which a
   * thread in epoll_wait may want under the set's (to queue an upgrade). */
  pthread_mutex_t door_lock;
  struct fs_door *door;      /* atomic reads */
  struct fs_ep_ent *door_ent, *doors;
};

#define FS_EP_IDLE_MAX 64

/* Entries live in one private mapping (engine/epoll.c). */
extern char *fs_ep_arena;

/* The entry a kernel tag names; NULL if the tag is application data;
 * FS_EP_STALE if it names one of ours that is gone (a registration the
 * kernel kept past its entry): never the application's, so dropped. */
#define FS_EP_STALE ((struct fs_ep_ent *)&fs_ep_arena)
int fs_ep_add_wake(int epfd, int fd, struct fs_ep_ent *e);
void fs_ep_reg_wake(struct fs_ep *ep, struct fs_ep_ent *e, int wfd);
/* e's wakes into the kernel set: its connection's door, or its wake fd if
 * it has one (ep->lock held). */
void fs_ep_reg_conn(struct fs_ep *ep, struct fs_ep_ent *e);
struct fs_ep_ent *fs_ep_ent_new(void);
void fs_ep_ent_free(struct fs_ep_ent *e);
/* A door's tag came up in ep's kernel set (ep->lock held): drain it.
 * Up to max entries of ep that rang go in got (the count is returned),
 * for the caller to look at now; any more go on the re-check list. */
int fs_ep_door_event(struct fs_ep *ep, struct fs_ep_ent *tag, struct fs_ep_ent **got, int max);
/* The tag of ep's own door when that door is its bell's eventfd (it always
 * is, once made), for the bell's pass to drain it: NULL if none (ep->lock
 * held). */
struct fs_ep_ent *fs_ep_door_of_bell(struct fs_ep *ep);
/* The set's epoll fd is closing (ep->lock held): its bell is taken out of
 * it (ep->bell -1), and returned for the caller to close, or -1 where it
 * is the set's door's eventfd (the door closes it when it goes, after
 * the connections holding it).  Under door_lock: the agent makes the door
 * from the bell it finds there. */
int fs_ep_bell_take(struct fs_ep *ep);
/* The set's epoll fd is closing: its doors go (ep->lock held). */
void fs_ep_door_close(struct fs_ep *ep);

/* Some entry is (or may become) a fabric one: sleeps are cut into slices
 * (the safety net).  Counted, not sticky: an event loop whose upgraded
 * connections have all gone sleeps as long as it asked again, where it
 * woke 50 times a second for ever. */
static inline bool fs_ep_fabric(const struct fs_ep *ep)
{
  return ep->nwake > 0 || ep->any_fabric;
}
struct fs_ep *fs_ep_get(int epfd, bool create);
int fs_ep_bell(struct fs_ep *ep);
void fs_ep_pend_run(struct fs_ep *ep);
/* Queue c on ep's bell and ring it (c->lock held). */
void fs_ep_pend_push(struct fs_ep *ep, struct fs_conn *c);
void fs_ep_pend_drop(struct fs_ep *ep, struct fs_conn *c); /* c NULL: all */
void fs_ep_plain_convert(struct fs_ep *ep, struct fs_conn *c);
void fs_ep_idle_del(struct fs_ep *ep, struct fs_ep_ent *e);
uint32_t fs_ep_kernel_events(struct fs_ep_ent *e);
int fs_ep_kmod(int epfd, struct fs_ep_ent *e, uint32_t events);
void fs_ep_list_del(struct fs_ep_ent **head, struct fs_ep_ent *e);
void fs_ep_recheck_add(struct fs_ep *ep, struct fs_ep_ent *e);
struct fs_ep_ent *fs_ep_tag(struct fs_ep *ep, uint64_t u64);
void fs_ep_unlink(struct fs_ep_ent *e);

#endif
