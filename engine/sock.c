/* Socket engine, lifecycle half: tracking, policy, upgrade decisions,
 * attach/detach of fabric channels, close, fork and exec.  The data path
 * is in engine/sockio.c. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/fdreg.h"
#include "base/hot.h"
#include "base/clock.h"
#include "base/addr.h"
#include "base/proc.h"
#include "fabric/chan.h"
#include "fabric/fabric.h"
#include "hooks/hook.h"
#include "base/log.h"
#include "engine/agent.h"
#include "engine/cancel.h"
#include "engine/cutover.h"
#include "engine/door.h"
#include "engine/lend.h"
#include "engine/ready.h"
#include "engine/sock.h"
#include "engine/sockopt.h"
#include "engine/stdio.h"
#include "engine/trim.h"
#include "engine/wake.h"
#include "engine/fdtab.h"
#include "base/real.h"

static bool fs_sock_disabled FS_HOT;
static bool fs_sock_inited FS_HOT;

static void fs_sock_release(struct fs_conn *c)
{
  struct fs_chan *ch = c->chan;
  if (ch) {
    c->chan = NULL;
    __atomic_store_n(&ch->stat, NULL, __ATOMIC_RELEASE); /* the row goes with the conn */
    ch->ops->release(ch);
    fs_trim_count(-1);
  }
  if (c->hooks) {
    fs_hook_close(c->hooks);
    c->hooks = NULL;
  }
  if (fs_wake_conn_release(c)) {
    fs_fdreg_close(c->wake_fd);
    c->wake_fd = -1;
  }
  fs_ready_door_release(c);
}

void fs_sock_init(void)
{
  if (__atomic_load_n(&fs_sock_inited, __ATOMIC_ACQUIRE))
    return;
  fs_sock_disabled = fs_policy_off();
  fs_conn_release_hook = fs_sock_release;
  fs_conn_last_fd_hook = fs_sock_last_close;
  fs_fabric_set_host(&fs_lend_host);
  __atomic_store_n(&fs_sock_inited, true, __ATOMIC_RELEASE);
}

/* The stat table shows the socket's own family, as ss does: a v4-mapped
 * address on an AF_INET6 socket stays ::ffff:a.b.c.d. */
static void fs_sock_stat_ip(uint8_t out[16], const struct sockaddr_storage *ss, uint16_t *port)
{
  struct fs_addr_ip k;
  fs_addr_ip_of((const struct sockaddr *)ss, &k);
  *port = ntohs(k.port_be);
  memset(out, 0, 16);
  if (ss->ss_family == AF_INET6 && k.family == AF_INET) {
    out[10] = out[11] = 0xff;
    memcpy(out + 12, k.ip, 4);
  } else {
    memcpy(out, k.ip, 16);
  }
}

FS_FORK_TEXT void fs_sock_stat_addrs(struct fs_conn *c)
{
  struct fs_stat_conn *s = c->stat;
  if (!s)
    return;
  /* Not learned yet (fs_sock_local_late): port 0, which no connected socket
   * has, tells fabsock stat to look in /proc. */
  s->family = (uint8_t)(c->local_known ? c->local.ss_family : c->family);
  if (c->local_known)
    fs_sock_stat_ip(s->laddr, &c->local, &s->lport);
  else
    memset(s->laddr, 0, sizeof s->laddr), s->lport = 0;
  fs_sock_stat_ip(s->paddr, &c->peer, &s->pport);
  s->dir = c->dir;
  __atomic_store_n(&s->inode, c->ino, __ATOMIC_RELAXED);
}

bool fs_sock_enabled(void)
{
  fs_sock_init();
  return !fs_sock_disabled;
}

void fs_sock_created(int fd, int domain, int type, int protocol)
{
  fs_sock_init();
  if (fs_sock_disabled)
    return;
  if ((type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) != SOCK_STREAM || (protocol != 0 && protocol != IPPROTO_TCP))
    return;
  struct fs_conn *c = fs_conn_new(fd, domain);
  if (!c)
    return;
  c->nonblock = (type & SOCK_NONBLOCK) != 0;
  c->timeo[0] = c->timeo[1] = -1; /* a new socket's: none (an adopted one forgets them) */
  fs_fdtab_install(fd, c);
  fs_conn_put(c);
}

/* A connecting end's own address into c (the caller holds c->lock, or no
 * other thread has c yet). */
static void fs_sock_local_set(struct fs_conn *c, const struct sockaddr_storage *ss)
{
  c->local = *ss;
  __atomic_store_n(&c->local_known, true, __ATOMIC_RELEASE);
  fs_sock_stat_addrs(c);
}

/* Learned where it is needed at once (an upgrade at 0 bytes): 0 or -errno,
 * errno as it was. */
static int fs_sock_local_now(struct fs_conn *c, int fd)
{
  struct sockaddr_storage ss;
  socklen_t ll = sizeof ss;
  int saved = errno;
  int rc = getsockname(fd, (struct sockaddr *)&ss, &ll) < 0 ? -errno : 0;
  errno = saved;
  if (rc == 0)
    fs_sock_local_set(c, &ss);
  return rc;
}

/* Learned by the agent, off the application's path, when the upgrade it
 * queued is due (fs_sock_may_upgrade) or a peer's rendezvous names the
 * connection (fs_sock_find): a connection closed by then never pays for
 * it.  The application may close fd and open another there meanwhile: the
 * address counts only if fd mapped to c before and after. */
static bool fs_sock_local_late(struct fs_conn *c)
{
  if (__atomic_load_n(&c->local_known, __ATOMIC_ACQUIRE))
    return true;
  int fd = __atomic_load_n(&c->fd, __ATOMIC_RELAXED), saved = errno;
  struct sockaddr_storage ss;
  socklen_t ll = sizeof ss;
  bool ok = fs_fdtab_names(fd, c) && getsockname(fd, (struct sockaddr *)&ss, &ll) == 0 && fs_fdtab_names(fd, c);
  errno = saved;
  if (ok) {
    fs_lock(&c->lock);
    if (!c->local_known)
      fs_sock_local_set(c, &ss);
    fs_unlock(&c->lock);
  }
  return ok;
}

/* The connection is established: learn addresses, match policy, arm upgrade.
 * Our own address waits where no rule and no hook asks for it: a connecting
 * end's for its upgrade (fs_sock_may_upgrade), an accepting end's (of a
 * listener on a wildcard address) for a peer's rendezvous that names its
 * peer (fs_sock_find).  One system call in fourteen of a client's connection
 * per request (wrk), and the one nginx made more than without the library,
 * for a connection that never upgrades.  fabsock stat finds it from /proc
 * meanwhile. */
static void fs_sock_establish(struct fs_conn *c, int fd, int dir)
{
  bool disabled = false;
  const struct fs_policy *pol = fs_policy_get(&disabled);
  bool lazy = !fs_policy_needs_local() && !fs_policy_may_hook();
  socklen_t ll = sizeof c->local, pl = sizeof c->peer;
  if ((!c->local_known && !lazy && getsockname(fd, (struct sockaddr *)&c->local, &ll) < 0) ||
      (!c->peer_known && getpeername(fd, (struct sockaddr *)&c->peer, &pl) < 0)) {
    c->no_upgrade = true;
    fs_conn_set_state(c, FS_STATE_TCP, FS_REASON_ERROR);
    return;
  }
  if (!lazy)
    c->local_known = true;
  c->dir = (uint8_t)dir;
  c->connecting = false;
  fs_sock_stat_addrs(c);
  struct fs_policy_query q = { fs_proc_name(), dir, c->local_known ? (struct sockaddr *)&c->local : NULL,
                               (struct sockaddr *)&c->peer };
  fs_policy_match(pol, &q, &c->policy);
  /* A connecting end upgrading at once: learned here, under the caller's
   * lock.  An accepting end waits for its peer's rendezvous whatever its
   * threshold (it starts none). */
  if (lazy && dir == FS_DIR_CONNECT && c->policy.upgrade_bytes == 0 && fs_sock_local_now(c, fd) < 0) {
    c->no_upgrade = true;
    fs_conn_set_state(c, FS_STATE_TCP, FS_REASON_ERROR);
    return;
  }
  c->spin_us = c->policy.busy_poll ? 0 : (c->policy.spin_us >= 0 ? (uint32_t)c->policy.spin_us : 50);
  if (c->policy.hooks[0]) {
    struct fabsock_conn_info ci = { sizeof ci, fd, c->family, FS_FABRIC_TCP, dir, c->local, c->peer };
    /* Fail closed: a connection its inspection hooks cannot watch is not
     * allowed to carry data (the reason is logged once by the hook module). */
    if (fs_hook_open(c->policy.hooks, &ci, c->stat, &c->hooks) < 0) {
      c->hooks = NULL;
      c->hook_closed = true;
      c->no_upgrade = true;
      fs_conn_set_state(c, FS_STATE_TCP, FS_REASON_HOOK);
      FS_REAL(shutdown)(fd, SHUT_RDWR);
      return;
    }
  }
  int reason = FS_REASON_PENDING, all_tcp = fs_sock_refuse_all(); /* io_uring, a sandbox */
  if (disabled)
    reason = FS_REASON_DISABLED;
  else if (c->policy.fabric == FS_FABRIC_TCP || c->policy.upgrade_bytes == FS_POLICY_UPGRADE_NEVER)
    reason = FS_REASON_POLICY;
  else if (all_tcp)
    reason = all_tcp;
  else if (c->kernel_io)
    reason = FS_REASON_KERNEL_IO;
  else if (c->policy.fabric != FS_FABRIC_AUTO && !fs_fabric_by_id(c->policy.fabric))
    reason = FS_REASON_NO_DEVICE; /* that fabric is not in this build */
  /* No wake fd yet: a connection that never upgrades never pays for one
   * (engine/wake.h). */
  c->no_upgrade = reason != FS_REASON_PENDING;
  fs_conn_set_state(c, FS_STATE_TCP, reason);
  if (c->stat)
    c->stat->fabric = FS_FABRIC_TCP;
  if (dir == FS_DIR_CONNECT && !c->no_upgrade && c->policy.upgrade_bytes == 0)
    fs_sock_maybe_upgrade(c, true); /* a connecting end is established under c->lock */
}

/* An accepted end's inode in our stat row tells a peer which process holds
 * it once that is not the one serving the listener's names: it came from a
 * listener shared since fork or served elsewhere (prefork), or another
 * process comes to hold it too (fork, exec, SCM_RIGHTS; that process's
 * "alone" check looks for ours).  Only then: the process that alone serves
 * the names finds its own connections by their addresses, and an fstat
 * per accepted connection was one system call in twelve of a connection
 * per request (nginx).  From a listener shared since fork, at the
 * threshold (ino_late): told "not-owner" by the listener's process, the
 * peer looks until the holder lists it (fs_rdv_dial_holder). */
void fs_sock_publish_ino(struct fs_conn *c, int fd)
{
  if (c->dir != FS_DIR_ACCEPT || c->no_upgrade || __atomic_load_n(&c->ino, __ATOMIC_RELAXED) != 0)
    return;
  struct stat st;
  int saved = errno;
  if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) {
    __atomic_store_n(&c->ino, (uint32_t)st.st_ino, __ATOMIC_RELAXED);
    if (c->stat) {
      __atomic_store_n(&c->stat->inode, c->ino, __ATOMIC_RELAXED);
      fs_stat_publish(); /* where the peer looks for it */
    }
  }
  errno = saved;
}

static void fs_sock_established(struct fs_conn *c, int fd, int dir)
{
  fs_sock_establish(c, fd, dir);
  __atomic_store_n(&c->ready, true, __ATOMIC_RELEASE);
}

/* An accepting end whose peer has not asked for a rendezvous long after
 * the threshold was crossed has a peer without libfabsock: stop paying for
 * the chance.  Time, not bytes: a fast stream crosses any byte margin
 * before a busy peer's agent gets to run.  Never sooner than twice the
 * set-up bound (policy), which a peer's attempt may take to complete. */
#define FS_SOCK_GIVEUP_NS (3000000000ull)

static uint64_t fs_sock_giveup_ns(const struct fs_conn *c)
{
  uint64_t bound = 2u * (uint64_t)c->policy.timeout_ms * 1000000u;
  return bound > FS_SOCK_GIVEUP_NS ? bound : FS_SOCK_GIVEUP_NS;
}

void fs_sock_maybe_upgrade(struct fs_conn *c, bool locked)
{
  if (c->no_upgrade || __atomic_load_n(&c->chan, __ATOMIC_RELAXED))
    return;
  if (c->dir == FS_DIR_ACCEPT) {
    if (c->tcp_tx + c->tcp_rx < c->policy.upgrade_bytes)
      return;
    uint64_t now = fs_clock_coarse_ns();
    if (!c->crossed_ns) {
      c->crossed_ns = now;
      /* A peer on another host, no rdma here: say so now and at the give-up
       * below; a rendezvous may still come (a peer that bound another of our
       * addresses), and upgrades as ever. */
      if (!fs_agent_reachable(c))
        fs_sock_refused(c, FS_REASON_REMOTE_HOST);
      fs_door_home_claim(c, locked); /* the peer's rendezvous may come before our first wait */
      if (c->ino_late)
        fs_sock_publish_ino(c, __atomic_load_n(&c->fd, __ATOMIC_ACQUIRE));
      /* Forked with it or handed it: the peer finds this process in the
       * stat tables, then by its own name, both made here (not at fork). */
      if (c->shared_hist)
        fs_sock_forked_crossed();
      return;
    }
    if (now - c->crossed_ns > fs_sock_giveup_ns(c)) {
      fs_lock(&c->lock);
      if (!c->chan) { /* a refusal's reason (peer-uid, not-owner, remote-host) stays */
        c->no_upgrade = true;
        fs_conn_set_state(c, FS_STATE_TCP, c->reason != FS_REASON_PENDING ? c->reason : FS_REASON_NO_PEER);
      }
      fs_unlock(&c->lock);
    }
    return;
  }
  if (c->dir != FS_DIR_CONNECT)
    return;
  if (c->tcp_tx + c->tcp_rx < c->policy.upgrade_bytes)
    return;
  if (fs_stdio_used(c)) {
    fs_sock_to_kernel(c, c->fd);
    return;
  }
  bool expect = false;
  if (!__atomic_compare_exchange_n(&c->upgrade_queued, &expect, true, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
    return;
  fs_conn_set_state(c, FS_STATE_UPGRADING, FS_REASON_PENDING);
  fs_door_home_claim(c, locked); /* before the rendezvous reads the mark */
  fs_agent_upgrade(c);
}

void fs_sock_accepted(struct fs_conn *lc, int lfd, int nfd, int flags, const struct sockaddr *peer, socklen_t plen)
{
  struct fs_conn *c = fs_conn_new(nfd, lc->family);
  if (!c)
    return;
  c->peer_known = fs_addr_take(&c->peer, peer, plen); /* one getpeername less */
  /* A listener bound to one address: ours is its (one getsockname less). */
  c->local_known = fs_addr_take(&c->local, (const struct sockaddr *)&lc->local, sizeof lc->local);
  c->nonblock = (flags & SOCK_NONBLOCK) != 0;
  fs_sockopt_inherit(c, lc);
  if (fs_fdtab_install(nfd, c) == 0) {
    fs_sock_established(c, nfd, FS_DIR_ACCEPT);
    if (lc->listener_shared && c->policy.upgrade_bytes > 0)
      c->ino_late = true; /* at 0 bytes the peer asks at once */
    else if (lc->listener_shared || !__atomic_load_n(&lc->served, __ATOMIC_ACQUIRE))
      fs_sock_publish_ino(c, nfd); /* served elsewhere: that process looks for it (fabric/shm/rdv.c) */
  }
  fs_conn_put(c);
  /* A peer asking the listener's name may reach another process sharing
   * the listener (prefork): it then looks for this one by its own name. */
  if (lc->listener_shared && !c->no_upgrade) {
    fs_agent_serve_proc();
    fs_agent_take_names(lc, lfd); /* its listen()er gone? */
  }
  fs_agent_retry_held();
}

void fs_sock_connect_done(struct fs_conn *c, int fd, int rc, const struct sockaddr *addr, socklen_t len)
{
  if (rc == 0) {
    /* A second connect() of a non-blocking socket returns 0 once it is
     * connected (APR, select loops): set up once, whoever saw it first
     * (a wait may have), or the first wake fd leaks. */
    fs_lock(&c->lock);
    if (c->connecting || fs_conn_state(c) == FS_STATE_UNCONNECTED) {
      c->peer_known = fs_addr_take(&c->peer, addr, len);
      fs_sock_established(c, fd, FS_DIR_CONNECT);
    }
    fs_unlock(&c->lock);
  } else if (rc == -EINPROGRESS || rc == -EALREADY || rc == -EINTR) {
    if (!c->connecting) /* the peer, should the kernel say connected later */
      c->peer_known = fs_addr_take(&c->peer, addr, len);
    c->connecting = true;
  }
}

void fs_sock_check_connected(struct fs_conn *c, int fd, bool out_seen)
{
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  int saved = errno;
  bool known = out_seen && c->peer_known;
  if (known || getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
    fs_lock(&c->lock);
    if (c->connecting) {
      if (!known)
        c->peer_known = fs_addr_take(&c->peer, (struct sockaddr *)&ss, sl);
      fs_sock_established(c, fd, FS_DIR_CONNECT);
    }
    fs_unlock(&c->lock);
  }
  errno = saved;
}

void fs_sock_listening(struct fs_conn *c, int fd)
{
  fs_conn_set_state(c, FS_STATE_LISTEN, FS_REASON_NONE);
  socklen_t ll = sizeof c->local;
  if (getsockname(fd, (struct sockaddr *)&c->local, &ll) == 0) {
    c->local_known = true;
    if (c->stat) {
      c->stat->listening = 1;
      fs_sock_stat_addrs(c);
    }
  }
  if (c->served || c->listener_shared)
    return;
  int rc = fs_agent_listen(c, fd);
  c->served = rc > 0;
  /* Not served here: its name is another process's (the listener came
   * from it, and a node cluster worker listen()s again on the one it was
   * handed), or taken.  Served as shared since fork: each connection
   * accepted here is found by this process's own name. */
  if (rc == 0)
    c->listener_shared = true;
}

struct fs_sock_find_arg {
  const struct sockaddr *local, *peer;
  struct fs_conn *found;
};

static void fs_sock_find_one(int fd, struct fs_conn *c, void *arg)
{
  struct fs_sock_find_arg *a = arg;
  if (a->found || c->dir != FS_DIR_ACCEPT || !fs_addr_eq((struct sockaddr *)&c->peer, a->peer))
    return;
  /* Its own address learned now if it was left for later (fs_sock_establish):
   * the peer's port and address single it out, so one getsockname. */
  if (fs_sock_local_late(c) && fs_addr_eq((struct sockaddr *)&c->local, a->local)) {
    fs_conn_get(c);
    a->found = c;
  }
}

struct fs_conn *fs_sock_find(const struct sockaddr *local, const struct sockaddr *peer)
{
  struct fs_sock_find_arg a = { local, peer, NULL };
  fs_fdtab_foreach(fs_sock_find_one, &a);
  return a.found;
}

bool fs_sock_may_upgrade(struct fs_conn *c)
{
  if (c->no_upgrade || fs_conn_closed(c))
    return false;
  if (fs_sock_local_late(c))
    return true;
  fs_sock_upgrade_failed(c, FS_REASON_ERROR); /* its address unknown: no proof to offer */
  return false;
}

/* An accepted end forked with (shared_hist): only the one process left
 * holding it may upgrade; another holder would read TCP while the bytes go
 * to the ring.  0, or a reason.  No stat row, no proof: it stays on TCP. */
static int fs_sock_alone(struct fs_conn *c)
{
  int pids[1];
  if (!c->stat || c->ino == 0)
    return FS_REASON_FORK;
  if (fs_stat_holders(c->ino, pids, 1) != 0 || fs_sock_forked_hold(c))
    return FS_REASON_NOT_OWNER; /* shared still: the peer asks again */
  return 0;
}

int fs_sock_may_attach(struct fs_conn *c, uint32_t uid)
{
  if (c->reason == FS_REASON_FD_PASSED && !c->chan)
    return FS_REASON_NOT_OWNER; /* handed to another process: the peer looks for it */
  if (c->no_upgrade)
    return c->reason && c->reason != FS_REASON_PENDING ? c->reason : FS_REASON_POLICY;
  if (__atomic_load_n(&c->chan, __ATOMIC_ACQUIRE))
    return FS_REASON_PROTOCOL; /* a replay */
  if (fs_stdio_used(c)) {
    fs_sock_to_kernel(c, c->fd);
    return FS_REASON_KERNEL_IO;
  }
  if (uid != geteuid() && !c->policy.any_uid)
    return FS_REASON_PEER_UID;
  if (c->shared_hist)
    return fs_sock_alone(c);
  return 0;
}

int fs_sock_attach(struct fs_conn *c, struct fs_chan *ch)
{
  fs_lock(&c->lock);
  /* A fork may have come between the accept reply and the peer's ack. */
  if (fs_conn_closed(c) || c->no_upgrade || c->chan ||
      (c->shared_hist && fs_sock_alone(c) != 0)) {
    fs_unlock(&c->lock);
    return -ESTALE;
  }
  if (c->shared_hist) /* our byte counts include what others did: ask the kernel */
    c->resync_tx = c->resync_rx = true;
  fs_sockopt_attach(c, ch);
  __atomic_store_n(&c->chan, ch, __ATOMIC_RELEASE);
  fs_trim_count(1);
  fs_wake_attach_publish(c); /* or held for blind sleepers */
  fs_conn_set_state(c, FS_STATE_FABRIC, FS_REASON_NONE);
  if (c->stat)
    fs_stat_set_fabric(c->stat, (uint8_t)ch->ops->fabric);
  __atomic_store_n(&ch->stat, c->stat, __ATOMIC_RELEASE);
  fs_unlock(&c->lock);
  fs_log(FS_LOG_DEBUG, "fd %d on %s", c->fd, ch->ops->name);
  /* Our sender switches now if it is idle; a busy one does at its next send. */
  if (fs_lock_try(&c->txlock)) {
    fs_cutover_switch_tx(c, ch);
    fs_unlock(&c->txlock);
  }
  /* Wake our own threads blocked on the TCP path: data may now come here. */
  fs_wake_own(c);
  return 0;
}

void fs_sock_upgrade_failed(struct fs_conn *c, int reason)
{
  fs_lock(&c->lock);
  if (c->no_upgrade && c->reason != FS_REASON_PENDING && c->reason != FS_REASON_NONE)
    reason = c->reason; /* given up here first (fork, exec...): the rendezvous failed of that */
  c->no_upgrade = true;
  if (!c->chan) /* closed meanwhile: stat shows it closed, with the reason */
    fs_conn_set_state(c, fs_conn_state(c) == FS_STATE_CLOSED ? FS_STATE_CLOSED : FS_STATE_TCP, reason);
  fs_unlock(&c->lock);
  fs_log(FS_LOG_DEBUG, "fd %d stays on tcp: %s", c->fd, fs_reason_name(reason));
}

void fs_sock_refused(struct fs_conn *c, int reason)
{
  fs_lock(&c->lock);
  if (!c->chan && !c->no_upgrade)
    fs_conn_set_state(c, fs_conn_state(c), reason);
  fs_unlock(&c->lock);
}

/* The last close, of fd (-1: none, the socket is already gone); abort_fd
 * >= 0: the application's close of that fd with SO_LINGER {1, 0}, an abort
 * (fs_cutover_last_close).  A re-send the peer's revert still owes gets a
 * dup of fd to finish on (fs_cutover_close_resend). */
static void fs_sock_last_close_fd(struct fs_conn *c, int fd, int abort_fd)
{
  fs_lock(&c->lock);
  int st = fs_conn_state(c);
  fs_conn_set_state(c, FS_STATE_CLOSED, c->reason);
  c->no_upgrade = true;
  struct fs_chan *ch = c->chan;
  fs_unlock(&c->lock);
  if (st == FS_STATE_LISTEN)
    fs_agent_unlisten(c);
  fs_ready_epoll_forget_conn(c);
  if (ch) {
    fs_lock(&c->txlock);
    bool resend = abort_fd < 0 && fs_cutover_close_resend(c, ch, fd);
    fs_cutover_last_close(c, ch, abort_fd);
    fs_unlock(&c->txlock);
    if (resend)
      fs_cutover_resend_queue(c);
  }
}

void fs_sock_last_close(struct fs_conn *c)
{
  fs_sock_last_close_fd(c, -1, -1);
}

struct fs_sock_refd_arg {
  struct fs_conn *c;
  int fd;
};

static void fs_sock_refd_one(int fd, struct fs_conn *c, void *arg)
{
  struct fs_sock_refd_arg *a = arg;
  if (c == a->c && a->fd < 0)
    a->fd = fd;
}

/* c's own fd (the one the kernel is asked about: byte counts, the
 * rendezvous' dup) was closed while another names it still: move to that
 * one.  sshd's re-exec gets the connection on fd 0, dups it and puts
 * /dev/null on 0; every TCP_INFO on fd 0 then failed, for ever. */
static void fs_sock_refd(struct fs_conn *c)
{
  struct fs_sock_refd_arg a = { c, -1 };
  fs_fdtab_foreach(fs_sock_refd_one, &a);
  if (a.fd >= 0) {
    __atomic_store_n(&c->fd, a.fd, __ATOMIC_RELEASE);
    if (c->stat)
      c->stat->fd = a.fd;
  }
}

void fs_sock_close(struct fs_conn *c, int fd)
{
  if (fs_conn_closed(c)) {
    fs_sock_last_close_fd(c, fd, c->linger_abort ? fd : -1);
  } else {
    if (fd == __atomic_load_n(&c->fd, __ATOMIC_ACQUIRE))
      fs_sock_refd(c);
    fs_ready_epoll_fd_closing(c, fd);
  }
  fs_conn_put(c);
}

/* ---- fd passing (fork and exec: engine/sockfork.c) ------------------- */

/* A connection handed to this process (engine/adopt.c): set up as accepted
 * here, but with a history others made. */
void fs_sock_adopted(struct fs_conn *c, int fd)
{
  fs_sock_establish(c, fd, FS_DIR_ACCEPT);
  fs_sock_publish_ino(c, fd);
  if (!c->no_upgrade && c->ino != 0 && c->stat) {
    c->shared_hist = true; /* another process held it; our counts start now */
  } else if (!c->no_upgrade) {
    c->no_upgrade = true;
    fs_conn_set_state(c, FS_STATE_TCP, FS_REASON_FD_PASSED);
  }
  __atomic_store_n(&c->ready, true, __ATOMIC_RELEASE);
  if (c->shared_hist)
    fs_agent_serve_proc(); /* its peer finds us by our own name */
}

static bool fs_sock_to_kernel_as(struct fs_conn *c, int fd, bool wait);

void fs_sock_to_kernel(struct fs_conn *c, int fd)
{
  (void)fs_sock_to_kernel_as(c, fd, true);
}

/* Set once: the reason no connection of this process takes a fabric any
 * more (io_uring), else 0. */
static int fs_sock_all_tcp FS_HOT;

static void fs_sock_kernel_one(int fd, struct fs_conn *c, void *arg)
{
  int st = fs_conn_state(c); /* listeners and unconnected ones learn it at establish */
  if ((st == FS_STATE_TCP || st == FS_STATE_UPGRADING || st == FS_STATE_FABRIC) &&
      !(c->no_upgrade && !fs_cutover_chan(c)))
    fs_sock_downgrade(c, fd, *(int *)arg);
}

void fs_sock_kernel_only(int reason)
{
  int none = 0;
  if (!__atomic_compare_exchange_n(&fs_sock_all_tcp, &none, reason, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return;
  fs_log(FS_LOG_INFO, "%s: this process's connections stay on (or go back to) tcp", fs_reason_name(reason));
  fs_fdtab_foreach(fs_sock_kernel_one, &reason);
}

int fs_sock_refuse_all(void)
{
  return __atomic_load_n(&fs_sock_all_tcp, __ATOMIC_ACQUIRE);
}

void fs_sock_set_nonblock(struct fs_conn *c, bool on)
{
  c->nonblock = on;
}

/* Take m within ms milliseconds, or give up. */
static bool fs_sock_trylock_for(fs_lock_t *m, int ms)
{
  uint64_t end = fs_clock_ns() + (uint64_t)ms * 1000000u;
  while (!fs_lock_try(m))
    if (!fs_clock_nap(end, 1000000))
      return false;
  return true;
}

/* The downgrade itself, both direction locks held. */
static void fs_sock_revert_locked(struct fs_conn *c, struct fs_chan *ch, int reason)
{
  fs_cutover_tx_revert(c, ch);
  if (c->rx_flow != FS_FLOW_EOF) {
    __atomic_store_n(&ch->me->rx_revert, 1, __ATOMIC_RELEASE);
    c->rx_flow = FS_FLOW_TCP;
  }
  c->reverted = true;
  c->no_upgrade = true;
  __atomic_store_n(&ch->me->reverted, (uint32_t)reason, __ATOMIC_RELEASE);
  fs_conn_set_state(c, FS_STATE_TCP, reason);
  if (c->stat)
    c->stat->fabric = FS_FABRIC_TCP;
}

/* Bring c back to plain TCP for good, before its fd leaves this process
 * image (exec) or this process (SCM_RIGHTS).  Our tx: a REVERT record ends
 * our fabric bytes and TCP carries the rest.  Our rx: we stop reading the
 * ring where we are and flag it (ep->rx_revert); the peer re-sends whatever
 * we did not read on TCP before anything new (fs_cutover_service), so the
 * next reader of the TCP socket sees every byte in order. */
/* wait: for the direction locks, however long a thread holds them (one
 * asleep in recv holds rxlock until its peer writes); else 100 ms each. */
static void fs_sock_downgrade_as(struct fs_conn *c, int fd, int reason, bool wait)
{
  (void)fd;
  struct fs_chan *ch = __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE);
  if (!ch || c->reverted) {
    /* Under c->lock, as fs_sock_attach checks: a channel the agent puts on
     * now is seen here, and none comes once no_upgrade is set. */
    fs_lock(&c->lock);
    ch = __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE);
    if (!ch || c->reverted) {
      if (!c->no_upgrade) {
        c->no_upgrade = true;
        fs_conn_set_state(c, fs_conn_state(c), reason);
      }
      fs_unlock(&c->lock);
      return;
    }
    fs_unlock(&c->lock);
  }
  if (!wait) {
    const char *when = fs_reason_name(reason);
    if (!fs_sock_trylock_for(&c->rxlock, 100)) {
      fs_log(FS_LOG_WARN, "fd %d: a thread is inside recv at %s; it stays on %s", fd, when, ch->ops->name);
      return;
    }
    if (!fs_sock_trylock_for(&c->txlock, 100)) {
      fs_unlock(&c->rxlock);
      fs_log(FS_LOG_WARN, "fd %d: a thread is inside send at %s; it stays on %s", fd, when, ch->ops->name);
      return;
    }
  } else {
    fs_lock(&c->rxlock);
    fs_lock(&c->txlock);
  }
  bool was_fab = c->tx_flow == FS_FLOW_FABRIC;
  fs_sock_revert_locked(c, ch, reason);
  fs_unlock(&c->txlock);
  fs_unlock(&c->rxlock);
  ch->ops->wake_peer(ch);
  if (was_fab)
    fs_chan_settle(ch); /* our REVERT where the peer looks, before TCP bytes behind it */
  fs_log(FS_LOG_INFO, "fd %d back to tcp (%s)", fd, fs_reason_name(reason));
}

/* Only our tx goes back.  Had rx given its ring up too (the downgrade's rx
 * revert), two ends whose rings were cramped both ways (one end past its
 * memlock limit: neither window opens) went back at once, each owed the
 * re-send of what it had left unread in the other's ring and neither able
 * to give it in order behind its own TCP bytes: an echo waited for its
 * bytes for good (t2_hosts memlock, 1 run in 3).  A REVERT alone asks
 * nothing of the peer: it reads the ring to there, then TCP, whatever it
 * does itself.  An end shared since fork goes back whole (another copy may
 * write on the ring), as the downgrade does, if no thread is inside recv. */
bool fs_sock_revert_tx(struct fs_conn *c, int fd, struct fs_chan *ch, int reason)
{
  if (c->reverted || c->tx_back)
    return c->tx_flow == FS_FLOW_TCP;
  if (c->fork_shared) {
    if (!fs_lock_try(&c->rxlock)) /* lock order rx, tx: try only */
      return false;
    fs_sock_revert_locked(c, ch, reason);
    fs_unlock(&c->rxlock);
  } else {
    fs_cutover_tx_revert(c, ch);
    if (c->tx_flow != FS_FLOW_TCP)
      return false; /* no room for the REVERT yet: the sender waits on */
    fs_cutover_tx_back(c, reason);
  }
  ch->ops->wake_peer(ch);
  fs_chan_settle(ch); /* our SWITCH and REVERT where the peer looks, before the TCP bytes */
  fs_log(FS_LOG_INFO, "fd %d back to tcp (%s: its ring cannot grow)", fd, fs_reason_name(reason));
  return c->tx_flow == FS_FLOW_TCP;
}

void fs_sock_downgrade(struct fs_conn *c, int fd, int reason)
{
  /* In fork's prepare handler, or in fs_sock_kernel_only's walk over every
   * connection (io_uring set-up, a seccomp filter), a thread of ours may
   * sit in a blocking recv or send holding these locks for as long as its
   * peer is silent: never make the call wait on that.  Such a connection
   * stays on its fabric (logged). */
  fs_sock_downgrade_as(c, fd, reason,
                       reason != FS_REASON_FORK && reason != FS_REASON_IO_URING && reason != FS_REASON_SANDBOX);
}

/* wait: as fs_sock_downgrade_as.  Whether the connection is on TCP now. */
static bool fs_sock_to_kernel_as(struct fs_conn *c, int fd, bool wait)
{
  c->kernel_io = true; /* and if it is not connected yet, once it is */
  if (!c->no_upgrade || fs_cutover_chan(c)) /* else on TCP for good already: keep its reason */
    fs_sock_downgrade_as(c, fd, FS_REASON_KERNEL_IO, wait);
  struct fs_chan *ch = __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE);
  return !ch || c->reverted;
}

bool fs_sock_to_kernel_try(struct fs_conn *c, int fd)
{
  return fs_sock_to_kernel_as(c, fd, false);
}
