#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/clock.h"
#include "base/log.h"
#include "engine/hold.h"
#include "engine/batch.h"
#include "engine/cutover.h"
#include "engine/door.h"
#include "engine/ready.h"
#include "engine/sock.h"
#include "engine/sockio.h"
#include "engine/fdtab.h"
#include "engine/wake.h"
#include "base/real.h"

/* ---- poll -------------------------------------------------------------- */

/* A poll arms a connection's rings (the peer's next publish wakes it) before
 * it sleeps; once it returns, the interest is over.  Left set, a message the
 * peer sent while the poller worked cost the peer an eventfd write and the
 * poller a read (see docs/design.md, poll).  The interest is withdrawn only
 * when no other waiter of ours may own it: another poll (counted here, under
 * the lock), an epoll set or a blocking call.  Should one of those arm it
 * just as we withdraw, its sleep is cut short by the bound every wait has. */
#define FS_READY_ARMED 1 /* fs_ready_poll_armed counted it */
#define FS_READY_BLIND 2 /* asleep on its TCP socket alone (engine/wake.h) */
#define FS_READY_DOOR 4  /* entered its door (fs_wake_door_enter) */

static void fs_ready_poll_armed(struct fs_conn *c, uint8_t *st)
{
  *st |= FS_READY_ARMED;
  fs_lock(&c->lock);
  c->pollers++;
  fs_unlock(&c->lock);
}

static void fs_ready_poll_disarm(struct fs_conn *c, short events)
{
  fs_lock(&c->lock);
  struct fs_chan *ch = __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE); /* lives as long as c */
  if (--c->pollers == 0 && ch && !c->ep_ents && !__atomic_load_n(&c->rx_sleeping, __ATOMIC_RELAXED) &&
      !__atomic_load_n(&c->tx_sleeping, __ATOMIC_RELAXED))
    fs_chan_disarm(ch, events & POLLIN, events & POLLOUT);
  fs_unlock(&c->lock);
}

/* A poll draining a door: its own connections, which it looks at right
 * after.  A delivery to one of them writes its wake fd only for other
 * waiters: for this poll alone the write cost a system call, and the
 * eventfd left readable cost its next poll a return and a read. */
static __thread struct {
  struct fs_conn *const *cs;
  const uint8_t *st;
  nfds_t n;
} fs_ready_self __attribute__((tls_model("initial-exec")));

unsigned fs_ready_polling_here(const struct fs_conn *c)
{
  unsigned k = 0;
  for (nfds_t i = 0; i < fs_ready_self.n; i++)
    k += fs_ready_self.cs[i] == c && (fs_ready_self.st[i] & FS_READY_ARMED);
  return k;
}

int fs_ready_poll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask)
{
  fs_batch_flush();
  struct pollfd kst[64];
  struct fs_conn *cst[32];
  size_t cap = (size_t)n * 3; /* the fd, its wake eventfd, its fabric's event fd */
  struct pollfd *k = cap <= 64 ? kst : malloc(cap * sizeof *k);
  struct fs_conn **cs = n <= 32 ? cst : calloc(n, sizeof *cs);
  uint8_t ast[32] = { 0 }, *st = n <= 32 ? ast : calloc(n, sizeof *st);
  if (!k || !cs || !st) {
    if (k != kst)
      free(k);
    if (cs != cst)
      free(cs);
    if (st != ast)
      free(st);
    return -ENOMEM;
  }
  nfds_t kn = n, nw = 0;
  int fabric = 0;
  /* Wake eventfds go at n.., fabric event fds (rdma completion channels)
   * meanwhile at 2n.., then right after the wake fds: they are cleared by
   * the fabric's arm, never by read (see the drain below). */
  struct pollfd *kw = k + 2 * (size_t)n;
  for (nfds_t i = 0; i < n; i++) {
    k[i] = fds[i];
    k[i].revents = 0;
    cs[i] = fds[i].fd >= 0 ? fs_fdtab_get(fds[i].fd) : NULL;
    struct fs_conn *c = cs[i];
    if (!c)
      continue;
    fs_hold_use(c);
    /* Connected shows as POLLOUT, seen below when it is asked for: no
     * getpeername before every poll of a connect in progress (curl). */
    if (c->connecting && !(fds[i].events & (POLLOUT | POLLWRNORM)))
      fs_sock_check_connected(c, fds[i].fd, false);
    struct fs_chan *ch = fs_cutover_chan(c);
    /* No wake fd yet to sleep on: the attach of a channel that comes
     * meanwhile waits for us (engine/wake.h). */
    if (!ch && fs_wake_none(c) && (fds[i].events & (POLLIN | POLLRDNORM))) {
      fs_door_home_mark_blind(c); /* its peer will ring this thread's door */
      if (fs_wake_blind_enter(c))
        st[i] |= FS_READY_BLIND;
      else
        ch = fs_cutover_chan(c); /* attached just now: its wake fd is there */
    }
    if (ch) {
      fs_cutover_service(c, fds[i].fd);
      fabric++;
      if (c->tx_flow == FS_FLOW_FABRIC)
        k[i].events &= (short)~(POLLOUT | POLLWRNORM);
      k[i].events |= POLLRDHUP;
      if (ch->wait_fd >= 0)
        kw[nw++] = (struct pollfd){ ch->wait_fd, POLLIN, 0 };
      /* The door goes with the fabric fds (a door's connection has no
       * wait fd of its own). */
      bool entered;
      struct fs_door *d = fs_wake_door_enter(c, &entered);
      if (entered)
        st[i] |= FS_READY_DOOR;
      int dfd = d && ch->wait_fd < 0 ? fs_wake_door_fd(d) : -1;
      bool dup = false;
      for (nfds_t j = 0; j < nw && dfd >= 0 && !dup; j++)
        dup = kw[j].fd == dfd;
      if (dfd >= 0 && !dup)
        kw[nw++] = (struct pollfd){ dfd, POLLIN, 0 };
    }
    if (c->wake_fd >= 0 && (ch || !c->no_upgrade)) {
      k[kn].fd = c->wake_fd;
      k[kn].events = POLLIN;
      k[kn].revents = 0;
      kn++;
    }
  }
  nfds_t kwake = kn;
  memmove(k + kn, kw, nw * sizeof *k);
  kn += nw;
  uint64_t deadline = fs_clock_deadline(ts);
  int rc;
  for (int pass = 0;; pass++) {
    /* What the fabrics say without asking the kernel; arm on the second look. */
    int pre = 0;
    for (int arm = 0; arm < 2 && pre == 0 && fabric; arm++)
      for (nfds_t i = 0; i < n; i++) {
        struct fs_chan *ch = cs[i] ? fs_cutover_chan(cs[i]) : NULL;
        if (!ch)
          continue;
        if (arm && !(st[i] & FS_READY_ARMED))
          fs_ready_poll_armed(cs[i], &st[i]);
        if (fs_sockio_ready(cs[i], ch, fds[i].events, 0, arm) & (fds[i].events | POLLHUP | POLLERR))
          pre++;
      }
    struct timespec zero = { 0, 0 }, left;
    /* A pre-check that keeps disagreeing with the final answer must not
     * turn into a busy loop: after a few passes, sleep in the kernel. */
    const struct timespec *t = pre && pass < 8 ? &zero : fs_clock_left(ts, deadline, &left);
    /* With fabric connections, sleep in bounded slices (see fs_wait_sleep:
     * a wake fd drained by another thread must not cost a hang). */
    struct timespec slice = { 0, 20 * 1000000L };
    if (fabric && (!t || t->tv_sec > 0 || t->tv_nsec > slice.tv_nsec))
      t = &slice;
    rc = FS_REAL(ppoll)(k, kn, t, mask);
    if (rc < 0) {
      rc = -errno;
      break;
    }
    for (nfds_t j = n; j < kwake; j++)
      if (k[j].revents & POLLIN) {
        uint64_t v;
        (void)FS_REAL(read)(k[j].fd, &v, sizeof v);
      }
    for (nfds_t j = kwake; j < kn; j++)
      if ((k[j].revents & POLLIN) && fs_door_watch_is(k[j].fd)) {
        fs_door_fd_woken(NULL, k[j].fd);
      } else if ((k[j].revents & POLLIN) && fs_door_live()) {
        struct fs_door *d = fs_door_by_efd(k[j].fd);
        if (d) {
          /* (Past a few fds, a look through them per delivery costs more
           * than the write.) */
          if (n <= 8)
            fs_ready_self.cs = cs, fs_ready_self.st = st, fs_ready_self.n = n;
          fs_door_woken(d);
          fs_ready_self.n = 0;
          fs_door_put(d);
        }
      }
    rc = 0;
    for (nfds_t i = 0; i < n; i++) {
      short r = k[i].revents;
      if (cs[i] && __builtin_expect(cs[i]->connecting, 0) && (r & (POLLOUT | POLLWRNORM)) &&
          !(r & (POLLERR | POLLHUP)))
        fs_sock_check_connected(cs[i], fds[i].fd, true);
      struct fs_chan *ch = cs[i] ? fs_cutover_chan(cs[i]) : NULL;
      if (ch)
        r = (short)(fs_sockio_ready(cs[i], ch, fds[i].events, k[i].revents, false) &
                    (fds[i].events | POLLHUP | POLLERR | POLLNVAL));
      fds[i].revents = r;
      rc += r != 0;
    }
    /* Woken only by a wake fd with nothing to report (e.g. an upgrade
     * finished): a connection may have moved to a fabric; look again. */
    if (rc != 0 || (ts && fs_clock_ns() >= deadline))
      break;
    fabric = 0;
    for (nfds_t i = 0; i < n; i++)
      if (cs[i] && fs_cutover_chan(cs[i])) {
        fabric++;
        k[i].events = fds[i].events | POLLRDHUP;
        if (cs[i]->tx_flow == FS_FLOW_FABRIC)
          k[i].events &= (short)~(POLLOUT | POLLWRNORM);
      }
  }
  for (nfds_t i = 0; i < n; i++)
    if (cs[i]) {
      if (st[i] & FS_READY_ARMED)
        fs_ready_poll_disarm(cs[i], fds[i].events);
      if (st[i] & FS_READY_BLIND)
        fs_wake_blind_leave(cs[i]);
      if (st[i] & FS_READY_DOOR)
        fs_wake_door_leave(cs[i]);
      fs_conn_put(cs[i]);
    }
  if (k != kst)
    free(k);
  if (cs != cst)
    free(cs);
  if (st != ast)
    free(st);
  return rc;
}

/* ---- select ------------------------------------------------------------ */

bool fs_ready_select_tracked(int nfds, const fd_set *r, const fd_set *w, const fd_set *e)
{
  if (nfds > FD_SETSIZE)
    nfds = FD_SETSIZE;
  for (int fd = 0; fd < nfds; fd++)
    if (((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e))) && fs_fdtab_tracked(fd))
      return true;
  return false;
}

int fs_ready_select(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts, const sigset_t *mask)
{
  if (nfds < 0 || nfds > FD_SETSIZE)
    return -EINVAL;
  struct pollfd p[FD_SETSIZE];
  nfds_t n = 0;
  for (int fd = 0; fd < nfds; fd++) {
    short ev = 0;
    if (r && FD_ISSET(fd, r))
      ev |= POLLIN;
    if (w && FD_ISSET(fd, w))
      ev |= POLLOUT;
    if (e && FD_ISSET(fd, e))
      ev |= POLLPRI;
    if (ev) {
      p[n].fd = fd;
      p[n].events = ev;
      p[n].revents = 0;
      n++;
    }
  }
  int rc = fs_ready_poll(p, n, ts, mask);
  if (rc < 0)
    return rc;
  for (nfds_t i = 0; i < n; i++)
    if (p[i].revents & POLLNVAL)
      return -EBADF;
  if (r)
    FD_ZERO(r);
  if (w)
    FD_ZERO(w);
  if (e)
    FD_ZERO(e);
  int count = 0;
  for (nfds_t i = 0; i < n; i++) {
    short re = p[i].revents;
    if (r && (p[i].events & POLLIN) && (re & (POLLIN | POLLHUP | POLLERR))) {
      FD_SET(p[i].fd, r);
      count++;
    }
    if (w && (p[i].events & POLLOUT) && (re & (POLLOUT | POLLERR))) {
      FD_SET(p[i].fd, w);
      count++;
    }
    if (e && (p[i].events & POLLPRI) && (re & POLLPRI)) {
      FD_SET(p[i].fd, e);
      count++;
    }
  }
  return count;
}
