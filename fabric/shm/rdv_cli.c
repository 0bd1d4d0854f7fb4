/* The shm rendezvous, connecting end (fabric/shm/rdv.h has the protocol;
 * fabric/shm/rdv_int.h the items).  On the engine's agent, its lock held;
 * FS_REAL() only. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/addr.h"
#include "base/clock.h"
#include "base/fdreg.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/real.h"
#include "base/reason.h"
#include "base/stat.h"
#include "fabric/diag.h"
#include "fabric/shm/rdv.h"
#include "fabric/shm/rdv_int.h"
#include "fabric/shm/shm.h"

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
  it->next = fs_rdv_a.items;
  fs_proc_fork_work_add(FS_FORK_FABRIC);
  fs_rdv_a.items = it;
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
  int rc = fs_diag_lookup((struct sockaddr *)&c->peer, (struct sockaddr *)&c->local, &uid, &inode, NULL);
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
  bool listing = false; /* waiting for the holder's row, past give_up if need be */
  if (reason == FS_REASON_NO_PEER && inode != 0) {
    via_holder = true;
    reason = fs_rdv_dial_holder((const struct sockaddr *)&c->peer, uid, inode, ufd, told, port);
    if (reason == FS_RDV_UNLISTED) {
      if (seen_ns == 0)
        seen_ns = now;
      uint64_t grace = told ? FS_RDV_HOLDER_GRACE_MS : FS_RDV_LIST_GRACE_MS;
      listing = now - seen_ns < grace * 1000000u;
      reason = listing ? FS_RDV_AGAIN : told ? FS_REASON_NOT_OWNER : FS_REASON_NO_PEER;
    } else if (reason == 0 && seen_ns != 0) {
      /* Found after waiting for its row: the request gets the set-up bound
       * from now, or it would time out unanswered (the holder "rejected"). */
      uint64_t bound = now + (uint64_t)c->policy.timeout_ms * 1000000u;
      give_up = give_up > bound ? give_up : bound;
    }
  } else if (reason == FS_REASON_NO_PEER) {
    reason = FS_RDV_AGAIN; /* queued: its acceptor may be in an exec (socket activation) */
  }
  if (reason == FS_RDV_AGAIN) {
    FS_REAL(close)(ufd);
    if (now >= give_up && !listing)
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
int fs_rdv_connect(struct fs_link *c)
{
  return fs_rdv_attempt(c, false, fs_clock_ns() + (uint64_t)c->policy.timeout_ms * 1000000u, 1, 0);
}

/* Try again from a retry item (its reference passes on); the item goes. */
void fs_rdv_cli_again(struct fs_rdv_item *it, bool holder_only)
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

void fs_rdv_cli_event(struct fs_rdv_item *it)
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
    /* Our doorbell cost no fd; the server's eventfd would be one more (its
     * doorbell too, where it is new to us: fs_shm_set_peer asks). */
    if (rep.status == 0 && !bell && it->rings && !fs_fdreg_budget_ok(it->c->fd, 1))
      reason = FS_REASON_RESOURCES;
    else if (rep.status == 0 && ((rep.pad == 0 && nf == 1) || (bell && nf == 2))) {
      struct fs_rdv_ack ack = { FS_RDV_MAGIC_ACK, FS_RDV_VERSION, 0 };
      struct fs_shm_wake w = { fds[0], bell ? fds[1] : -1, rep.pad2, it->c->fd };
      int rc = fs_shm_set_peer(it->ch, &w);
      fds[0] = w.efd; /* -1 where the channel took it */
      if (bell)
        fds[1] = w.bell_memfd;
      if (rc < 0) {
        fs_rdv_closefds(fds, 2);
        fs_host->failed(it->c, rc == -EMFILE ? FS_REASON_RESOURCES : FS_REASON_PROTOCOL);
        fs_rdv_drop(it);
        return;
      }
      /* Given up meanwhile (a fork took it back to TCP): no ack, so the
       * server never attaches a channel we would leave (it said rejected). */
      if (fs_host->may_upgrade(it->c) && fs_rdv_sendfds(it->ufd, &ack, sizeof ack, NULL, 0) == 0 &&
          fs_host->attach(it->c, it->ch) == 0) {
        it->ch = NULL;
        fs_rdv_drop(it);
        return;
      }
      reason = FS_REASON_ERROR; /* an earlier reason of the connection's stays (fs_sock_upgrade_failed) */
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

