/* Doors (engine/door.h), epoll sets' and the process's: the offer at the
 * rendezvous, the kernel registrations, and handing a rung connection to
 * its waiters. */
#include <errno.h>
#include <pthread.h>

#include "base/log.h"
#include "base/real.h"
#include "engine/door.h"
#include "engine/epoll.h"
#include "engine/ready.h"
#include "engine/wake.h"
#include "fabric/chan.h"
#include "policy/policy.h"

static void fs_door_deliver(void *arg, struct fs_conn *c);

/* t made d's tag in ep. */
static void fs_ep_door_tag(struct fs_ep *ep, struct fs_door *d, struct fs_ep_ent *t)
{
  t->magic = FS_EP_MAGIC;
  t->ep = ep;
  t->is_door = t->alive = true;
  t->door = d;
  t->wait_fd = -1;
}

/* Another set's door's eventfd into ep's kernel set under tag t (ep->lock
 * held; ep's own door is its bell, there already).  Edge-triggered: every
 * drainer reads it, and an edge is all a sleeper in the set needs. */
static int fs_ep_door_add(struct fs_ep *ep, struct fs_door *d, struct fs_ep_ent *t)
{
  fs_ep_door_tag(ep, d, t);
  struct epoll_event kev = { .events = EPOLLIN | EPOLLET, .data.u64 = (uint64_t)(uintptr_t)t };
  int saved = errno;
  int rc = FS_REAL(epoll_ctl)(ep->epfd, EPOLL_CTL_ADD, d->efd, &kev) < 0 ? -errno : 0;
  errno = saved;
  return rc == -EEXIST ? 0 : rc;
}

/* ep's own door, made on first need (ep->door_lock held; not ep->lock,
 * see engine/epoll.h): NULL on failure. */
static struct fs_door *fs_ep_door_own(struct fs_ep *ep)
{
  if (ep->door)
    return ep->door;
  /* A set being closed makes none (its close takes the bell under
   * door_lock: engine/epoll.c); deliveries from other threads go through
   * the set's bell, which it must have. */
  int bell = __atomic_load_n(&ep->bell, __ATOMIC_ACQUIRE);
  if (fs_ep_get(ep->epfd, false) != ep || bell < 0)
    return NULL;
  struct fs_door *d;
  struct fs_ep_ent *t = fs_ep_ent_new();
  if (!t)
    return NULL;
  /* The bell's eventfd is the door's: one descriptor less per set.  It
   * is in the kernel set already (the bell's tag, edge-triggered), so a
   * ring comes up as the bell, whose pass drains the door too
   * (fs_ep_door_of_bell); t is the door's tag for that pass, never in the
   * kernel set.  The door holds the eventfd from now on: it closes it
   * when it goes, after the set if connections still hold it. */
  if (fs_door_new_on(bell, &d) < 0) {
    fs_ep_ent_free(t);
    return NULL;
  }
  fs_wake_on_door(fs_ready_door_kick);
  fs_door_on_deliver(fs_door_deliver);
  fs_ep_door_tag(ep, d, t);
  ep->door_ent = t;
  __atomic_store_n(&ep->door, d, __ATOMIC_RELEASE);
  return d;
}

void fs_ep_reg_conn(struct fs_ep *ep, struct fs_ep_ent *e)
{
  /* Both where it has both: a wake fd beside a door is written by our
   * own drains (for a blocking call or a poll), or by a fabric that took
   * the connection after the shm rendezvous offered its door and failed. */
  int wfd = fs_wake_fd_own(e->c); /* never a lease: it goes back to the pool */
  if (wfd >= 0 && !e->wake_reg && !e->parked)
    fs_ep_reg_wake(ep, e, wfd);
  struct fs_door *d = __atomic_load_n(&e->c->door, __ATOMIC_ACQUIRE);
  if (!d || e->door_reg || e->parked)
    return;
  bool in = __atomic_load_n(&ep->door, __ATOMIC_ACQUIRE) == d;
  for (struct fs_ep_ent *t = ep->doors; t && !in; t = t->next)
    in = t->door == d;
  if (!in) {
    /* Another set's door (or ours from before a close of the set that
     * made it): in our kernel set too, held while we are. */
    struct fs_ep_ent *t = fs_ep_bell(ep) == 0 ? fs_ep_ent_new() : NULL;
    if (t && fs_ep_door_add(ep, d, t) == 0) {
      fs_door_get(d);
      t->next = ep->doors;
      ep->doors = t;
      in = true;
    } else if (t) {
      fs_ep_ent_free(t);
    }
  }
  if (in) {
    e->door_reg = true;
    ep->nwake++;
  } else {
    ep->any_fabric = true; /* the safety net alone */
  }
}

/* ---- delivery ----------------------------------------------------------- */

/* Entries of the set whose epoll_wait drains a door: reported by that
 * very call (a trip through the re-check list cost it one more kernel
 * call per wake). */
struct fs_door_here {
  struct fs_ep *ep;
  struct fs_ep_ent **got;
  int n, max;
};

/* c rang its door: every waiter of ours looks at it.  Entries of the set
 * draining it (arg: a struct fs_door_here whose set's lock the caller
 * holds; NULL: none) are handed back to it, other sets' go through their
 * bells, blocking calls and polls through c's local wake fd. */
static void fs_door_deliver(void *arg, struct fs_conn *c)
{
  struct fs_door_here *h = arg;
  struct fs_ep *ep = h ? h->ep : NULL;
  fs_lock(&c->lock);
  for (struct fs_ep_ent *e = c->ep_ents; e; e = e->cnext) {
    if (!e->alive || e->parked)
      continue;
    if (e->ep != ep)
      fs_ep_pend_push(e->ep, c);
    else if (h->n < h->max)
      h->got[h->n++] = e; /* lives while the caller holds ep->lock */
    else
      fs_ep_recheck_add(ep, e);
  }
  if (c->ep_plain)
    fs_ep_pend_push(c->ep_plain, c);
  bool others = c->pollers > fs_ready_polling_here(c) || __atomic_load_n(&c->rx_sleeping, __ATOMIC_RELAXED) ||
                __atomic_load_n(&c->tx_sleeping, __ATOMIC_RELAXED);
  int wfd = c->wake_fd;
  fs_unlock(&c->lock);
  if (others && wfd >= 0)
    fs_chan_efd_write(wfd);
}

int fs_ep_bell_take(struct fs_ep *ep)
{
  pthread_mutex_lock(&ep->door_lock);
  int bell = ep->bell;
  bool door_has_it = ep->door && ep->door->efd == bell;
  __atomic_store_n(&ep->bell, -1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&ep->door_lock);
  return door_has_it ? -1 : bell;
}

struct fs_ep_ent *fs_ep_door_of_bell(struct fs_ep *ep)
{
  struct fs_door *d = __atomic_load_n(&ep->door, __ATOMIC_ACQUIRE);
  return d && d->efd == ep->bell ? ep->door_ent : NULL; /* door_ent: stored before door */
}

int fs_ep_door_event(struct fs_ep *ep, struct fs_ep_ent *t, struct fs_ep_ent **got, int max)
{
  struct fs_door_here h = { ep, got, 0, max };
  if (fs_door_mine(t->door)) {
    (void)fs_door_drain(t->door, true, fs_door_deliver, &h); /* an EPOLLET registration */
    return h.n;
  }
  /* Another process's (a fork child's set holding a connection its parent
   * upgraded): not ours to drain.  Its edge says one of its connections
   * may have news: look at this set's (rare: a walk), and clear `rung` so
   * that the next ring edges again (engine/door.h, fs_door_watch). */
  __atomic_store_n(&t->door->page->rung, 0, __ATOMIC_SEQ_CST);
  for (struct fs_ep_ent *e = ep->ents; e; e = e->next)
    if (e->alive && !e->parked && __atomic_load_n(&e->c->door, __ATOMIC_ACQUIRE) == t->door)
      fs_ep_recheck_add(ep, e);
  return 0;
}

void fs_ready_door_kick(struct fs_conn *c)
{
  fs_door_deliver(NULL, c);
}

void fs_ep_door_close(struct fs_ep *ep)
{
  pthread_mutex_lock(&ep->door_lock);
  if (ep->door_ent) {
    fs_ep_ent_free(ep->door_ent); /* its tag reads as stale from now on */
    ep->door_ent = NULL;
  }
  fs_door_put(ep->door);
  __atomic_store_n(&ep->door, NULL, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&ep->door_lock);
  for (struct fs_ep_ent *t = ep->doors, *n; t; t = n) {
    n = t->next;
    fs_door_put(t->door);
    fs_ep_ent_free(t);
  }
  ep->doors = NULL;
}

/* ---- the offer ---------------------------------------------------------- */

/* Where c's door is: the one set it is in, if it is in exactly one (as an
 * entry or as a plain registration), or FS_DOOR_PROC, the process's door,
 * if it is in none; NULL: none (it has a wake fd, or is in several sets).
 * c->lock held. */
#define FS_DOOR_PROC ((struct fs_ep *)1)
static struct fs_ep *fs_door_set_of(struct fs_conn *c)
{
  if (c->wake_fd >= 0 || c->chan || c->door)
    return NULL;
  struct fs_ep_ent *e = c->ep_ents;
  if (c->ep_plain)
    return e ? NULL : c->ep_plain;
  if (!e)
    return FS_DOOR_PROC;
  if (e->cnext || !e->alive || e->parked)
    return NULL;
  return e->ep;
}

int fs_ready_door_offer(struct fs_conn *c, int *efd, int *memfd, uint32_t *slot)
{
  struct fs_door *d = __atomic_load_n(&c->door, __ATOMIC_ACQUIRE);
  if (!d) {
    /* No fd budget here (a door costs no descriptor per connection): the
     * rendezvous asks fs_fdreg_budget_ok if the peer sends an eventfd. */
    if (!fs_policy_doorbell())
      return -1;
    fs_lock(&c->lock);
    struct fs_ep *ep = fs_door_set_of(c);
    fs_unlock(&c->lock);
    if (!ep)
      return -1;
    bool home = false;
    if (ep == FS_DOOR_PROC) {
      /* Before either door is made (a set's are hooked in fs_ep_door_own). */
      fs_wake_on_door(fs_ready_door_kick);
      fs_door_on_deliver(fs_door_deliver);
      d = fs_door_home_door(c, c->fd);
      home = d != NULL;
      if (!d)
        d = fs_door_proc_get();
    } else {
      pthread_mutex_lock(&ep->door_lock);
      d = fs_ep_door_own(ep);
      if (d)
        fs_door_get(d);
      pthread_mutex_unlock(&ep->door_lock);
    }
    if (!d)
      return -1;
    uint32_t s;
    fs_lock(&c->lock);
    bool ok = fs_door_set_of(c) == ep && fs_door_slot_get(d, c, &s) == 0;
    if (ok) {
      c->door_slot = s;
      __atomic_store_n(&c->door, d, __ATOMIC_RELEASE); /* the reference goes to c */
    }
    fs_unlock(&c->lock);
    if (!ok) {
      fs_door_put(d);
      return -1;
    }
    fs_log(FS_LOG_DEBUG, "fd %d: its peer rings slot %u of its %s door", c->fd, s,
           home ? "thread's" : ep == FS_DOOR_PROC ? "process's" : "epoll set's");
  }
  *efd = d->efd;
  *memfd = d->memfd;
  *slot = c->door_slot;
  /* Its sets look at it (a plain registration becomes an entry, which
   * takes the door into the kernel set), as for a new wake fd. */
  fs_door_deliver(NULL, c);
  return 0;
}

void fs_ready_door_release(struct fs_conn *c)
{
  fs_door_home_forget(c);
  struct fs_door *d = c->door;
  if (!d)
    return;
  c->door = NULL;
  fs_door_slot_put(d, c->door_slot);
  fs_door_put(d);
}
