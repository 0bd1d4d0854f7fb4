/* The shm fabric's rendezvous.  See fabric/shm/rdv.h for the protocol.  It
 * runs on the engine's agent (fabric/fabric.h: every entry here holds the
 * agent lock).  Everything here uses FS_REAL() only. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <netinet/in.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/hot.h"
#include "base/fdreg.h"
#include "base/proc.h"
#include "base/clock.h"
#include "base/addr.h"
#include "base/log.h"
#include "base/real.h"
#include "base/reason.h"
#include "base/stat.h"
#include "fabric/diag.h"
#include "fabric/fabric.h"
#include "fabric/shm/rdv.h"
#include "fabric/shm/shm.h"

#include "fabric/shm/rdv_int.h"

struct fs_rdv_agent fs_rdv_a FS_HOT;

static bool fs_rdv_event(void *arg);

/* ---- item bookkeeping ------------------------------------------------- */

int fs_rdv_watch(struct fs_rdv_item *it)
{
  return fs_host->watch(it->ufd, fs_rdv_event, it);
}

/* A server-side handshake ended: listeners paused at the cap (their
 * clients queued in the unix backlog, within their own timeout) resume. */
static void fs_rdv_pend_done(void)
{
  fs_rdv_a.npend--;
  if (fs_rdv_a.npaused == 0 || fs_rdv_a.npend >= FS_RDV_MAX_PEND)
    return;
  for (struct fs_rdv_item *l = fs_rdv_a.items; l; l = l->next)
    if (l->kind == K_LISTENER && l->paused && !l->deadline && fs_rdv_watch(l) == 0) {
      l->paused = false;
      fs_rdv_a.npaused--;
    }
}

/* Unwatch listener l until a handshake ends (at the cap). */
static void fs_rdv_pause(struct fs_rdv_item *l)
{
  fs_host->unwatch(l->ufd);
  l->paused = true;
  fs_rdv_a.npaused++;
}

/* Listener l cannot afford a client (out of descriptors, or past the
 * budget).  Left readable and watched, the agent polled it again at once:
 * 100% of a CPU for as long as the process ran.  Only unwatched, it kept
 * its backlog, and each client's request in it holds what the client
 * passed, a dup of its TCP socket among them: a client that closed, or
 * died, left the server's connection established, and the server
 * waiting for an EOF that never came.  So it closes (the backlog and what
 * it holds go with it; clients find the name unserved and stay on TCP at
 * once) and serves its name again FS_RDV_SPENT_MS later (fs_rdv_tick). */
static void fs_rdv_rest(struct fs_rdv_item *l)
{
  fs_rdv_pause(l); /* (it was watched: its event brought us here) */
  fs_fdreg_close(l->ufd);
  l->ufd = -1;
  l->deadline = fs_clock_ns() + (uint64_t)FS_RDV_SPENT_MS * 1000000u;
}

/* Can the application spare what a rendezvous on listener l holds
 * (FS_RDV_FDS)?  any_fd: one of ours for the probe (fs_rdv_app_fds). */
static bool fs_rdv_affords(struct fs_rdv_item *l, int any_fd)
{
  return fs_fdreg_budget_ok(fs_rdv_app_fds(any_fd, l->c ? l->c->fd : -1), FS_RDV_FDS);
}

/* A rested listener serves its name again: true, or false if it cannot
 * yet (tried again later) or for good (*gone: the name is taken). */
static bool fs_rdv_unrest(struct fs_rdv_item *l, bool *gone)
{
  *gone = false;
  if (l->ufd < 0) {
    int ufd = fs_rdv_unix_socket();
    if (ufd < 0 || !fs_rdv_affords(l, ufd)) {
      if (ufd >= 0)
        FS_REAL(close)(ufd);
      return false;
    }
    if (fs_rdv_bind_name(ufd, l->name, l->namelen) < 0) {
      *gone = errno == EADDRINUSE;
      FS_REAL(close)(ufd);
      return false;
    }
    fs_fdreg_set(ufd, true);
    l->ufd = ufd;
  }
  if (fs_rdv_watch(l) < 0)
    return false; /* bound: watched at the next rest's end */
  l->paused = false;
  l->deadline = 0;
  fs_rdv_a.npaused--;
  return true;
}

void fs_rdv_drop(struct fs_rdv_item *it)
{
  struct fs_rdv_item **pp = &fs_rdv_a.items;
  while (*pp && *pp != it)
    pp = &(*pp)->next;
  if (*pp)
    *pp = it->next;
  if (it->kind == K_SRV)
    fs_rdv_pend_done();
  if (it->ufd >= 0) {
    fs_host->unwatch(it->ufd);
    fs_fdreg_close(it->ufd);
  }
  if (it->kind == K_SRV)
    fs_rdv_closefds(it->fds, 4);
  if (it->ch)
    fs_chan_detach(it->ch);
  if (it->c)
    fs_host->put(it->c);
  free(it);
}

/* ---- server side ------------------------------------------------------ */

/* A client is in the listener's backlog.  True if the listener paused (its
 * watch is gone).  At the cap it stops accepting rather than closing the
 * clients' connections: a burst (wrk -c1500) waits its turn instead of
 * staying on TCP with a false "protocol". */
static bool fs_rdv_srv_new(struct fs_rdv_item *l)
{
  if (fs_rdv_a.npend >= FS_RDV_MAX_PEND) {
    fs_rdv_pause(l);
    return true;
  }
  /* The application's descriptors first (base/fdreg.h): a rendezvous holds
   * up to FS_RDV_FDS of ours while it runs, at the lowest free numbers
   * until moved, and 100 client processes under ulimit -n 128 made the
   * server's own accept() fail with EMFILE now and then.  Past the budget
   * the client is told "resources" at once. */
  bool afford = fs_rdv_affords(l, l->ufd);
  int ufd = FS_FDREG_MAKE_HIGH(FS_REAL(accept4)(l->ufd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (ufd < 0) {
    int err = errno; /* out of fds or memory: nothing to answer with */
    if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
      fs_rdv_rest(l);
      return true;
    }
    return false;
  }
  if (!afford) {
    fs_rdv_refuse(ufd, FS_REASON_RESOURCES);
    return false;
  }
  struct fs_rdv_item *it = calloc(1, sizeof *it);
  if (!it) {
    FS_REAL(close)(ufd);
    return false;
  }
  it->kind = K_SRV;
  it->ufd = ufd;
  it->state = S_WAIT_REQ;
  it->fds[0] = it->fds[1] = it->fds[2] = it->fds[3] = -1;
  it->shared_listener = l->c ? l->c->listener_shared : false;
  it->deadline = fs_clock_ns() + (uint64_t)FS_RDV_HOLD_MS * 1000000u;
  it->next = fs_rdv_a.items;
  fs_proc_fork_work_add(FS_FORK_FABRIC);
  fs_rdv_a.items = it;
  fs_rdv_a.npend++;
  if (fs_rdv_watch(it) < 0)
    fs_rdv_drop(it);
  return false;
}

/* Try to match a held request to an accepted connection and answer it. */
static bool fs_rdv_srv_try(struct fs_rdv_item *it)
{
  struct fs_link *c = fs_host->find((struct sockaddr *)&it->tp, (struct sockaddr *)&it->tl);
  if (!c) {
    int all = fs_host->refuse_all();
    if (all) { /* this process takes no channel (io_uring): say why now */
      fs_rdv_reply(it->ufd, (uint32_t)all, -1);
      fs_rdv_drop(it);
      return true;
    }
    /* Accepted, but another process holds it (handed over: node cluster's
     * primary accepts, a worker serves): the client looks for that one.
     * Or accepted and closed already (a connection per request, upgrading
     * at once): it never will be found, and held to the deadline (2 s) a
     * connection rate's requests filled the FS_RDV_MAX_PEND slots, each
     * looked for on every tick, and nearly every later connection stayed
     * on TCP.  Answered at once now. */
    if (!it->shared_listener) { /* a netlink query and a table scan: every 50 ms at most */
      uint32_t ino;
      int pids[1];
      if (fs_diag_ended_look((struct sockaddr *)&it->tp, (struct sockaddr *)&it->tl, &it->look_ns, &ino)) {
        fs_rdv_reply(it->ufd, FS_REASON_CLOSED, -1);
        fs_rdv_drop(it);
        return true;
      }
      if (ino != 0 && fs_stat_holders(ino, pids, 1) > 0)
        it->shared_listener = true;
    }
    if (it->shared_listener) {
      fs_rdv_reply(it->ufd, FS_REASON_NOT_OWNER, -1);
      fs_rdv_drop(it);
      return true;
    }
    return false; /* hold until accept() or the deadline */
  }
  if (fs_host->hold(c)) {
    fs_host->put(c); /* not set up yet, or maybe about to be handed on */
    return false;
  }
  int status = fs_host->may_attach(c, it->uid);
  struct fs_chan *ch = NULL;
  struct fs_rdv_bell bell = { -1, -1, 0 };
  if (status == 0 && fs_host->bell(c, &bell.efd, &bell.memfd, &bell.slot) < 0)
    status = fs_host->wake(c);
  else if (status == 0 && it->fds[3] < 0 && !fs_fdreg_budget_ok(c->fd, 1))
    status = FS_REASON_RESOURCES; /* the client's eventfd would be one fd more */
  if (status == 0) {
    struct fs_shm_wake w = { it->fds[2], it->fds[3], it->slot, c->fd };
    int rc = fs_shm_attach(it->fds[1], c->wake_fd, &w, &ch);
    if (rc < 0)
      status = rc == -ENOMEM || rc == -EMFILE ? FS_REASON_RESOURCES : FS_REASON_PROTOCOL;
    it->fds[2] = w.efd; /* -1 where the channel took it */
    it->fds[3] = w.bell_memfd;
  }
  fs_rdv_closefds(it->fds, 4);
  /* Attach before the reply: a process that forks right after (sshd's
   * monitor, between the pre-auth child's exit and the session's fork)
   * then forks with the channel, as any upgraded connection, instead of
   * abandoning it on the ack and leaving the client on TCP for good.  Our
   * tx waits for the client's `attached` flag; if the client gives up
   * without attaching, both ends stay on TCP (reason rejected here). */
  if (status == 0 && fs_host->attach(c, ch) != 0) {
    fs_chan_detach(ch); /* closed or shared again since may_attach */
    ch = NULL;
    status = FS_REASON_NOT_OWNER; /* the client looks for the holder */
  }
  if (status != 0) {
    fs_log(FS_LOG_INFO, "rendezvous refused for fd %d: %s", c->fd, fs_reason_name(status));
    fs_host->refused(c, status); /* stat shows why on this end too */
    fs_rdv_reply(it->ufd, (uint32_t)status, -1);
    fs_host->put(c);
    fs_rdv_drop(it);
    return true;
  }
  fs_rdv_accept(it->ufd, c->wake_fd, &bell);
  it->c = c;
  it->state = S_WAIT_ACK;
  it->deadline = 0; /* wait for the ack or EOF, however long */
  return true;
}

static void fs_rdv_srv_event(struct fs_rdv_item *it)
{
  if (it->state == S_WAIT_ACK) {
    struct fs_rdv_ack ack;
    int nf, fds[1];
    ssize_t n = fs_rdv_recvfds(it->ufd, &ack, sizeof ack, fds, 0, &nf);
    if (n == -EAGAIN)
      return;
    /* We attached before replying (fs_rdv_srv_try): the ack, EOF or
     * garbage only ends the exchange; a client that never attaches leaves
     * both ends on TCP (fs_cutover_chan_known: rejected). */
    fs_rdv_drop(it);
    return;
  }
  if (it->state == S_HELD) { /* only EOF or garbage can come now */
    char b;
    int nf, fds[1];
    if (fs_rdv_recvfds(it->ufd, &b, 1, fds, 0, &nf) != -EAGAIN)
      fs_rdv_drop(it);
    return;
  }
  struct fs_rdv_req req = { 0 };
  int nf = 0;
  ssize_t n = fs_rdv_recvfds(it->ufd, &req, sizeof req, it->fds, 4, &nf);
  if (n == -EAGAIN)
    return;
  if ((n == 0 && nf == 0) || fs_rdv_who_answered(it->ufd, &req, n, nf)) { /* gave up before asking, or asked who */
    fs_rdv_drop(it);
    return;
  }
  int status = n == -EMFILE ? FS_REASON_RESOURCES : n < 0 ? FS_REASON_PROTOCOL : fs_rdv_check_req(&req, (size_t)n, nf);
  struct ucred cr;
  socklen_t cl = sizeof cr;
  socklen_t al = sizeof it->tl, pl = sizeof it->tp;
  int type = 0;
  socklen_t tl = sizeof type;
  if (status == 0 &&
      (FS_REAL(getsockopt)(it->ufd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 ||
       FS_REAL(getsockopt)(it->fds[0], SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_STREAM ||
       getsockname(it->fds[0], (struct sockaddr *)&it->tl, &al) < 0 ||
       getpeername(it->fds[0], (struct sockaddr *)&it->tp, &pl) < 0))
    status = FS_REASON_PROTOCOL;
  if (status != 0) {
    fs_log(FS_LOG_INFO, "rendezvous: bad request (%s)", fs_reason_name(status));
    fs_rdv_reply(it->ufd, (uint32_t)status, -1);
    fs_rdv_drop(it);
    return;
  }
  it->uid = cr.uid;
  it->slot = req.slot;
  /* The tcp dup proved the client's identity; we keep only its addresses. */
  fs_fdreg_close(it->fds[0]);
  it->fds[0] = -1;
  it->state = S_HELD;
  fs_rdv_srv_try(it);
}

/* ---- the agent's calls ------------------------------------------------ */

/* A unix socket of ours is readable.  True if items may have gone. */
static bool fs_rdv_event(void *arg)
{
  struct fs_rdv_item *it = arg;
  switch (it->kind) {
  case K_LISTENER:
    return fs_rdv_srv_new(it);
  case K_SRV:
    fs_rdv_srv_event(it);
    return true;
  case K_CLI:
    fs_rdv_cli_event(it);
    return true;
  case K_CLI_RETRY: /* never watched */
    return false;
  }
  return true;
}

static void fs_rdv_tick(void)
{
  uint64_t now = fs_clock_ns();
  struct fs_rdv_item *it = fs_rdv_a.items, *next;
  for (; it; it = next) {
    next = it->next;
    if (it->kind == K_LISTENER) { /* rested (out of fds): served again */
      bool gone = false;
      if (it->paused && it->deadline && now >= it->deadline && !fs_rdv_unrest(it, &gone)) {
        if (gone) {
          fs_log(FS_LOG_WARN, "rendezvous name %s taken while it rested (out of descriptors); connections its "
                 "peers must find by it stay on TCP", it->name + 1);
          fs_rdv_a.npaused--;
          fs_rdv_drop(it);
          next = fs_rdv_a.items; /* the list changed under us: start over */
          continue;
        }
        it->deadline = now + (uint64_t)FS_RDV_SPENT_MS * 1000000u;
      }
      continue;
    }
    /* Closed (or given up for good) while its rendezvous ran: let the
     * request go now, and the server with it (our socket's EOF), rather
     * than at the reply or the set-up bound, seconds later. */
    if ((it->kind == K_CLI || it->kind == K_CLI_RETRY) && !fs_host->may_upgrade(it->c)) {
      fs_host->failed(it->c, FS_REASON_CLOSED); /* an earlier reason stays */
      fs_rdv_drop(it);
      continue;
    }
    if (it->kind == K_SRV && it->state == S_HELD && fs_rdv_srv_try(it))
      continue;
    if (it->kind == K_CLI_RETRY && now >= it->deadline) {
      fs_rdv_cli_again(it, it->holder_only);
      next = fs_rdv_a.items; /* the list changed under us: start over (retries are few) */
      continue;
    }
    if (it->deadline && now >= it->deadline) {
      if (it->kind == K_CLI)
        fs_host->failed(it->c, FS_REASON_TIMEOUT);
      else if (it->kind == K_SRV && it->state == S_HELD)
        fs_rdv_reply(it->ufd, FS_REASON_TIMEOUT, -1);
      fs_rdv_drop(it);
    }
  }
}

static int fs_rdv_next_timeout(void)
{
  uint64_t now = fs_clock_ns(), best = 0;
  bool held = false;
  for (struct fs_rdv_item *it = fs_rdv_a.items; it; it = it->next)
    if (it->deadline) {
      held |= it->kind != K_LISTENER; /* a listener's: the end of its rest */
      if (!best || it->deadline < best)
        best = it->deadline;
    }
  if (!best)
    return -1;
  /* Held requests are also retried every few ms in case a wake was missed. */
  uint64_t ms = best > now ? (best - now) / 1000000u + 1 : 0;
  return held && ms > 5 ? 5 : (int)ms;
}

/* Bind and serve an abstract name, its socket high (base/fdreg.h); the new listener item, or NULL. */
static struct fs_rdv_item *fs_rdv_serve_name(const char *name, int n)
{
  int ufd = FS_FDREG_MAKE_NOW(FS_REAL(socket)(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (ufd < 0)
    return NULL;
  struct fs_rdv_item *it = NULL;
  if (fs_rdv_bind_name(ufd, name, n) < 0 || !(it = calloc(1, sizeof *it))) {
    int err = errno;
    fs_fdreg_close(ufd);
    errno = err;
    return NULL;
  }
  it->kind = K_LISTENER;
  it->ufd = ufd;
  it->namelen = n;
  memcpy(it->name, name, (size_t)n);
  if (fs_rdv_watch(it) < 0) {
    fs_fdreg_close(ufd);
    free(it);
    return NULL;
  }
  it->next = fs_rdv_a.items;
  fs_proc_fork_work_add(FS_FORK_FABRIC);
  fs_rdv_a.items = it;
  return it;
}

/* This process holds connections it may not have accepted from a listener
 * it serves (a prefork worker, a child forked after accept, a daemon whose
 * listening process is gone): serve its own name, found by clients through
 * the stat tables.  Once per process image. */
static bool fs_rdv_serve_proc(void)
{
  for (struct fs_rdv_item *it = fs_rdv_a.items; it; it = it->next)
    if (it->kind == K_LISTENER && it->proc)
      return true;
  char name[108];
  int n = fs_rdv_proc_name(name, sizeof name, (int)getpid());
  struct fs_rdv_item *it = fs_rdv_serve_name(name, n);
  if (!it) {
    fs_log(FS_LOG_WARN, "rendezvous name of process %d: %s; its connections that its peers must find by it "
           "stay on TCP (tried again at a later accept)", (int)getpid(), strerror(errno));
    return false;
  }
  it->proc = true;
  return true;
}

static bool fs_rdv_listen(struct fs_link *c, int fd)
{
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
    return false;
  struct sockaddr_un un = { .sun_family = AF_UNIX };
  int n = fs_rdv_name(un.sun_path, sizeof un.sun_path, (struct sockaddr *)&ss, fs_addr_is_any((struct sockaddr *)&ss));
  for (struct fs_rdv_item *it = fs_rdv_a.items; it; it = it->next)
    if (it->kind == K_LISTENER && !it->c && it->namelen == n && memcmp(it->name, un.sun_path, (size_t)n) == 0) {
      fs_host->get(c); /* adopt the orphan left by an earlier listener */
      it->c = c;
      return true;
    }
  struct fs_rdv_item *it = fs_rdv_serve_name(un.sun_path, n);
  if (!it) {
    /* (A listener shared since fork tries again while its listen()er,
     * or a sibling, serves it: fs_agent_take_names.) */
    fs_log(c->listener_shared ? FS_LOG_DEBUG : FS_LOG_INFO, "rendezvous name for port %u taken (%s); "
           "connections accepted here are found by this process's own name", fs_addr_port((struct sockaddr *)&ss),
           strerror(errno));
    return false;
  }
  fs_host->get(c);
  it->c = c;
  return true;
}

static void fs_rdv_unlisten(struct fs_link *c)
{
  for (struct fs_rdv_item *it = fs_rdv_a.items; it; it = it->next)
    if (it->kind == K_LISTENER && it->c == c) {
      /* Connections accepted from it may still upgrade (servers often close
       * the listener right after accept): the name stays served, as an
       * orphan, until a new listen on the same address adopts it. */
      it->c = NULL;
      fs_host->put(c);
      break;
    }
}

static bool fs_rdv_reachable(struct fs_link *l)
{
  struct fs_addr_ip a, b;
  fs_addr_ip_of((const struct sockaddr *)&l->peer, &a);
  fs_addr_ip_of((const struct sockaddr *)&l->local, &b);
  if (a.family == 0 || b.family == 0 || fs_addr_is_loopback((const struct sockaddr *)&l->peer))
    return true; /* unknown: as before */
  return a.family == b.family && memcmp(a.ip, b.ip, a.family == AF_INET ? 4 : 16) == 0;
}

static bool fs_rdv_held(void)
{
  return __atomic_load_n(&fs_rdv_a.npend, __ATOMIC_RELAXED) > 0;
}

/* The child has no agent thread.  It does not serve the parent's
 * rendezvous names (the parent still does) and abandons in-flight
 * handshakes (the parent goes on serving them). */
static void fs_rdv_after_fork_child(void)
{
  struct fs_rdv_item *it = fs_rdv_a.items;
  while (it) {
    struct fs_rdv_item *next = it->next;
    if (it->ufd >= 0)
      fs_fdreg_close(it->ufd);
    if (it->kind == K_SRV)
      fs_rdv_closefds(it->fds, 4);
    if (it->ch) /* a mapping the child never attached: unmap only */
      it->ch->ops->release(it->ch);
    if (it->c)
      fs_host->put(it->c);
    free(it);
    it = next;
  }
  fs_rdv_a.items = NULL;
  fs_rdv_a.npend = 0;
  fs_rdv_a.npaused = 0;
}

/* The effective uid changed: a server that binds as root and then calls
 * setuid (memcached -u, echosrv -u) served its names as root, and a client
 * whose peer socket is the new user's takes such a name for a squatter's
 * (rdvio.c).  Serve each again: close it (the name is free at once), bind
 * it anew.  A name taken meanwhile is dropped (logged); connections queued
 * on the old socket were clients within their own timeout. */
static void fs_rdv_creds_changed(void)
{
  struct fs_rdv_item *it = fs_rdv_a.items;
  while (it) {
    struct fs_rdv_item *next = it->next;
    if (it->kind == K_LISTENER && it->ufd >= 0) {
      fs_host->unwatch(it->ufd);
      fs_fdreg_close(it->ufd);
      it->ufd = fs_rdv_unix_socket();
      bool bound = it->ufd >= 0 && fs_rdv_bind_name(it->ufd, it->name, it->namelen) == 0;
      if (bound)
        fs_fdreg_set(it->ufd, true); /* ours, as every socket the agent keeps (fs_rdv_unrest) */
      if (!bound || (!it->paused && fs_rdv_watch(it) < 0)) {
        fs_log(FS_LOG_WARN, "rendezvous name %s after a change of user: %s; connections its peers must "
               "find by it stay on TCP", it->name + 1, strerror(errno));
        if (bound)
          fs_fdreg_close(it->ufd);
        else if (it->ufd >= 0)
          FS_REAL(close)(it->ufd);
        it->ufd = -1;
        if (it->paused)
          fs_rdv_a.npaused--;
        fs_rdv_drop(it);
      }
    }
    it = next;
  }
}

const struct fs_fabric_ops fs_shm_fabric = {
  .name = "shm",
  .id = FS_FABRIC_SHM,
  .listen = fs_rdv_listen,
  .unlisten = fs_rdv_unlisten,
  .serve_proc = fs_rdv_serve_proc,
  .connect = fs_rdv_connect,
  .tick = fs_rdv_tick,
  .next_timeout = fs_rdv_next_timeout,
  .held = fs_rdv_held,
  .reachable = fs_rdv_reachable,
  .after_fork_child = fs_rdv_after_fork_child,
  .creds_changed = fs_rdv_creds_changed,
  .exit_pending = fs_fabric_nop_false, /* stores land at once */
  .exit_drain = fs_fabric_nop_done,
};
