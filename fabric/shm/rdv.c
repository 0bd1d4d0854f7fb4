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

#include "base/fdreg.h"
#include "base/proc.h"
#include "base/clock.h"
#include "base/addr.h"
#include "base/log.h"
#include "base/real.h"
#include "base/reason.h"
#include "base/stat.h"
#include "fabric/fabric.h"
#include "fabric/shm/rdv.h"
#include "fabric/shm/shm.h"

#define FS_RDV_MAX_PEND 256     /* unix conns in flight, server side; beyond,
                                   listeners pause (their backlog waits) */
#define FS_RDV_HOLD_MS 2000     /* how long a request waits for accept() */
#define FS_RDV_RETRY_MAX_MS 50  /* backoff cap while the holder is not alone yet */
#define FS_RDV_LIST_GRACE_MS 100 /* from a process of ours accepting to its stat row */

/* K_CLI_RETRY: a connecting end waiting to look for its peer's holder
 * again (the peer's socket is shared, or not accepted yet). */
enum fs_rdv_kind { K_LISTENER = 1, K_SRV, K_CLI, K_CLI_RETRY };
enum fs_rdv_srv_state { S_WAIT_REQ, S_HELD, S_WAIT_ACK };

struct fs_rdv_item {
  enum fs_rdv_kind kind;
  int ufd;
  uint64_t deadline;          /* ns, CLOCK_MONOTONIC; 0 = none */
  struct fs_link *c;          /* listener (K_LISTENER; NULL: orphan) or connection
                                 (K_CLI, S_WAIT_ACK); referenced */
  struct fs_chan *ch;         /* K_CLI: not attached yet */
  int state;                  /* K_SRV */
  int fds[4];                 /* K_SRV held: tcp dup, memfd, client efd or
                                 bell efd, bell memfd (or -1) */
  uint32_t slot;              /* K_SRV: the client's slot in its bell */
  uint32_t uid;
  uint64_t give_up;           /* K_CLI, K_CLI_RETRY: the connecting end's set-up bound */
  uint64_t look_ns;           /* K_SRV held: when to ask again whether another process holds it */
  uint32_t backoff_ms;        /* K_CLI_RETRY: the next wait */
  bool holder_only;           /* K_CLI_RETRY: ask the holder only next */
  uint64_t seen_ns;           /* K_CLI_RETRY: when the peer's socket was first
                                 seen accepted, listed by nobody yet */
  bool via_holder;            /* K_CLI: asked the holder's own name */
  bool rings;                 /* K_CLI: offered the peer our doorbell */
  bool shared_listener;
  bool paused;               /* K_LISTENER: unwatched while too many are in flight */
  struct sockaddr_storage tl, tp; /* K_SRV: the passed socket's local/peer */
  bool proc;                  /* K_LISTENER: this process's own name (c NULL) */
  char name[108];             /* K_LISTENER: its abstract name */
  int namelen;
  struct fs_rdv_item *next;
};

/* Agent lock held for all of it. */
static struct {
  struct fs_rdv_item *items;  /* all listeners and in-flight unix conns */
  int npend;                  /* K_SRV items (atomic reads from accept) */
  int npaused;                /* listeners not watched: npend at the cap */
} A;

static bool fs_rdv_event(void *arg);

/* ---- item bookkeeping ------------------------------------------------- */

static int fs_rdv_watch(struct fs_rdv_item *it)
{
  return fs_host->watch(it->ufd, fs_rdv_event, it);
}

/* A server-side handshake ended: listeners paused at the cap (their
 * clients queued in the unix backlog, within their own timeout) resume. */
static void fs_rdv_pend_done(void)
{
  A.npend--;
  if (A.npaused == 0 || A.npend >= FS_RDV_MAX_PEND)
    return;
  for (struct fs_rdv_item *l = A.items; l; l = l->next)
    if (l->kind == K_LISTENER && l->paused && fs_rdv_watch(l) == 0) {
      l->paused = false;
      A.npaused--;
    }
}

static void fs_rdv_drop(struct fs_rdv_item *it)
{
  struct fs_rdv_item **pp = &A.items;
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
  if (A.npend >= FS_RDV_MAX_PEND) {
    fs_host->unwatch(l->ufd);
    l->paused = true;
    A.npaused++;
    return true;
  }
  int ufd = FS_FDREG_MAKE_HIGH(FS_REAL(accept4)(l->ufd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (ufd < 0)
    return false;
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
  it->next = A.items;
  fs_proc_fork_work_add(FS_FORK_FABRIC);
  A.items = it;
  A.npend++;
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
     * primary accepts, a worker serves): the client looks for that one. */
    uint32_t uid, ino = 0;
    int pids[1];
    uint64_t now = fs_clock_ns();
    bool look = now >= it->look_ns; /* a netlink query and a table scan: every 50 ms at most */
    if (look)
      it->look_ns = now + 50000000u;
    if (!it->shared_listener && look &&
        fs_rdv_diag((struct sockaddr *)&it->tp, (struct sockaddr *)&it->tl, &uid, &ino) == 0 && ino != 0 &&
        fs_stat_holders(ino, pids, 1) > 0)
      it->shared_listener = true;
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
    struct fs_shm_wake w = { it->fds[2], it->fds[3], it->slot };
    int rc = fs_shm_attach(it->fds[1], c->wake_fd, &w, &ch);
    if (rc < 0)
      status = rc == -ENOMEM ? FS_REASON_RESOURCES : FS_REASON_PROTOCOL;
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

/* ---- client side ------------------------------------------------------ */

/* A retry item waits b ms (at least 1); the one after waits twice that,
 * up to FS_RDV_RETRY_MAX_MS. */
static void fs_rdv_cli_wait(struct fs_rdv_item *it, uint64_t now, uint32_t b)
{
  if (b == 0)
    b = 1;
  it->deadline = now + (uint64_t)b * 1000000u;
  it->backoff_ms = b * 2 > FS_RDV_RETRY_MAX_MS ? FS_RDV_RETRY_MAX_MS : b * 2;
}

static struct fs_rdv_item *fs_rdv_cli_item(struct fs_link *c, int kind, uint64_t give_up)
{
  struct fs_rdv_item *it = calloc(1, sizeof *it);
  if (!it)
    return NULL;
  it->kind = kind;
  it->ufd = -1;
  it->c = c;
  it->give_up = give_up;
  it->next = A.items;
  fs_proc_fork_work_add(FS_FORK_FABRIC);
  A.items = it;
  return it;
}

/* c's attempt again after backoff_ms (an item holds c's ref): 0 or resources. */
static int fs_rdv_cli_retry(struct fs_link *c, uint64_t give_up, bool holder_only, uint64_t seen_ns, uint64_t now,
                            uint32_t backoff_ms)
{
  struct fs_rdv_item *it = fs_rdv_cli_item(c, K_CLI_RETRY, give_up);
  if (!it)
    return FS_REASON_RESOURCES;
  it->holder_only = holder_only;
  it->seen_ns = seen_ns;
  fs_rdv_cli_wait(it, now, backoff_ms);
  return 0;
}

/* One attempt of the connecting end (agent).  0: an item holds c's
 * reference now (a request in flight, or a retry); else a reason, and the
 * caller keeps the reference and says why.  holder_only: the listener's
 * process said the connection is not its own; ask the holder only.
 * seen_ns: see fs_rdv_item (0 at first). */
static int fs_rdv_attempt(struct fs_link *c, bool holder_only, uint64_t give_up, uint32_t backoff_ms,
                          uint64_t seen_ns)
{
  uint32_t uid, inode = 0;
  uint16_t port = fs_addr_port((const struct sockaddr *)&c->peer);
  uint64_t now = fs_clock_ns();
  int reason = 0, ufd = -1, memfd = -1, dupfd = -1;
  bool via_holder = holder_only;
  struct fs_chan *ch = NULL;
  int rc = fs_rdv_diag((struct sockaddr *)&c->peer, (struct sockaddr *)&c->local, &uid, &inode);
  if (rc == -ENOENT)
    return FS_FABRIC_PASS(FS_REASON_REMOTE_HOST); /* another host */
  if (rc < 0)
    return FS_REASON_ERROR;
  if (uid != geteuid() && !c->policy.any_uid)
    return FS_REASON_PEER_UID;
  /* Its unix socket, a dup of the socket and the rings' memfd, for a
   * moment: within the fd budget too (a connection whose peer rings a door
   * holds none after), or a program near its limit could find its next
   * accept() short of an fd it would have had without us. */
  if (!fs_fdreg_budget_ok(c->fd, 3))
    return FS_REASON_RESOURCES;
  ufd = fs_rdv_unix_socket();
  if (ufd < 0)
    return FS_REASON_RESOURCES;
  /* Nobody serves the listener's names when its process is gone (a
   * prefork server that daemonized): the holder of the peer's socket is
   * found by its inode.  Asked right after connect (upgrade at 0 bytes),
   * the socket may still sit in the accept queue (no inode: look again),
   * or be accepted but not listed yet: where a process of ours listens on
   * that port, look again briefly; else no libfabsock there. */
  reason = holder_only ? FS_REASON_NO_PEER : fs_rdv_dial_names((const struct sockaddr *)&c->peer, uid, ufd);
  /* A retry starts again from here (the names first). */
  bool again_holder = holder_only, told = holder_only;
  if (reason == FS_RDV_OTHER_UID) {
    /* The listener's name is served by another user than the one whose
     * process accepted the peer's socket: the master of a prefork server
     * whose children drop to another user after the fork (gunicorn --user,
     * nginx in the foreground), or a squatter.  Either way the holder,
     * found by the socket's inode and proven by its pid and uid, is the
     * one to ask, on a fresh socket.  (A server that binds as root and then
     * calls setuid serves its names again with its new uid: creds_changed.) */
    FS_REAL(close)(ufd);
    ufd = fs_rdv_unix_socket();
    if (ufd < 0)
      return FS_REASON_RESOURCES;
    told = true;
    reason = FS_REASON_NO_PEER;
  }
  if (reason == FS_REASON_NO_PEER && inode != 0) {
    via_holder = true;
    reason = fs_rdv_dial_holder((const struct sockaddr *)&c->peer, uid, inode, ufd, told, port);
    if (reason == FS_RDV_UNLISTED) {
      if (seen_ns == 0)
        seen_ns = now;
      reason = now - seen_ns < (uint64_t)FS_RDV_LIST_GRACE_MS * 1000000u ? FS_RDV_AGAIN : FS_REASON_NO_PEER;
    }
  } else if (reason == FS_REASON_NO_PEER) {
    reason = FS_RDV_AGAIN; /* queued: its acceptor may be in an exec (socket activation) */
  }
  if (reason == FS_RDV_AGAIN) {
    FS_REAL(close)(ufd);
    if (now >= give_up)
      return told ? FS_REASON_NOT_OWNER : FS_REASON_NO_PEER;
    return fs_rdv_cli_retry(c, give_up, again_holder, seen_ns, now, backoff_ms);
  }
  struct fs_rdv_bell bell = { -1, -1, 0 }; /* our epoll set's doorbell, or our wake fd */
  if (!reason && fs_host->bell(c, &bell.efd, &bell.memfd, &bell.slot) < 0)
    reason = fs_host->wake(c);
  if (reason)
    goto fail;
  /* Pass a dup of our own socket, checked to still be this connection. */
  dupfd = FS_FDREG_MAKE(FS_REAL(fcntl)(c->fd, F_DUPFD_CLOEXEC, 0));
  struct sockaddr_storage l, p;
  socklen_t ll = sizeof l, pl = sizeof p;
  if (dupfd < 0 || getsockname(dupfd, (struct sockaddr *)&l, &ll) < 0 ||
      getpeername(dupfd, (struct sockaddr *)&p, &pl) < 0 ||
      !fs_addr_eq((struct sockaddr *)&l, (struct sockaddr *)&c->local) ||
      !fs_addr_eq((struct sockaddr *)&p, (struct sockaddr *)&c->peer)) {
    reason = FS_REASON_ERROR;
    goto fail;
  }
  uint32_t io_max = __atomic_load_n(&c->io_max, __ATOMIC_RELAXED);
  uint32_t burst = __atomic_load_n(&c->rx_burst, __ATOMIC_RELAXED);
  uint32_t ring = fs_shm_ring_for(fs_policy_ring_size(), io_max, burst);
  if (fs_shm_create(ring, c->wake_fd, &memfd, &ch) == 0) {
    fs_fdreg_set(memfd, true); /* made high already (fs_shm_create): only marked ours */
    fs_log(FS_LOG_DEBUG, "shm rings of %u bytes for fd %d (largest call so far %u, largest reply %u)", ring,
           c->fd, io_max, burst);
  } else {
    reason = FS_REASON_RESOURCES;
    goto fail;
  }
  bool rings = bell.efd >= 0;
  struct fs_rdv_req req = { FS_RDV_MAGIC_REQ, FS_RDV_VERSION, FS_FABRIC_SHM, ring, rings ? FS_RDV_F_BELL : 0,
                            bell.slot, 0 };
  int fds[4] = { dupfd, memfd, rings ? bell.efd : c->wake_fd, bell.memfd };
  int sent = fs_rdv_sendfds(ufd, &req, rings ? FS_RDV_REQ_BELL_LEN : FS_RDV_REQ_LEN, fds, rings ? 4 : 3);
  if (sent < 0) {
    /* Connected, then closed unread: the name's process went away between
     * our connect and this send (a socket activator exec'ing into its
     * service, which serves the name again).  Ask again (fs_rdv_cli_event). */
    reason = (sent == -ECONNRESET || sent == -EPIPE) && now < give_up ? FS_RDV_AGAIN : FS_REASON_NO_PEER;
    goto fail;
  }
  fs_fdreg_close(dupfd);
  fs_fdreg_close(memfd);
  dupfd = memfd = -1;
  struct fs_rdv_item *it = fs_rdv_cli_item(c, K_CLI, give_up);
  if (!it) {
    reason = FS_REASON_RESOURCES;
    goto fail;
  }
  it->ufd = ufd;
  it->ch = ch;
  it->via_holder = via_holder;
  it->rings = rings;
  it->backoff_ms = backoff_ms;
  it->deadline = give_up;
  if (fs_rdv_watch(it) < 0) {
    it->c = NULL; /* the caller keeps c's reference and says why */
    fs_rdv_drop(it);
    return FS_REASON_RESOURCES;
  }
  return 0;
fail:
  if (ch)
    fs_chan_detach(ch);
  if (dupfd >= 0)
    fs_fdreg_close(dupfd);
  if (memfd >= 0)
    fs_fdreg_close(memfd);
  if (ufd >= 0)
    FS_REAL(close)(ufd);
  if (reason == FS_RDV_AGAIN)
    return fs_rdv_cli_retry(c, give_up, again_holder, seen_ns, now, backoff_ms);
  return reason;
}

/* The fabric's connect (agent): a peer on this host, proven by sock_diag. */
static int fs_rdv_connect(struct fs_link *c)
{
  return fs_rdv_attempt(c, false, fs_clock_ns() + (uint64_t)c->policy.timeout_ms * 1000000u, 1, 0);
}

/* Try again from a retry item (its reference passes on); the item goes. */
static void fs_rdv_cli_again(struct fs_rdv_item *it, bool holder_only)
{
  struct fs_link *c = it->c;
  uint64_t give_up = it->give_up, seen_ns = it->seen_ns;
  uint32_t backoff = it->backoff_ms ? it->backoff_ms : 1;
  it->c = NULL;
  fs_rdv_drop(it);
  int reason =
    fs_host->may_upgrade(c) ? fs_rdv_attempt(c, holder_only, give_up, backoff, seen_ns) : FS_REASON_ERROR;
  if (reason == 0)
    return;
  fs_host->failed(c, reason < 0 ? -reason : reason);
  fs_host->put(c);
}

/* A request in flight becomes a retry (holder_only: of the holder alone). */
static void fs_rdv_cli_reset(struct fs_rdv_item *it, bool holder_only)
{
  it->kind = K_CLI_RETRY;
  it->holder_only = holder_only;
  it->seen_ns = 0;
  fs_host->unwatch(it->ufd);
  fs_fdreg_close(it->ufd);
  it->ufd = -1;
  if (it->ch) {
    fs_chan_detach(it->ch);
    it->ch = NULL;
  }
}

static void fs_rdv_cli_event(struct fs_rdv_item *it)
{
  struct fs_rdv_rep rep;
  int fds[2] = { -1, -1 }, nf = 0;
  ssize_t n = fs_rdv_recvfds(it->ufd, &rep, sizeof rep, fds, 2, &nf);
  if (n == -EAGAIN)
    return;
  int reason = n == -EMFILE ? FS_REASON_RESOURCES : FS_REASON_PROTOCOL;
  if (n == 0 || n == -ECONNRESET) {
    /* Closed with no answer: the process serving the name is gone (it
     * exec'd, as a socket activator into its service, which serves the
     * name again; it exited).  Ask again, from the names, until the bound:
     * it took every connection of the first moment to `protocol`. */
    uint64_t now = fs_clock_ns();
    if (now < it->give_up) {
      fs_rdv_cli_reset(it, it->holder_only);
      fs_rdv_cli_wait(it, now, it->backoff_ms);
      return;
    }
    reason = FS_REASON_NO_PEER;
  } else if (n == (ssize_t)sizeof rep && rep.magic == FS_RDV_MAGIC_REP && rep.version == FS_RDV_VERSION) {
    bool bell = rep.pad == FS_RDV_F_BELL;
    /* Our doorbell cost no fd; the server's eventfd would be one more. */
    if (rep.status == 0 && !bell && it->rings && !fs_fdreg_budget_ok(it->c->fd, 1))
      reason = FS_REASON_RESOURCES;
    else if (rep.status == 0 && ((rep.pad == 0 && nf == 1) || (bell && nf == 2))) {
      struct fs_rdv_ack ack = { FS_RDV_MAGIC_ACK, FS_RDV_VERSION, 0 };
      struct fs_shm_wake w = { fds[0], bell ? fds[1] : -1, rep.pad2 };
      int rc = fs_shm_set_peer(it->ch, &w);
      fds[0] = w.efd; /* -1 where the channel took it */
      if (bell)
        fds[1] = w.bell_memfd;
      if (rc < 0) {
        fs_rdv_closefds(fds, 2);
        fs_host->failed(it->c, FS_REASON_PROTOCOL);
        fs_rdv_drop(it);
        return;
      }
      if (fs_rdv_sendfds(it->ufd, &ack, sizeof ack, NULL, 0) == 0 && fs_host->attach(it->c, it->ch) == 0) {
        it->ch = NULL;
        fs_rdv_drop(it);
        return;
      }
      reason = FS_REASON_ERROR;
    } else if (rep.status == FS_REASON_NOT_OWNER && nf == 0) {
      /* The listener's process does not hold it (prefork), or its holder
       * still shares it (fork, then the parent closes): find the holder. */
      fs_rdv_cli_reset(it, true);
      if (!it->via_holder) {
        fs_rdv_cli_again(it, true);
        return;
      }
      uint64_t now = fs_clock_ns();
      if (now < it->give_up) {
        fs_rdv_cli_wait(it, now, it->backoff_ms);
        return;
      }
      reason = FS_REASON_NOT_OWNER;
    } else if (rep.status > 0 && rep.status < FS_REASON_COUNT && nf == 0) {
      reason = (int)rep.status;
    }
  }
  fs_rdv_closefds(fds, 2);
  fs_host->failed(it->c, reason);
  fs_rdv_drop(it);
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
  struct fs_rdv_item *it = A.items, *next;
  for (; it; it = next) {
    next = it->next;
    if (it->kind == K_SRV && it->state == S_HELD && fs_rdv_srv_try(it))
      continue;
    if (it->kind == K_CLI_RETRY && now >= it->deadline) {
      fs_rdv_cli_again(it, it->holder_only);
      next = A.items; /* the list changed under us: start over (retries are few) */
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
  for (struct fs_rdv_item *it = A.items; it; it = it->next)
    if (it->deadline && (!best || it->deadline < best))
      best = it->deadline;
  if (!best)
    return -1;
  /* Held requests are also retried every few ms in case a wake was missed. */
  uint64_t ms = best > now ? (best - now) / 1000000u + 1 : 0;
  return ms > 5 ? 5 : (int)ms;
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
  it->next = A.items;
  fs_proc_fork_work_add(FS_FORK_FABRIC);
  A.items = it;
  return it;
}

/* This process holds connections it may not have accepted from a listener
 * it serves (a prefork worker, a child forked after accept, a daemon whose
 * listening process is gone): serve its own name, found by clients through
 * the stat tables.  Once per process image. */
static bool fs_rdv_serve_proc(void)
{
  for (struct fs_rdv_item *it = A.items; it; it = it->next)
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
  for (struct fs_rdv_item *it = A.items; it; it = it->next)
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
  for (struct fs_rdv_item *it = A.items; it; it = it->next)
    if (it->kind == K_LISTENER && it->c == c) {
      /* Connections accepted from it may still upgrade (servers often close
       * the listener right after accept): the name stays served, as an
       * orphan, until a new listen on the same address adopts it. */
      it->c = NULL;
      fs_host->put(c);
      break;
    }
}

static bool fs_rdv_held(void)
{
  return __atomic_load_n(&A.npend, __ATOMIC_RELAXED) > 0;
}

/* The child has no agent thread.  It does not serve the parent's
 * rendezvous names (the parent still does) and abandons in-flight
 * handshakes (the parent goes on serving them). */
static void fs_rdv_after_fork_child(void)
{
  struct fs_rdv_item *it = A.items;
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
  A.items = NULL;
  A.npend = 0;
  A.npaused = 0;
}

/* The effective uid changed: a server that binds as root and then calls
 * setuid (memcached -u, echosrv -u) served its names as root, and a client
 * whose peer socket is the new user's takes such a name for a squatter's
 * (rdvio.c).  Serve each again: close it (the name is free at once), bind
 * it anew.  A name taken meanwhile is dropped (logged); connections queued
 * on the old socket were clients within their own timeout. */
static void fs_rdv_creds_changed(void)
{
  struct fs_rdv_item *it = A.items;
  while (it) {
    struct fs_rdv_item *next = it->next;
    if (it->kind == K_LISTENER && it->ufd >= 0) {
      fs_host->unwatch(it->ufd);
      fs_fdreg_close(it->ufd);
      it->ufd = fs_rdv_unix_socket();
      if (it->ufd < 0 || fs_rdv_bind_name(it->ufd, it->name, it->namelen) < 0 ||
          (!it->paused && fs_rdv_watch(it) < 0)) {
        fs_log(FS_LOG_WARN, "rendezvous name %s after a change of user: %s; connections its peers must "
               "find by it stay on TCP", it->name + 1, strerror(errno));
        if (it->ufd >= 0)
          FS_REAL(close)(it->ufd);
        it->ufd = -1;
        if (it->paused)
          A.npaused--;
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
  .after_fork_child = fs_rdv_after_fork_child,
  .creds_changed = fs_rdv_creds_changed,
  .exit_pending = fs_fabric_nop_false, /* stores land at once */
  .exit_drain = fs_fabric_nop_done,
};
