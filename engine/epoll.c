/* epoll over tracked sockets (declared in engine/ready.h): the interest
 * lists (epoll_ctl).  Waiting is engine/epoll_wait.c; engine/epoll.h holds
 * what the two share.
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
#include <sys/eventfd.h>
#include <sys/mman.h>

#include "base/clock.h"
#include "base/hot.h"
#include "base/fdreg.h"
#include "base/lock.h"
#include "engine/hold.h"
#include "engine/cutover.h"
#include "engine/ready.h"
#include "engine/wait.h"
#include "engine/sockio.h"
#include "engine/epoll.h"
#include "engine/fdtab.h"
#include "engine/wake.h"
#include "base/real.h"

void fs_ep_idle_del(struct fs_ep *ep, struct fs_ep_ent *e)
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

void fs_ep_recheck_add(struct fs_ep *ep, struct fs_ep_ent *e)
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
int fs_ep_add_wake(int epfd, int fd, struct fs_ep_ent *e)
{
  struct epoll_event wev = { .events = EPOLLIN | EPOLLET, .data.u64 = (uint64_t)(uintptr_t)e | 1 };
  int saved = errno;
  int rc = FS_REAL(epoll_ctl)(epfd, EPOLL_CTL_ADD, fd, &wev) == 0 ? 0 : -errno;
  errno = saved;
  return rc;
}

/* e's wake fd into ep's kernel set, counted (ep->lock held).  A failure
 * leaves the safety net on for good: the entry may still reach a fabric. */
void fs_ep_reg_wake(struct fs_ep *ep, struct fs_ep_ent *e, int wfd)
{
  if (fs_ep_add_wake(ep->epfd, wfd, e) == 0) {
    e->wake_reg = true;
    ep->nwake++;
  } else {
    ep->any_fabric = true;
  }
}

/* Indexed by epfd, as the fd table is (engine/fdtab.h): low ones static,
 * the rest in a table mapped at the first set that needs it. */
static struct fs_ep *fs_ep_low[FS_FDTAB_LOW];
static struct fs_ep **fs_ep_high FS_HOT;
static int fs_ep_hiwater FS_HOT; /* fs_fdtab_below: close() asks of every fd whether it is a set */

/* epfd's slot; NULL if out of range, or high with no table (mapped first
 * if create), or (looking only) at or above the high water. */
static inline struct fs_ep **fs_ep_slot(int epfd, bool create)
{
  return FS_FDTAB_SLOT(fs_ep_low, &fs_ep_high, &fs_ep_hiwater, epfd, create);
}

static pthread_mutex_t fs_ep_alloc_lock FS_HOT = PTHREAD_MUTEX_INITIALIZER;
char *fs_ep_arena FS_HOT;
static char *fs_ep_bump FS_HOT;
static struct fs_ep_ent *fs_ep_free FS_HOT;

struct fs_ep_ent *fs_ep_ent_new(void)
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

void fs_ep_ent_free(struct fs_ep_ent *e)
{
  e->magic = 0;
  e->alive = false;
  pthread_mutex_lock(&fs_ep_alloc_lock);
  e->next = fs_ep_free;
  fs_ep_free = e;
  pthread_mutex_unlock(&fs_ep_alloc_lock);
}

struct fs_ep_ent *fs_ep_tag(struct fs_ep *ep, uint64_t u64)
{
  char *p = (char *)(uintptr_t)(u64 & ~(uint64_t)1);
  if (!fs_ep_arena || p < fs_ep_arena || p >= fs_ep_bump || ((uintptr_t)(p - fs_ep_arena) & 63))
    return NULL;
  struct fs_ep_ent *e = (struct fs_ep_ent *)p;
  return e->magic == FS_EP_MAGIC && e->ep == ep && e->alive ? e : FS_EP_STALE;
}

/* Drop an entry already removed from its ep list (ep->lock held): out of
 * the connection's list, the wake fd out of the kernel set, then free. */
void fs_ep_unlink(struct fs_ep_ent *e)
{
  struct fs_conn *c = e->c;
  fs_ep_recheck_del(e->ep, e);
  fs_ep_idle_del(e->ep, e);
  if (e->needs_setup)
    e->ep->nsetup--;
  if (!e->parked)
    e->ep->nents--;
  fs_lock(&c->lock);
  for (struct fs_ep_ent **pp = (struct fs_ep_ent **)&c->ep_ents; *pp; pp = &(*pp)->cnext)
    if (*pp == e) {
      *pp = e->cnext;
      break;
    }
  fs_unlock(&c->lock);
  if (e->wake_reg) {
    e->ep->nwake--;
    if (c->wake_fd >= 0)
      FS_REAL(epoll_ctl)(e->ep->epfd, EPOLL_CTL_DEL, c->wake_fd, NULL);
  }
  if (e->door_reg) /* the door stays in the kernel set for the others */
    e->ep->nwake--;
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

void fs_ep_list_del(struct fs_ep_ent **head, struct fs_ep_ent *e)
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
  fs_lock(&c->lock);
  for (e = c->ep_ents; e; e = e->cnext)
    if (e->ep == ep && e->fd == fd && e->parked == parked && e->alive)
      break;
  fs_unlock(&c->lock);
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
  /* A plain registration goes with the socket, as it would without us (a
   * socket another process still holds keeps it, as the kernel does). */
  if (__atomic_load_n(&c->ep_plain, __ATOMIC_ACQUIRE)) {
    fs_lock(&c->lock);
    struct fs_ep *pep = c->ep_plain;
    c->ep_plain = NULL;
    fs_unlock(&c->lock);
    if (pep)
      fs_ep_pend_drop(pep, c);
  }
  for (;;) {
    fs_lock(&c->lock);
    struct fs_ep_ent *e = c->ep_ents;
    struct fs_ep *ep = e ? e->ep : NULL;
    fs_unlock(&c->lock);
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
      fs_lock(&c->lock);
      if (c->ep_ents == e)
        c->ep_ents = e->cnext;
      fs_unlock(&c->lock);
    }
    fs_ep_pend_drop(ep, c);
  }
}

void fs_ready_epoll_fd_closing(struct fs_conn *c, int fd)
{
  /* The fd of a plain registration closes while a dup keeps the socket: the
   * kernel keeps the registration, which could no longer be made an entry
   * by its fd.  Make it one now. */
  struct fs_ep *pep = __atomic_load_n(&c->ep_plain, __ATOMIC_ACQUIRE);
  if (pep && c->ep_plain_fd == fd) {
    pthread_mutex_lock(&pep->lock);
    fs_ep_plain_convert(pep, c);
    pthread_mutex_unlock(&pep->lock);
  }
  /* A parked entry's TCP registration is keyed by (fd, socket): once fd is
   * closed it could neither be found nor removed, and it would outlive fd
   * while a dup keeps the socket open.  Take it out now. */
  for (;;) {
    struct fs_ep_ent *e;
    fs_lock(&c->lock);
    for (e = c->ep_ents; e; e = e->cnext)
      if (e->tcp_parked && e->fd == fd)
        break;
    struct fs_ep *ep = e ? e->ep : NULL;
    fs_unlock(&c->lock);
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
  struct fs_ep **s = fs_ep_slot(epfd, false);
  return s != NULL && __atomic_load_n(s, __ATOMIC_ACQUIRE) != NULL;
}

struct fs_ep *fs_ep_get(int epfd, bool create)
{
  struct fs_ep **s = fs_ep_slot(epfd, create);
  if (!s)
    return NULL;
  struct fs_ep *ep = __atomic_load_n(s, __ATOMIC_ACQUIRE);
  if (ep || !create)
    return ep;
  ep = calloc(1, sizeof *ep);
  if (!ep)
    return NULL;
  fs_lock_init_mutex(&ep->lock);
  fs_lock_init_mutex(&ep->pend_lock);
  fs_lock_init_mutex(&ep->door_lock);
  ep->bell = -1;
  ep->epfd = epfd;
  ep->spin_us = 50;
  ep->ns_look = 500;
  struct fs_ep *expect = NULL;
  if (!__atomic_compare_exchange_n(s, &expect, ep, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    free(ep);
    ep = expect;
  }
  return ep;
}

/* The set's bell, made on first need (ep->lock held): 0, or -errno (the
 * caller then makes the connection's wake fd at once, as before). */
int fs_ep_bell(struct fs_ep *ep)
{
  if (ep->bell >= 0)
    return 0;
  int saved = errno, rc = 0;
  struct fs_ep_ent *b = fs_ep_ent_new();
  /* High, as the library's other fds: at the lowest free number it took
   * the one the application's next socket() or open() expected, for good. */
  int fd = b ? FS_FDREG_MAKE_NOW(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) : -1;
  if (fd < 0) {
    rc = b ? -errno : -ENOMEM;
  } else {
    b->magic = FS_EP_MAGIC;
    b->ep = ep;
    b->is_bell = b->alive = true;
    struct epoll_event kev = { .events = EPOLLIN | EPOLLET, .data.u64 = (uint64_t)(uintptr_t)b };
    if (FS_REAL(epoll_ctl)(ep->epfd, EPOLL_CTL_ADD, fd, &kev) < 0) {
      rc = -errno;
      fs_fdreg_close(fd);
    } else {
      fs_wake_on_made(fs_ready_epoll_wake_made); /* before any entry waits for it */
      ep->bell = fd;
      ep->bell_ent = b;
    }
  }
  if (rc < 0 && b)
    fs_ep_ent_free(b);
  errno = saved;
  return rc;
}

/* Kernel event mask for the TCP fd: a fabric tx is never asked of TCP. */
uint32_t fs_ep_kernel_events(struct fs_ep_ent *e)
{
  /* RDHUP tells us of a peer's death on TCP; the kernel refuses it beside
   * EPOLLEXCLUSIVE, where IN (the EOF) has to do. */
  uint32_t ev = e->events & EPOLLEXCLUSIVE ? e->events : e->events | EPOLLRDHUP;
  struct fs_chan *ch = fs_cutover_chan(e->c);
  e->out_masked = false;
  if (ch && e->c->tx_flow == FS_FLOW_FABRIC) {
    ev &= ~(uint32_t)EPOLLOUT;
    e->out_masked = true;
  }
  return ev;
}

int fs_ep_kmod(int epfd, struct fs_ep_ent *e, uint32_t events)
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

/* A new entry for (fd, c) with the application's events and data, its TCP
 * fd put in the kernel set with op (ADD, or MOD of a plain registration)
 * tagged by it (ep->lock held).  0 or -errno. */
static int fs_ep_make(struct fs_ep *ep, int epfd, int fd, struct fs_conn *c, uint32_t events, epoll_data_t data,
                      int op)
{
  struct fs_ep_ent *e = fs_ep_ent_new();
  if (!e)
    return -ENOMEM;
  e->magic = FS_EP_MAGIC;
  e->wait_fd = -1;
  e->ep = ep;
  e->fd = fd;
  e->c = c;
  fs_conn_get(c);
  e->events = events;
  e->data = data;
  e->edge_pending = true;
  struct epoll_event kev = { .events = fs_ep_kernel_events(e), .data.u64 = (uint64_t)(uintptr_t)e };
  e->kmask = kev.events;
  if (FS_REAL(epoll_ctl)(epfd, op, fd, &kev) < 0) {
    int rc = -errno;
    fs_conn_put(c);
    fs_ep_ent_free(e);
    return rc;
  }
  /* A connection that may upgrade gets its wake fd at its rendezvous,
   * which rings the set's bell (fs_ready_epoll_wake_made).  Without a
   * bell, it is made now, as an event loop sleeps on it. */
  bool may = !c->no_upgrade && fs_conn_state(c) != FS_STATE_LISTEN;
  if (may && c->wake_fd < 0 && fs_ep_bell(ep) < 0)
    fs_wake_for_epoll(c);
  e->alive = true;
  fs_ep_list_push(&ep->ents, e);
  ep->nents++;
  fs_ep_recheck_add(ep, e);
  fs_lock(&c->lock);
  e->cnext = c->ep_ents;
  c->ep_ents = e;
  fs_unlock(&c->lock);
  /* Its wake fd, if it has one: looked for once e is in c's list, since
   * one made meanwhile rang the bell only for the sets already there
   * (both go through c->lock).  It may move to a fabric: the safety net
   * applies. */
  fs_ep_reg_conn(ep, e);
  /* A listener never becomes a connection: left to the setup pass, it
   * would have each epoll_wait walk every entry (nginx: all of them).
   * A connection still connecting waits there for its end of connect. */
  if (!e->wake_reg && !e->door_reg && may && (c->connecting || !c->dir || ep->bell < 0)) {
    e->needs_setup = true;
    ep->nsetup++;
  }
  return 0;
}

/* ---- plain registrations (docs/design.md 1.5) ----------------------------
 * A connection without a channel or a wake fd reads as its TCP socket does:
 * its fd goes into the kernel set as the application gave it, epoll_wait
 * hands its events on untouched, and a set with no entry waits in the
 * kernel alone (fs_ep_simple).  The connection remembers the one set and fd
 * (ep_plain); its rendezvous rings that set's bell like an entry's, and the
 * next pass makes it an entry with a kernel MOD (fs_ep_plain_convert) and
 * looks at it, whatever the channel carried meanwhile.  Not plain: ONESHOT and EXCLUSIVE
 * (kernel state that cannot be carried over), an fd with dups (a
 * registration outlives the fd it was made with), a second set or fd of one
 * connection, a set without its bell.  A listener is passed through. */

/* Record (ep, fd) as c's plain registration and ADD it to the kernel
 * (c->lock held: a conversion reads the record only once the kernel has
 * it).  0, -errno, or -EAGAIN: not plain, make an entry. */
static int fs_ep_plain_add_locked(struct fs_ep *ep, int epfd, int fd, struct fs_conn *c, struct epoll_event *ev)
{
  if (c->ep_plain || __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE) || c->wake_fd >= 0)
    return -EAGAIN;
  if (FS_REAL(epoll_ctl)(epfd, EPOLL_CTL_ADD, fd, ev) < 0)
    return -errno;
  c->ep_plain = ep;
  c->ep_plain_fd = fd;
  c->ep_plain_events = ev->events;
  c->ep_plain_data = ev->data.u64;
  return 0;
}

/* What a plain registration cannot be (see above); the set's bell is asked
 * for by the caller. */
static bool fs_ep_plain_may(struct fs_conn *c, uint32_t events)
{
  return !(events & (EPOLLONESHOT | EPOLLEXCLUSIVE)) && __atomic_load_n(&c->nfds, __ATOMIC_ACQUIRE) == 1;
}

static bool fs_ep_listener(struct fs_conn *c)
{
  return fs_conn_state(c) == FS_STATE_LISTEN && !__atomic_load_n(&c->chan, __ATOMIC_ACQUIRE);
}

/* ADD of fd as plain where fs_ep_plain_fast could not (the set's bell not
 * made yet, or a parked entry to revive first), or -EAGAIN: make an entry
 * (ep->lock held).  A listener never gets here: the fast path passed it. */
static int fs_ep_plain_add(struct fs_ep *ep, int epfd, int fd, struct fs_conn *c, struct epoll_event *ev)
{
  if (!fs_ep_plain_may(c, ev->events) || fs_ep_bell(ep) < 0)
    return -EAGAIN;
  fs_lock(&c->lock);
  int rc = fs_ep_plain_add_locked(ep, epfd, fd, c, ev);
  fs_unlock(&c->lock);
  return rc;
}

/* An epoll_ctl that a plain registration answers without the set's lock:
 * ADD, MOD and DEL of one (under c->lock, which a conversion takes to read
 * it), or -EAGAIN for the full path.  Event loops ADD, MOD and DEL at every
 * request. */
static int fs_ep_plain_fast(struct fs_ep *ep, int epfd, int op, int fd, struct fs_conn *c, struct epoll_event *ev)
{
  if (op == EPOLL_CTL_ADD) {
    if (fs_ep_listener(c))
      return FS_REAL(epoll_ctl)(epfd, EPOLL_CTL_ADD, fd, ev) < 0 ? -errno : 0;
    if (!fs_ep_plain_may(c, ev->events) || __atomic_load_n(&ep->bell, __ATOMIC_ACQUIRE) < 0 ||
        __atomic_load_n(&ep->parked, __ATOMIC_ACQUIRE))
      return -EAGAIN;
  } else if ((op != EPOLL_CTL_MOD && op != EPOLL_CTL_DEL) || __atomic_load_n(&c->ep_plain, __ATOMIC_ACQUIRE) != ep ||
             (op == EPOLL_CTL_MOD && (ev->events & (EPOLLONESHOT | EPOLLEXCLUSIVE)))) {
    return -EAGAIN;
  }
  int rc = -EAGAIN;
  fs_lock(&c->lock);
  if (op == EPOLL_CTL_ADD) {
    rc = fs_ep_plain_add_locked(ep, epfd, fd, c, ev);
  } else if (c->ep_plain == ep && c->ep_plain_fd == fd) {
    /* A level-triggered MOD that changes nothing changes nothing in the
     * kernel either (what is ready stays reported): event loops (wrk's ae)
     * MOD the same mask twice per connection. */
    if (op == EPOLL_CTL_MOD && ev->events == c->ep_plain_events && ev->data.u64 == c->ep_plain_data &&
        !(ev->events & EPOLLET))
      rc = 0;
    else
      rc = FS_REAL(epoll_ctl)(epfd, op, fd, ev) < 0 ? -errno : 0;
    if (op == EPOLL_CTL_DEL) {
      c->ep_plain = NULL;
    } else if (rc == 0) {
      c->ep_plain_events = ev->events;
      c->ep_plain_data = ev->data.u64;
    }
  }
  fs_unlock(&c->lock);
  return rc;
}

/* c's plain registration in ep becomes an entry (ep->lock held): it may
 * carry fabric bytes from now on.  A registration the kernel no longer has
 * (the fd closed) is dropped. */
void fs_ep_plain_convert(struct fs_ep *ep, struct fs_conn *c)
{
  if (__atomic_load_n(&c->ep_plain, __ATOMIC_ACQUIRE) != ep)
    return;
  fs_lock(&c->lock);
  bool mine = c->ep_plain == ep;
  int fd = c->ep_plain_fd;
  uint32_t events = c->ep_plain_events;
  epoll_data_t data = { .u64 = c->ep_plain_data };
  if (mine)
    c->ep_plain = NULL;
  fs_unlock(&c->lock);
  struct fs_ep **s = fs_ep_slot(ep->epfd, false); /* there: ep was in it */
  if (mine && s && __atomic_load_n(s, __ATOMIC_ACQUIRE) == ep) /* not a closed set */
    (void)fs_ep_make(ep, ep->epfd, fd, c, events, data, EPOLL_CTL_MOD);
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
  if (op != EPOLL_CTL_DEL)
    fs_hold_use(c);
  int rc = fs_ep_plain_fast(ep, epfd, op, fd, c, ev);
  if (rc != -EAGAIN) {
    fs_conn_put(c);
    return rc;
  }
  rc = 0;
  pthread_mutex_lock(&ep->lock);
  /* A plain registration's MOD to ONESHOT or EXCLUSIVE: an entry takes it. */
  if (op == EPOLL_CTL_MOD)
    fs_ep_plain_convert(ep, c);
  struct fs_ep_ent *e = fs_ep_find(ep, c, fd, false);
  switch (op) {
  case EPOLL_CTL_ADD: {
    if (e) {
      rc = -EEXIST;
      break;
    }
    if (ep->parked && (rc = fs_ep_revive(ep, epfd, fd, c, ev)) != -ENOENT)
      break;
    rc = fs_ep_plain_add(ep, epfd, fd, c, ev);
    if (rc == -EAGAIN)
      rc = fs_ep_make(ep, epfd, fd, c, ev->events, ev->data, EPOLL_CTL_ADD);
    break;
  }
  case EPOLL_CTL_MOD:
    if (!e) {
      rc = fs_ep_not_in(ep, c, fd) ? -ENOENT : FS_REAL(epoll_ctl)(epfd, op, fd, ev) < 0 ? -errno : 0;
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
      rc = fs_ep_not_in(ep, c, fd) ? -ENOENT : FS_REAL(epoll_ctl)(epfd, op, fd, ev) < 0 ? -errno : 0;
      break;
    }
    fs_ep_list_del(&ep->ents, e);
    /* Event loops (ae, libevent) DEL and re-ADD at every request.  With tx
     * on a fabric the TCP fd's kernel mask (IN, RDHUP) hears nothing until
     * the end, so a level-triggered one stays in the kernel set while
     * parked: the DEL and the re-ADD cost no system call. */
    if ((e->wake_reg || e->door_reg) && fs_cutover_chan(c) && c->tx_flow == FS_FLOW_FABRIC && e->out_masked &&
        !(e->kmask & (EPOLLOUT | EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE))) {
      e->tcp_parked = true;
      rc = 0;
    } else {
      rc = FS_REAL(epoll_ctl)(epfd, EPOLL_CTL_DEL, fd, NULL) < 0 ? -errno : 0;
    }
    if (rc == 0 && (e->wake_reg || e->door_reg))
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
  struct fs_ep **s = fs_ep_slot(epfd, false);
  if (s == NULL || __atomic_load_n(s, __ATOMIC_RELAXED) == NULL)
    return;
  struct fs_ep *ep = __atomic_exchange_n(s, NULL, __ATOMIC_ACQ_REL);
  if (!ep)
    return;
  pthread_mutex_lock(&ep->lock);
  struct fs_ep_ent *lists[2] = { ep->ents, ep->parked };
  ep->ents = ep->parked = NULL;
  for (int l = 0; l < 2; l++)
    for (struct fs_ep_ent *e = lists[l], *n; e; e = n) {
      n = e->next;
      ep->nwake -= e->wake_reg + e->door_reg;
      e->wake_reg = e->door_reg = e->tcp_parked = false; /* the kernel set dies with the fd */
      e->wait_fd = -1;
      fs_ep_unlink(e);
    }
  if (ep->bell >= 0) {
    int own = fs_ep_bell_take(ep); /* -1: the set's door holds its eventfd */
    if (own >= 0)
      fs_fdreg_close(own);
    fs_ep_ent_free(ep->bell_ent); /* its tag reads as stale from now on */
    ep->bell_ent = NULL;
  }
  fs_ep_door_close(ep);
  pthread_mutex_unlock(&ep->lock);
  fs_ep_pend_drop(ep, NULL); /* no entry is left to queue a connection */
  /* ep itself is not freed: a thread may still be in epoll_wait on it. */
}

/* Fabric readiness of an entry, translated to the application's mask. */
