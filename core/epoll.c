/* epoll over tracked sockets (declared in core/ready.h).
 *
 * Per epoll instance we keep the interest entries of tracked fds.  In the
 * kernel set, a tracked fd is registered with data = its entry, and its
 * connection's wake eventfd (edge-triggered) with data = entry | 1, so one
 * kernel epoll_wait sleeps for TCP and fabric events alike; returned events
 * are mapped back to the application's events and epoll_data.  Entries live
 * in one private mapping, so a returned tag is recognised by address range,
 * magic and owner: an application's own epoll_data never falls in it. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/clock.h"
#include "core/ready.h"
#include "core/sockio.h"
#include "preload/fdtab.h"
#include "preload/real.h"

#define FS_EP_MAGIC 0x46534550u
#define FS_EP_ARENA (64u << 20)

struct fs_ep;

struct fs_ep_ent {
  uint32_t magic;
  bool alive, oneshot_fired, edge_pending, out_masked, wake_reg;
  bool parked;               /* DELeted, wake fds kept in the kernel set (ep->parked) */
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
  bool any_fabric;           /* some entry is or may become a fabric one */
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
};

static void fs_ep_idle_del(struct fs_ep *ep, struct fs_ep_ent *e)
{
  if (!e->on_idle)
    return;
  if (e->iprev)
    e->iprev->inext = e->inext;
  else
    ep->idle = e->inext;
  if (e->inext)
    e->inext->iprev = e->iprev;
  else
    ep->idle_tail = e->iprev;
  e->inext = e->iprev = NULL;
  e->on_idle = false;
  ep->nidle--;
}

static void fs_ep_recheck_add(struct fs_ep *ep, struct fs_ep_ent *e)
{
  fs_ep_idle_del(ep, e);
  if (!e->on_recheck) {
    e->on_recheck = true;
    e->rnext = ep->recheck;
    ep->recheck = e;
  }
}

static void fs_ep_recheck_del(struct fs_ep *ep, struct fs_ep_ent *e)
{
  if (!e->on_recheck)
    return;
  for (struct fs_ep_ent **pp = &ep->recheck; *pp; pp = &(*pp)->rnext)
    if (*pp == e) {
      *pp = e->rnext;
      break;
    }
  e->on_recheck = false;
}

/* Put fd (a connection's wake eventfd, or its fabric's event fd) in the
 * kernel set, edge-triggered, tagged as e's wake (e | 1).  0 or -errno;
 * errno is left alone. */
static int fs_ep_add_wake(int epfd, int fd, struct fs_ep_ent *e)
{
  struct epoll_event wev = { .events = EPOLLIN | EPOLLET, .data.u64 = (uint64_t)(uintptr_t)e | 1 };
  int saved = errno;
  int rc = FS_REAL(epoll_ctl)(epfd, EPOLL_CTL_ADD, fd, &wev) == 0 ? 0 : -errno;
  errno = saved;
  return rc;
}

#define FS_EP_SPIN_MAX 200
#define FS_EP_SPIN_MIN 2
#define FS_EP_IDLE_MAX 64

/* EPOLLET on a fabric: has a ring moved since e's last report? */
static bool fs_ep_moved(struct fs_ep_ent *e, struct fs_chan *ch)
{
  return e->edge_pending || fs_ring_load(&ch->rx.ctl->tail) != e->et_rx_tail ||
         fs_ring_load(&ch->tx.ctl->head) != e->et_tx_head;
}

/* Cheap look at an idle entry's rings (no locks, no arming): has it what
 * its interest asks for? */
static bool fs_ep_peek(struct fs_ep_ent *e)
{
  struct fs_chan *ch = __atomic_load_n(&e->c->chan, __ATOMIC_ACQUIRE);
  if (!ch || e->oneshot_fired || e->c->reverted)
    return false;
  if ((e->events & EPOLLET) && !fs_ep_moved(e, ch) && !fs_chan_peer_closed(ch))
    return false;
  /* Only what fs_sockio_ready would report: while rx is still on TCP a
   * ring holding just the peer's SWITCH is not readable (the bytes before
   * it are on TCP, which the kernel reports).  Calling that readable made
   * epoll_wait spin forever without asking the kernel. */
  if ((e->events & EPOLLIN) && e->c->rx_flow == FS_FLOW_FABRIC &&
      (fs_chan_rx_ready(ch) || fs_chan_peer_closed(ch)))
    return true;
  /* rx still on TCP with the peer's SWITCH at the ring's head: no wake will
   * come for what follows it (the peer's interest flag was ours to set),
   * and the kernel has nothing to say once the TCP bytes before it are
   * read.  Let fs_ep_report look: it moves rx over when the SWITCH is due;
   * until then (TCP bytes still to come) the spin stops after one look. */
  if ((e->events & EPOLLIN) && e->c->rx_flow == FS_FLOW_TCP && !fs_ring_empty(&ch->rx)) {
    uint32_t t, l;
    uint64_t n;
    if (fs_ring_peek(&ch->rx, &t, &l, &n) == 1 && t == FS_REC_SWITCH)
      return true;
  }
  return (e->events & EPOLLOUT) && e->c->tx_flow == FS_FLOW_FABRIC && fs_chan_tx_ready(ch);
}

static bool fs_ep_peek_idle(struct fs_ep *ep)
{
  for (struct fs_ep_ent *e = ep->idle; e; e = e->inext)
    if (fs_ep_peek(e))
      return true;
  return false;
}

/* Spin up to ep->spin_us for fabric readiness before the kernel sleep,
 * asking the kernel (without sleeping) every 64 looks for the other fds.
 * The clock is read only then (see fs_sockio_spin: where the clock source
 * is emulated a read costs microseconds); *spun_us is estimated from the
 * looks and the time one takes.  Returns kernel events gathered meanwhile
 * (>0), 0, or -errno. */
static int fs_ep_spin(struct fs_ep *ep, int epfd, struct epoll_event *kev, int room, const sigset_t *mask,
                      bool *ready, uint64_t *spun_us)
{
  struct timespec zero = { 0, 0 };
  uint32_t npi = __atomic_load_n(&ep->ns_look, __ATOMIC_RELAXED);
  uint64_t first = 0;
  *ready = false;
  for (unsigned i = 1;; i++) {
    pthread_mutex_lock(&ep->lock);
    bool r = fs_ep_peek_idle(ep);
    pthread_mutex_unlock(&ep->lock);
    if (r) {
      *ready = true;
      *spun_us = (uint64_t)i * npi / 1000u;
      return 0;
    }
    for (int k = 0; k < 8; k++)
      __builtin_ia32_pause();
    if ((i & 63) == 0) {
      int k = FS_REAL(epoll_pwait2)(epfd, kev, room, &zero, mask);
      int e = errno;
      uint64_t spent = fs_clock_spin_check(&first, &npi, i, 64);
      __atomic_store_n(&ep->ns_look, npi, __ATOMIC_RELAXED);
      *spun_us = spent / 1000u;
      if (k != 0)
        return k < 0 ? -e : k;
      if (spent >= (uint64_t)ep->spin_us * 1000u)
        return 0;
    }
  }
}

static void fs_ep_adapt(struct fs_ep *ep, uint64_t w)
{
  uint32_t s = ep->spin_us;
  if (w <= FS_EP_SPIN_MAX)
    s = (uint32_t)(2 * w + FS_EP_SPIN_MIN > FS_EP_SPIN_MAX ? FS_EP_SPIN_MAX : 2 * w + FS_EP_SPIN_MIN);
  else
    s = s / 2 < FS_EP_SPIN_MIN ? FS_EP_SPIN_MIN : s / 2;
  ep->spin_us = s;
}

static struct fs_ep *fs_ep_tab[FS_FDTAB_SIZE];
static pthread_mutex_t fs_ep_alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static char *fs_ep_arena, *fs_ep_bump;
static struct fs_ep_ent *fs_ep_free;

static struct fs_ep_ent *fs_ep_ent_new(void)
{
  struct fs_ep_ent *e = NULL;
  pthread_mutex_lock(&fs_ep_alloc_lock);
  if (!fs_ep_arena) {
    void *m = mmap(NULL, FS_EP_ARENA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m != MAP_FAILED)
      fs_ep_arena = fs_ep_bump = m;
  }
  if (fs_ep_free) {
    e = fs_ep_free;
    fs_ep_free = e->next;
  } else if (fs_ep_arena && fs_ep_bump + sizeof *e <= fs_ep_arena + FS_EP_ARENA) {
    e = (struct fs_ep_ent *)fs_ep_bump;
    fs_ep_bump += (sizeof *e + 63) & ~(size_t)63;
  }
  pthread_mutex_unlock(&fs_ep_alloc_lock);
  if (e)
    memset(e, 0, sizeof *e);
  return e;
}

static void fs_ep_ent_free(struct fs_ep_ent *e)
{
  e->magic = 0;
  e->alive = false;
  pthread_mutex_lock(&fs_ep_alloc_lock);
  e->next = fs_ep_free;
  fs_ep_free = e;
  pthread_mutex_unlock(&fs_ep_alloc_lock);
}

/* The entry a kernel tag names; NULL if the tag is application data;
 * FS_EP_STALE if it names one of ours that is gone (a registration the
 * kernel kept past its entry): never the application's, so dropped. */
#define FS_EP_STALE ((struct fs_ep_ent *)&fs_ep_arena)
static struct fs_ep_ent *fs_ep_tag(struct fs_ep *ep, uint64_t u64)
{
  char *p = (char *)(uintptr_t)(u64 & ~(uint64_t)1);
  if (!fs_ep_arena || p < fs_ep_arena || p >= fs_ep_bump || ((uintptr_t)(p - fs_ep_arena) & 63))
    return NULL;
  struct fs_ep_ent *e = (struct fs_ep_ent *)p;
  return e->magic == FS_EP_MAGIC && e->ep == ep && e->alive ? e : FS_EP_STALE;
}

/* Drop an entry already removed from its ep list (ep->lock held): out of
 * the connection's list, the wake fd out of the kernel set, then free. */
static void fs_ep_unlink(struct fs_ep_ent *e)
{
  struct fs_conn *c = e->c;
  fs_ep_recheck_del(e->ep, e);
  fs_ep_idle_del(e->ep, e);
  if (e->needs_setup)
    e->ep->nsetup--;
  if (!e->parked)
    e->ep->nents--;
  pthread_mutex_lock(&c->lock);
  for (struct fs_ep_ent **pp = (struct fs_ep_ent **)&c->ep_ents; *pp; pp = &(*pp)->cnext)
    if (*pp == e) {
      *pp = e->cnext;
      break;
    }
  pthread_mutex_unlock(&c->lock);
  if (e->wake_reg && c->wake_fd >= 0)
    FS_REAL(epoll_ctl)(e->ep->epfd, EPOLL_CTL_DEL, c->wake_fd, NULL);
  if (e->wait_fd >= 0)
    FS_REAL(epoll_ctl)(e->ep->epfd, EPOLL_CTL_DEL, e->wait_fd, NULL);
  if (e->tcp_parked)
    FS_REAL(epoll_ctl)(e->ep->epfd, EPOLL_CTL_DEL, e->fd, NULL);
  e->alive = false;
  fs_conn_put(c);
  fs_ep_ent_free(e);
}

/* ep->ents and ep->parked are doubly linked: a server with thousands of
 * connections must not walk them at every epoll_ctl. */
static void fs_ep_list_push(struct fs_ep_ent **head, struct fs_ep_ent *e)
{
  e->prev = NULL;
  e->next = *head;
  if (*head)
    (*head)->prev = e;
  *head = e;
}

static void fs_ep_list_del(struct fs_ep_ent **head, struct fs_ep_ent *e)
{
  if (e->prev)
    e->prev->next = e->next;
  else
    *head = e->next;
  if (e->next)
    e->next->prev = e->prev;
  e->next = e->prev = NULL;
}

/* The entry of (ep, fd) for connection c, live or parked (ep->lock held):
 * found through c's own short list, not by walking ep's. */
static struct fs_ep_ent *fs_ep_find(struct fs_ep *ep, struct fs_conn *c, int fd, bool parked)
{
  struct fs_ep_ent *e;
  pthread_mutex_lock(&c->lock);
  for (e = c->ep_ents; e; e = e->cnext)
    if (e->ep == ep && e->fd == fd && e->parked == parked && e->alive)
      break;
  pthread_mutex_unlock(&c->lock);
  return e;
}

/* DEL of an entry with wake fds in the kernel set (ep->lock held, e out of
 * ep->ents, its fd out of the kernel set): keep it for a re-ADD. */
static void fs_ep_park(struct fs_ep *ep, struct fs_ep_ent *e)
{
  fs_ep_recheck_del(ep, e);
  fs_ep_idle_del(ep, e);
  if (e->needs_setup) {
    e->needs_setup = false;
    ep->nsetup--;
  }
  ep->nents--;
  e->parked = true;
  fs_ep_list_push(&ep->parked, e);
}

void fs_ready_epoll_forget_conn(struct fs_conn *c)
{
  for (;;) {
    pthread_mutex_lock(&c->lock);
    struct fs_ep_ent *e = c->ep_ents;
    struct fs_ep *ep = e ? e->ep : NULL;
    pthread_mutex_unlock(&c->lock);
    if (!e)
      return;
    pthread_mutex_lock(&ep->lock);
    /* Still ours?  (A DEL or close may have dropped it meanwhile.) */
    bool found = e->alive && e->ep == ep && e->c == c;
    if (found) {
      fs_ep_list_del(e->parked ? &ep->parked : &ep->ents, e);
      if (!e->parked)
        FS_REAL(epoll_ctl)(ep->epfd, EPOLL_CTL_DEL, e->fd, NULL);
      fs_ep_unlink(e);
    }
    pthread_mutex_unlock(&ep->lock);
    if (!found) { /* raced with a DEL or epoll close: it unlinks itself */
      pthread_mutex_lock(&c->lock);
      if (c->ep_ents == e)
        c->ep_ents = e->cnext;
      pthread_mutex_unlock(&c->lock);
    }
  }
}

void fs_ready_epoll_fd_closing(struct fs_conn *c, int fd)
{
  /* A parked entry's TCP registration is keyed by (fd, socket): once fd is
   * closed it could neither be found nor removed, and it would outlive fd
   * while a dup keeps the socket open.  Take it out now. */
  for (;;) {
    struct fs_ep_ent *e;
    pthread_mutex_lock(&c->lock);
    for (e = c->ep_ents; e; e = e->cnext)
      if (e->tcp_parked && e->fd == fd)
        break;
    struct fs_ep *ep = e ? e->ep : NULL;
    pthread_mutex_unlock(&c->lock);
    if (!e)
      return;
    pthread_mutex_lock(&ep->lock);
    if (e->alive && e->ep == ep && e->c == c && e->tcp_parked && e->fd == fd) {
      FS_REAL(epoll_ctl)(ep->epfd, EPOLL_CTL_DEL, fd, NULL);
      e->tcp_parked = false;
    }
    pthread_mutex_unlock(&ep->lock);
  }
}

bool fs_ready_epoll_tracked(int epfd)
{
  return (unsigned)epfd < FS_FDTAB_SIZE && __atomic_load_n(&fs_ep_tab[epfd], __ATOMIC_ACQUIRE) != NULL;
}

static struct fs_ep *fs_ep_get(int epfd, bool create)
{
  if ((unsigned)epfd >= FS_FDTAB_SIZE)
    return NULL;
  struct fs_ep *ep = __atomic_load_n(&fs_ep_tab[epfd], __ATOMIC_ACQUIRE);
  if (ep || !create)
    return ep;
  ep = calloc(1, sizeof *ep);
  if (!ep)
    return NULL;
  pthread_mutex_init(&ep->lock, NULL);
  ep->epfd = epfd;
  ep->spin_us = 50;
  ep->ns_look = 500;
  struct fs_ep *expect = NULL;
  if (!__atomic_compare_exchange_n(&fs_ep_tab[epfd], &expect, ep, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    free(ep);
    ep = expect;
  }
  return ep;
}

/* Kernel event mask for the TCP fd: a fabric tx is never asked of TCP. */
static uint32_t fs_ep_kernel_events(struct fs_ep_ent *e)
{
  /* RDHUP tells us of a peer's death on TCP; the kernel refuses it beside
   * EPOLLEXCLUSIVE, where IN (the EOF) has to do. */
  uint32_t ev = e->events & EPOLLEXCLUSIVE ? e->events : e->events | EPOLLRDHUP;
  struct fs_chan *ch = fs_sockio_chan(e->c);
  e->out_masked = false;
  if (ch && e->c->tx_flow == FS_FLOW_FABRIC) {
    ev &= ~(uint32_t)EPOLLOUT;
    e->out_masked = true;
  }
  return ev;
}

static int fs_ep_kmod(int epfd, struct fs_ep_ent *e, uint32_t events)
{
  struct epoll_event kev = { .events = events, .data.u64 = (uint64_t)(uintptr_t)e };
  if (FS_REAL(epoll_ctl)(epfd, EPOLL_CTL_MOD, e->fd, &kev) < 0)
    return -errno;
  e->kmask = events;
  return 0;
}

/* fd is parked in ep with its TCP registration kept: not in the set as far
 * as the application knows, whatever the kernel would say (ep->lock held). */
static bool fs_ep_not_in(struct fs_ep *ep, struct fs_conn *c, int fd)
{
  struct fs_ep_ent *p = fs_ep_find(ep, c, fd, true);
  return p && p->tcp_parked;
}

/* ADD of fd: its parked entry for the same connection comes back (ep->lock
 * held).  0, -errno from the kernel, or -ENOENT: none, make a new one. */
static int fs_ep_revive(struct fs_ep *ep, int epfd, int fd, struct fs_conn *c, struct epoll_event *ev)
{
  struct fs_ep_ent *e = fs_ep_find(ep, c, fd, true);
  if (!e)
    return -ENOENT;
  fs_ep_list_del(&ep->parked, e);
  e->events = ev->events;
  e->data = ev->data;
  e->oneshot_fired = false;
  e->edge_pending = true;
  e->parked = false;
  uint32_t km = fs_ep_kernel_events(e);
  int rc = 0;
  bool add = true;
  if (e->tcp_parked) {
    /* Its TCP fd never left the kernel set: change its mask if need be
     * (EXCLUSIVE is not allowed in a MOD: leave and join again). */
    e->tcp_parked = false;
    if (km & EPOLLEXCLUSIVE) {
      FS_REAL(epoll_ctl)(epfd, EPOLL_CTL_DEL, fd, NULL);
    } else {
      add = false;
      if (km != e->kmask || (km & (EPOLLET | EPOLLONESHOT)))
        if ((rc = fs_ep_kmod(epfd, e, km)) < 0)
          e->tcp_parked = true; /* fs_ep_unlink takes it out */
    }
  }
  if (add) {
    struct epoll_event kev = { .events = km, .data.u64 = (uint64_t)(uintptr_t)e };
    e->kmask = km;
    if (FS_REAL(epoll_ctl)(epfd, EPOLL_CTL_ADD, fd, &kev) < 0)
      rc = -errno;
  }
  if (rc < 0) {
    e->parked = true; /* fs_ep_unlink: not counted */
    fs_ep_unlink(e);
    return rc;
  }
  fs_ep_list_push(&ep->ents, e);
  ep->nents++;
  fs_ep_recheck_add(ep, e); /* whatever happened while parked */
  return 0;
}

int fs_ready_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
  struct fs_conn *c = fs_fdtab_get(fd);
  struct fs_ep *ep = fs_ep_get(epfd, op == EPOLL_CTL_ADD && c);
  if (!c || !ep) {
    if (c)
      fs_conn_put(c);
    if (op == EPOLL_CTL_ADD && c)
      return -ENOMEM;
    int r = FS_REAL(epoll_ctl)(epfd, op, fd, ev);
    return r < 0 ? -errno : 0;
  }
  pthread_mutex_lock(&ep->lock);
  struct fs_ep_ent *e = fs_ep_find(ep, c, fd, false);
  int rc = 0;
  switch (op) {
  case EPOLL_CTL_ADD: {
    if (e) {
      rc = -EEXIST;
      break;
    }
    if (ep->parked && (rc = fs_ep_revive(ep, epfd, fd, c, ev)) != -ENOENT)
      break;
    rc = 0;
    e = fs_ep_ent_new();
    if (!e) {
      rc = -ENOMEM;
      break;
    }
    e->magic = FS_EP_MAGIC;
    e->wait_fd = -1;
    e->ep = ep;
    e->fd = fd;
    e->c = c;
    fs_conn_get(c);
    e->events = ev->events;
    e->data = ev->data;
    e->edge_pending = true;
    struct epoll_event kev = { .events = fs_ep_kernel_events(e), .data.u64 = (uint64_t)(uintptr_t)e };
    e->kmask = kev.events;
    if (FS_REAL(epoll_ctl)(epfd, EPOLL_CTL_ADD, fd, &kev) < 0) {
      rc = -errno;
      fs_conn_put(c);
      fs_ep_ent_free(e);
      break;
    }
    if (c->wake_fd >= 0) {
      e->wake_reg = fs_ep_add_wake(epfd, c->wake_fd, e) == 0;
      ep->any_fabric = true; /* it may move to a fabric: the safety net applies */
    }
    e->alive = true;
    fs_ep_list_push(&ep->ents, e);
    ep->nents++;
    fs_ep_recheck_add(ep, e);
    if (!e->wake_reg && !c->no_upgrade) {
      e->needs_setup = true;
      ep->nsetup++;
    }
    pthread_mutex_lock(&c->lock);
    e->cnext = c->ep_ents;
    c->ep_ents = e;
    pthread_mutex_unlock(&c->lock);
    break;
  }
  case EPOLL_CTL_MOD:
    if (!e) {
      rc = fs_ep_not_in(ep, c, fd) ? -ENOENT : FS_REAL(epoll_ctl)(epfd, op, fd, ev) < 0 ? -errno : -ENOENT;
      break;
    }
  {
    /* The kernel first: a MOD it refuses (EPOLLEXCLUSIVE) changes nothing.
     * Event loops MOD between IN and IN|OUT at every request; with tx on a
     * fabric the kernel watches IN either way, so a level-triggered mask
     * that stays the same costs no system call.  (ET and ONESHOT MODs re-arm
     * in the kernel, and an EXCLUSIVE one is refused: those still ask it.) */
    uint32_t old = e->events;
    e->events = ev->events;
    uint32_t km = fs_ep_kernel_events(e);
    if (km == e->kmask && !(km & (EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE)))
      rc = 0;
    else
      rc = fs_ep_kmod(epfd, e, km);
    if (rc < 0) {
      e->events = old;
      fs_ep_kernel_events(e); /* out_masked as before */
      break;
    }
    e->data = ev->data;
    e->oneshot_fired = false;
    e->edge_pending = true;
    fs_ep_recheck_add(ep, e);
    break;
  }
  case EPOLL_CTL_DEL:
    if (!e) {
      rc = fs_ep_not_in(ep, c, fd) ? -ENOENT : FS_REAL(epoll_ctl)(epfd, op, fd, ev) < 0 ? -errno : -ENOENT;
      break;
    }
    fs_ep_list_del(&ep->ents, e);
    /* Event loops (ae, libevent) DEL and re-ADD at every request.  With tx
     * on a fabric the TCP fd's kernel mask (IN, RDHUP) hears nothing until
     * the end, so a level-triggered one stays in the kernel set while
     * parked: the DEL and the re-ADD cost no system call. */
    if (e->wake_reg && fs_sockio_chan(c) && c->tx_flow == FS_FLOW_FABRIC && e->out_masked &&
        !(e->kmask & (EPOLLOUT | EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE))) {
      e->tcp_parked = true;
      rc = 0;
    } else {
      rc = FS_REAL(epoll_ctl)(epfd, EPOLL_CTL_DEL, fd, NULL) < 0 ? -errno : 0;
    }
    if (rc == 0 && e->wake_reg)
      fs_ep_park(ep, e);
    else
      fs_ep_unlink(e);
    break;
  default:
    rc = -EINVAL;
  }
  pthread_mutex_unlock(&ep->lock);
  fs_conn_put(c);
  return rc;
}

void fs_ready_epoll_close(int epfd)
{
  if ((unsigned)epfd >= FS_FDTAB_SIZE)
    return;
  struct fs_ep *ep = __atomic_exchange_n(&fs_ep_tab[epfd], NULL, __ATOMIC_ACQ_REL);
  if (!ep)
    return;
  pthread_mutex_lock(&ep->lock);
  struct fs_ep_ent *lists[2] = { ep->ents, ep->parked };
  ep->ents = ep->parked = NULL;
  for (int l = 0; l < 2; l++)
    for (struct fs_ep_ent *e = lists[l], *n; e; e = n) {
      n = e->next;
      e->wake_reg = e->tcp_parked = false; /* the kernel set dies with the fd */
      e->wait_fd = -1;
      fs_ep_unlink(e);
    }
  pthread_mutex_unlock(&ep->lock);
  /* ep itself is not freed: a thread may still be in epoll_wait on it. */
}

/* Fabric readiness of an entry, translated to the application's mask. */
static uint32_t fs_ep_eval(struct fs_ep_ent *e, uint32_t kernel, bool arm)
{
  struct fs_conn *c = e->c;
  struct fs_chan *ch = fs_sockio_chan(c);
  if (!ch)
    return kernel & (e->events | EPOLLERR | EPOLLHUP);
  fs_sockio_service(c, e->fd);
  short r = fs_sockio_ready(c, ch, (short)e->events, (short)kernel, arm);
  return (uint32_t)(unsigned short)r & (e->events | EPOLLERR | EPOLLHUP);
}

/* Arm e, then look (Dekker with the peer's kick): what is there already is
 * looked at in the next pass; otherwise its peer's next publish wakes us
 * (ep->lock held). */
static void fs_ep_arm(struct fs_ep *ep, struct fs_ep_ent *e)
{
  fs_ep_idle_del(ep, e);
  struct fs_chan *ch = __atomic_load_n(&e->c->chan, __ATOMIC_ACQUIRE);
  if (fs_ep_eval(e, 0, true) && (!(e->events & EPOLLET) || (ch && fs_ep_moved(e, ch))))
    fs_ep_recheck_add(ep, e);
}

/* e was looked at and not armed: peek at it from now on, arm it before a
 * sleep (ep->lock held). */
static void fs_ep_idle_add(struct fs_ep *ep, struct fs_ep_ent *e)
{
  if (e->on_idle || e->on_recheck || !__atomic_load_n(&e->c->chan, __ATOMIC_ACQUIRE))
    return;
  e->on_idle = true;
  e->iprev = NULL;
  e->inext = ep->idle;
  if (ep->idle)
    ep->idle->iprev = e;
  else
    ep->idle_tail = e;
  ep->idle = e;
  if (++ep->nidle > FS_EP_IDLE_MAX)
    fs_ep_arm(ep, ep->idle_tail);
}

/* About to sleep in the kernel: arm every idle entry.  False if one had
 * something already (it is on the recheck list: do not sleep). */
static bool fs_ep_arm_idle(struct fs_ep *ep)
{
  while (ep->idle)
    fs_ep_arm(ep, ep->idle);
  return ep->recheck == NULL;
}

/* Report ev for entry e: an fd appears at most once per epoll_wait result
 * (applications free per-fd state on the first event), so a second source
 * for the same entry (TCP and wake fd, or the fabric pre-check) is merged.
 * src[i] names the entry behind out[i] (NULL for untracked fds). */
static int fs_ep_emit(struct epoll_event *out, struct fs_ep_ent **src, int n, struct fs_ep_ent *e, uint32_t ev)
{
  for (int i = 0; i < n; i++)
    if (src[i] == e) {
      out[i].events |= ev;
      return n;
    }
  out[n].events = ev;
  out[n].data = e->data;
  src[n] = e;
  return n + 1;
}

/* Look at every entry that is (or may become) a fabric one in the next
 * pass; used when a wake's owner is unknown (ep->lock not held). */
static void fs_ep_recheck_fabric(struct fs_ep *ep)
{
  pthread_mutex_lock(&ep->lock);
  for (struct fs_ep_ent *e = ep->ents; e; e = e->next)
    if (e->wake_reg || __atomic_load_n(&e->c->chan, __ATOMIC_ACQUIRE))
      fs_ep_recheck_add(ep, e);
  pthread_mutex_unlock(&ep->lock);
}

/* Entries whose wake fd could not be registered at ADD (the connection was
 * not up yet): finish their set-up (ep->lock held). */
static void fs_ep_setup(struct fs_ep *ep, int epfd)
{
  for (struct fs_ep_ent *e = ep->ents; e && ep->nsetup > 0; e = e->next) {
    if (!e->needs_setup)
      continue;
    if (e->c->connecting)
      fs_sock_check_connected(e->c, e->fd);
    if (e->c->wake_fd >= 0) {
      e->wake_reg = fs_ep_add_wake(epfd, e->c->wake_fd, e) == 0;
      ep->any_fabric = true;
    }
    if (e->wake_reg || (e->c->no_upgrade && !e->c->connecting)) {
      e->needs_setup = false;
      ep->nsetup--;
      fs_ep_recheck_add(ep, e);
    }
  }
}

/* A fabric with its own event fd (rdma's completion channel): put it in the
 * kernel set beside the wake fd, with the same tag.  Done when the entry is
 * looked at, which the attach's wake-fd write guarantees (ep->lock held). */
static void fs_ep_reg_wait(struct fs_ep *ep, struct fs_ep_ent *e)
{
  struct fs_chan *ch = __atomic_load_n(&e->c->chan, __ATOMIC_ACQUIRE);
  if (!ch || ch->wait_fd < 0)
    return;
  int rc = fs_ep_add_wake(ep->epfd, ch->wait_fd, e);
  if (rc == 0 || rc == -EEXIST)
    e->wait_fd = ch->wait_fd;
}

/* Evaluate e and report it.  Level-triggered entries that were reported
 * are looked at again next time; an entry not reported is armed while a
 * thread sleeps on ep, idle otherwise. */
static int fs_ep_report(struct fs_ep *ep, int epfd, struct fs_ep_ent *e, uint32_t kernel, struct epoll_event *out,
                        struct fs_ep_ent **src, int n, int max)
{
  fs_ep_idle_del(ep, e);
  if (e->oneshot_fired)
    return n;
  bool arm = ep->sleepers > 0;
  struct fs_conn *c = e->c;
  bool masked = false;
  if (fs_sockio_chan(c)) {
    ep->any_fabric = ep->had_chan = true;
    masked = c->tx_flow == FS_FLOW_FABRIC;
    if (e->wait_fd < 0)
      fs_ep_reg_wait(ep, e);
  }
  if (masked != e->out_masked)
    fs_ep_kmod(epfd, e, fs_ep_kernel_events(e));
  uint32_t r = fs_ep_eval(e, kernel, arm);
  struct fs_chan *ch = (e->events & EPOLLET) ? __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE) : NULL;
  uint64_t rx_tail = 0, tx_head = 0;
  if (ch) {
    rx_tail = fs_ring_load(&ch->rx.ctl->tail);
    tx_head = fs_ring_load(&ch->tx.ctl->head);
    /* Like the kernel, an edge reports the whole current mask.  Room made
     * by the peer's reading counts as an edge even when we were writable
     * (the kernel only counts it after a full buffer): a spurious edge costs
     * an EAGAIN, a missed one a hang. */
    if (!e->edge_pending && !kernel && rx_tail == e->et_rx_tail && tx_head == e->et_tx_head)
      r = 0;
  }
  if (!r) {
    if (!arm)
      fs_ep_idle_add(ep, e);
    return n;
  }
  if (n >= max) {
    fs_ep_recheck_add(ep, e); /* no room: next call */
    return n;
  }
  e->edge_pending = false;
  if (ch) {
    e->et_rx_tail = rx_tail;
    e->et_tx_head = tx_head;
  }
  n = fs_ep_emit(out, src, n, e, r);
  if (e->events & EPOLLONESHOT) {
    e->oneshot_fired = true;
    fs_ep_kmod(epfd, e, 0);
  } else if (!(e->events & EPOLLET)) {
    fs_ep_recheck_add(ep, e);
  } else if (!arm) {
    fs_ep_idle_add(ep, e);
  }
  return n;
}

int fs_ready_epoll_wait(int epfd, struct epoll_event *out, int max, const struct timespec *ts, const sigset_t *mask)
{
  struct fs_ep *ep = fs_ep_get(epfd, false);
  if (max <= 0)
    return -EINVAL;
  struct epoll_event kst[64];
  int kmax = max < 64 ? max : 64;
  struct fs_ep_ent *sst[64], **src = max <= 64 ? sst : malloc((size_t)max * sizeof *src);
  if (!src)
    return -ENOMEM;
  int ret;
  /* The deadline is set when the call first sleeps: until then the whole
   * timeout is left (no clock read for a call that finds work). */
  uint64_t deadline = 0;
  bool spun_nothing = false;
  for (;;) {
    int n = 0;
    /* 1. Entries to look at again (reported last time, new, modified). */
    pthread_mutex_lock(&ep->lock);
    if (ep->nsetup > 0)
      fs_ep_setup(ep, epfd);
    struct fs_ep_ent *list = ep->recheck;
    ep->recheck = NULL;
    while (list) {
      struct fs_ep_ent *e = list;
      list = e->rnext;
      e->on_recheck = false;
      n = fs_ep_report(ep, epfd, e, 0, out, src, n, max);
    }
    /* 2. Idle fabric entries whose rings say they have news (none of them
     * waits for a sleep: a busy loop must not starve a quiet entry). */
    for (struct fs_ep_ent *e = ep->idle, *nx; e; e = nx) {
      nx = e->inext;
      if (fs_ep_peek(e))
        n = fs_ep_report(ep, epfd, e, 0, out, src, n, max);
    }
    /* Spin while some fabric entry is idle: its peer publishes without a
     * wake as long as we do not sleep (the spin adapts to the gaps seen). */
    bool spin = ep->had_chan && ep->idle && !spun_nothing;
    pthread_mutex_unlock(&ep->lock);
    /* 3. One kernel call for everything else (and to sleep). */
    struct timespec zero = { 0, 0 }, left;
    const struct timespec *t = n ? &zero : ts && !deadline ? ts : fs_clock_left(ts, deadline, &left);
    int room = max - n < kmax ? max - n : kmax;
    int k = -1;
    bool spun_ready = false, spun = false;
    uint64_t spun_us = 0, slept_at = 0;
    /* Nothing ready and we would sleep: spin on the fabric rings first. */
    if (n == 0 && spin && (!t || t->tv_sec || t->tv_nsec)) {
      spun = true;
      k = fs_ep_spin(ep, epfd, kst, room, mask, &spun_ready, &spun_us);
      if (k < 0) {
        ret = k;
        break;
      }
      if (spun_ready || k > 0)
        fs_ep_adapt(ep, spun_us);
      if (spun_ready) {
        /* Step 2 reports it.  If that reports nothing, this call does not
         * spin again (no livelock). */
        spun_nothing = true;
        continue;
      }
      if (k == 0)
        k = -1;
    }
    /* Safety net: with fabric entries, sleep in 20 ms slices and look at
     * every fabric entry after an empty slice, so a lost wake costs
     * milliseconds, never a hang (see fs_sockio_sleep). */
    struct timespec slice = { 0, 20 * 1000000L };
    bool sliced = false;
    if (k < 0 && ep->any_fabric && (!t || t->tv_sec > 0 || t->tv_nsec > slice.tv_nsec)) {
      t = &slice;
      sliced = true;
    }
    bool sleeps = k < 0 && room > 0 && (!t || t->tv_sec || t->tv_nsec);
    if (sleeps) {
      /* Arm every idle entry first; one that had news already is looked at
       * instead of sleeping. */
      pthread_mutex_lock(&ep->lock);
      bool ok = fs_ep_arm_idle(ep);
      if (ok)
        ep->sleepers++;
      pthread_mutex_unlock(&ep->lock);
      if (!ok)
        continue;
      if (ts && !deadline)
        deadline = fs_clock_deadline(ts);
      if (spun)
        slept_at = fs_clock_us();
    }
    if (k < 0)
      k = room > 0 ? FS_REAL(epoll_pwait2)(epfd, kst, room, t, mask) : 0;
    if (sleeps) {
      int saved = errno;
      pthread_mutex_lock(&ep->lock);
      ep->sleepers--;
      pthread_mutex_unlock(&ep->lock);
      errno = saved;
    }
    if (k == 0 && !sliced && n == 0 && ep->any_fabric) {
      /* The application's own timeout, shorter than a slice (or zero: a
       * loop that polls), ran out: the safety net still looks at every
       * fabric entry, in the next call, once a slice (or once in 1024
       * empty polls, which read no clock). */
      int saved = errno;
      bool sweep;
      if (t && (t->tv_sec || t->tv_nsec)) {
        uint64_t now = fs_clock_ns();
        sweep = now - __atomic_load_n(&ep->swept_ns, __ATOMIC_RELAXED) >= (uint64_t)slice.tv_nsec;
        if (sweep)
          __atomic_store_n(&ep->swept_ns, now, __ATOMIC_RELAXED);
      } else {
        sweep = (__atomic_add_fetch(&ep->empty_polls, 1, __ATOMIC_RELAXED) & 1023) == 0;
      }
      if (sweep)
        fs_ep_recheck_fabric(ep);
      errno = saved;
    }
    if (k == 0 && sliced) {
      fs_ep_recheck_fabric(ep);
      if (ts && fs_clock_ns() >= deadline) {
        ret = 0;
        break;
      }
      continue;
    }
    if (slept_at && k > 0) {
      int saved = errno;
      fs_ep_adapt(ep, spun_us + (fs_clock_us() - slept_at));
      errno = saved;
    }
    if (k < 0) {
      ret = n ? n : -errno;
      break;
    }
    pthread_mutex_lock(&ep->lock);
    for (int i = 0; i < k; i++) {
      struct fs_ep_ent *e = fs_ep_tag(ep, kst[i].data.u64);
      if (!e) {
        src[n] = NULL;
        out[n++] = kst[i];
        continue;
      }
      if (e == FS_EP_STALE)
        continue;
      if (e->parked) { /* news for an fd nobody waits on here: forget it */
        fs_ep_list_del(&ep->parked, e);
        fs_ep_unlink(e);
        continue;
      }
      bool wake = kst[i].data.u64 & 1;
      n = fs_ep_report(ep, epfd, e, wake ? 0 : kst[i].events, out, src, n, max);
    }
    pthread_mutex_unlock(&ep->lock);
    if (n > 0 || k == 0) {
      ret = n;
      break;
    }
    /* Only wake edges with nothing to report: sleep again for the rest. */
    if (ts && !deadline)
      deadline = fs_clock_deadline(ts); /* they came during the spin */
    if (ts && fs_clock_ns() >= deadline) {
      ret = 0;
      break;
    }
  }
  if (src != sst)
    free(src);
  return ret;
}
