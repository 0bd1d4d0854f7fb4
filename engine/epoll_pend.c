/* The set's bell queue (engine/epoll.h, `pend`): connections whose wake fd
 * was made while some set held them, waiting for that set's next pass to
 * register it.  Each queued connection is referenced; a connection that
 * closes leaves every queue at once (fs_ep_pend_drop): queued by a
 * rendezvous that ran after the application's last epoll_wait, it kept its
 * wake eventfd open until the set's next pass or close, which an event
 * loop that had stopped never made (nbconnect: one eventfd left in about
 * one run in seventy at upgrade=0). */
#include <pthread.h>
#include <stdlib.h>

#include "engine/epoll.h"
#include "engine/ready.h"
#include "engine/wake.h"
#include "fabric/chan.h"

/* Queue c on ep's bell and ring it (c->lock held). */
void fs_ep_pend_push(struct fs_ep *ep, struct fs_conn *c)
{
  int bell = __atomic_load_n(&ep->bell, __ATOMIC_ACQUIRE);
  if (bell < 0)
    return; /* its entries registered the wake fd themselves */
  pthread_mutex_lock(&ep->pend_lock);
  if (ep->npend == ep->pend_cap) {
    int cap = ep->pend_cap ? 2 * ep->pend_cap : 16;
    struct fs_conn **p = realloc(ep->pend, (size_t)cap * sizeof *p);
    if (p) {
      ep->pend = p;
      ep->pend_cap = cap;
    }
  }
  if (ep->npend < ep->pend_cap) {
    fs_conn_get(c);
    ep->pend[ep->npend] = c;
    __atomic_store_n(&ep->npend, ep->npend + 1, __ATOMIC_RELEASE);
  } /* else (no memory): the 20 ms safety net is all that is left */
  pthread_mutex_unlock(&ep->pend_lock);
  fs_chan_efd_write(bell);
}

void fs_ready_epoll_wake_made(struct fs_conn *c)
{
  fs_lock(&c->lock);
  for (struct fs_ep_ent *e = c->ep_ents; e; e = e->cnext)
    fs_ep_pend_push(e->ep, c); /* never freed; e stays in c's list while we hold c->lock */
  if (c->ep_plain) /* a plain registration becomes an entry there */
    fs_ep_pend_push(c->ep_plain, c);
  fs_unlock(&c->lock);
}

/* The whole queue, taken out of ep (*n entries, each referenced; NULL if
 * none): the caller works on it unlocked, then frees it. */
static struct fs_conn **fs_ep_pend_take(struct fs_ep *ep, int *n)
{
  *n = 0;
  if (__atomic_load_n(&ep->npend, __ATOMIC_ACQUIRE) == 0)
    return NULL;
  pthread_mutex_lock(&ep->pend_lock);
  struct fs_conn **pend = ep->pend;
  *n = ep->npend;
  ep->pend = NULL;
  ep->npend = ep->pend_cap = 0;
  pthread_mutex_unlock(&ep->pend_lock);
  return pend;
}

/* Register the wake fds of the connections queued on ep's bell in the
 * kernel set, and look at their entries (ep->lock held). */
void fs_ep_pend_run(struct fs_ep *ep)
{
  int n;
  struct fs_conn **pend = fs_ep_pend_take(ep, &n);
  for (int i = 0; i < n; i++) {
    struct fs_conn *c = pend[i];
    fs_ep_plain_convert(ep, c);
    fs_lock(&c->lock);
    int wfd = fs_wake_fd_own(c);
    bool door = __atomic_load_n(&c->door, __ATOMIC_ACQUIRE) != NULL;
    for (struct fs_ep_ent *e = c->ep_ents; e; e = e->cnext) {
      if (e->ep != ep || !e->alive || e->parked)
        continue;
      if (door) { /* its door rang, or is new: look at it */
        fs_ep_reg_conn(ep, e);
        fs_ep_recheck_add(ep, e);
        continue;
      }
      if (e->wake_reg || wfd < 0)
        continue;
      fs_ep_reg_wake(ep, e, wfd);
      fs_ep_recheck_add(ep, e);
    }
    fs_unlock(&c->lock);
    fs_conn_put(c);
  }
  free(pend);
}

/* Take c (NULL: every connection) out of ep's queue, dropping the queue's
 * references. */
void fs_ep_pend_drop(struct fs_ep *ep, struct fs_conn *c)
{
  if (!c) {
    int n;
    struct fs_conn **all = fs_ep_pend_take(ep, &n);
    for (int i = 0; i < n; i++)
      fs_conn_put(all[i]);
    free(all);
    return;
  }
  if (__atomic_load_n(&ep->npend, __ATOMIC_ACQUIRE) == 0)
    return;
  int kept = 0, drop = 0;
  pthread_mutex_lock(&ep->pend_lock);
  for (int i = 0; i < ep->npend; i++) {
    if (ep->pend[i] == c)
      drop++;
    else
      ep->pend[kept++] = ep->pend[i];
  }
  __atomic_store_n(&ep->npend, kept, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&ep->pend_lock);
  while (drop-- > 0)
    fs_conn_put(c);
}
