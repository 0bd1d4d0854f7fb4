/* Rendezvous agent: one thread per process, started on first need.  See
 * core/rdv.h for the protocol.  Everything here uses FS_REAL() only. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/addr.h"
#include "core/log.h"
#include "core/rdv.h"
#include "core/shm.h"
#include "core/rdmacm.h"
#include "core/sockio.h"
#include "core/sock.h"
#include "preload/fdtab.h"
#include "preload/real.h"

#define FS_RDV_MAX_PEND 256     /* unix conns in flight, server side */
#define FS_RDV_HOLD_MS 2000     /* how long a request waits for accept() */

enum fs_rdv_kind { K_EVFD = 1, K_LISTENER, K_SRV, K_CLI, K_EXT };
enum fs_rdv_job_kind { J_UPGRADE, J_RESEND };
enum fs_rdv_srv_state { S_WAIT_REQ, S_HELD, S_WAIT_ACK };

struct fs_rdv_item {
  enum fs_rdv_kind kind;
  int ufd;
  uint64_t deadline;          /* ns, CLOCK_MONOTONIC; 0 = none */
  struct fs_conn *c;          /* listener (K_LISTENER) or connection (K_CLI, S_WAIT_ACK) */
  struct fs_chan *ch;         /* K_CLI, S_WAIT_ACK */
  int state;                  /* K_SRV */
  int fds[3];                 /* K_SRV held: tcp dup, memfd, client efd */
  uint32_t uid;
  bool shared_listener;
  struct sockaddr_storage tl, tp; /* K_SRV: the passed socket's local/peer */
  char name[108];             /* K_LISTENER: its abstract name */
  int namelen;
  void (*fn)(void);           /* K_EXT: run when ufd is readable */
  struct fs_rdv_item *next;
};

struct fs_rdv_job {
  struct fs_conn *c;
  enum fs_rdv_job_kind kind;
  struct fs_rdv_job *next;
};

static struct {
  pthread_mutex_t lock;       /* agent state; held across each event batch */
  pthread_mutex_t qlock;      /* job queue */
  bool running;
  int epfd, evfd;
  struct fs_rdv_item evitem;
  struct fs_rdv_item *items;  /* all listeners and in-flight unix conns */
  int npend;
  struct fs_rdv_job *jobs;
} A = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, false, -1, -1, { 0 }, NULL, 0, NULL };

int fs_rdv_name(char *buf, size_t len, const struct sockaddr *sa, bool wild)
{
  char ip[96] = "*";
  struct sockaddr_storage tmp;
  const struct sockaddr *a = fs_addr_unmap(sa, &tmp);
  if (!wild) {
    char s[80];
    fs_addr_str(a, s, sizeof s);
    char *colon = strrchr(s, ':');
    if (colon)
      *colon = 0;
    snprintf(ip, sizeof ip, "%s", s);
  }
  int n = snprintf(buf + 1, len - 1, "fabsock1/%c/%s/%u", a->sa_family == AF_INET6 ? '6' : '4', ip,
                   fs_addr_port(a));
  buf[0] = 0;
  return n + 1;
}

int fs_rdv_check_req(const struct fs_rdv_req *r, size_t len, int nfds)
{
  if (len != sizeof *r || nfds != 3 || r->magic != FS_RDV_MAGIC_REQ)
    return FS_REASON_PROTOCOL;
  if (r->version != FS_RDV_VERSION)
    return FS_REASON_VERSION;
  if (r->fabric != FS_FABRIC_SHM || r->flags != 0 || r->ring_size < FS_SHM_RING_MIN ||
      r->ring_size > FS_SHM_RING_MAX || (r->ring_size & (r->ring_size - 1)))
    return FS_REASON_PROTOCOL;
  return 0;
}

/* ---- small I/O helpers ------------------------------------------------ */

static int fs_rdv_sendfds(int ufd, const void *msg, size_t len, const int *fds, int nfds)
{
  struct iovec iov = { (void *)msg, len };
  union {
    char buf[CMSG_SPACE(3 * sizeof(int))];
    struct cmsghdr align;
  } u;
  struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
  if (nfds > 0) {
    memset(&u, 0, sizeof u);
    mh.msg_control = u.buf;
    mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
  }
  ssize_t r = FS_REAL(sendmsg)(ufd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
  return r == (ssize_t)len ? 0 : (r < 0 ? -errno : -EIO);
}

/* Receive one message and up to `max` fds; every fd beyond max, or in an
 * unexpected control message, is closed.  Returns the length or -errno. */
static ssize_t fs_rdv_recvfds(int ufd, void *msg, size_t len, int *fds, int max, int *nfds)
{
  char big[64];
  struct iovec iov = { big, sizeof big };
  union {
    char buf[CMSG_SPACE(8 * sizeof(int))];
    struct cmsghdr align;
  } u;
  struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
  *nfds = 0;
  ssize_t r = FS_REAL(recvmsg)(ufd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (r < 0)
    return -errno;
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
      continue;
    int n = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    int got[8];
    memcpy(got, CMSG_DATA(cm), (size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) {
      if (*nfds < max) {
        got[i] = fs_fdtab_move_high(got[i]);
        fds[(*nfds)++] = got[i];
      } else {
        FS_REAL(close)(got[i]);
        *nfds = max + 1; /* too many: reported as a protocol error */
      }
    }
  }
  if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || (size_t)r > len) {
    for (int i = 0; i < *nfds && i < max; i++)
      fs_fdtab_close_internal(fds[i]);
    *nfds = 0;
    return -EPROTO;
  }
  memcpy(msg, big, (size_t)r);
  return r;
}

static void fs_rdv_closefds(int *fds, int n)
{
  for (int i = 0; i < n; i++)
    if (fds[i] >= 0) {
      fs_fdtab_close_internal(fds[i]); /* received fds are marked ours (fs_rdv_recvfds) */
      fds[i] = -1;
    }
}

static void fs_rdv_reply(int ufd, uint32_t status, int efd)
{
  struct fs_rdv_rep rep = { FS_RDV_MAGIC_REP, FS_RDV_VERSION, 0, status, 0 };
  (void)fs_rdv_sendfds(ufd, &rep, sizeof rep, &efd, status == 0 ? 1 : 0);
}

/* ---- sock_diag -------------------------------------------------------- */

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>

int fs_rdv_diag(const struct sockaddr *local, const struct sockaddr *peer, uint32_t *uid)
{
  struct sockaddr_storage tl, tp;
  local = fs_addr_unmap(local, &tl);
  peer = fs_addr_unmap(peer, &tp);
  if (local->sa_family != peer->sa_family)
    return -EINVAL;
  int nl = fs_fdtab_move_high(FS_REAL(socket)(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (nl < 0)
    return -errno;
  struct {
    struct nlmsghdr nlh;
    struct inet_diag_req_v2 r;
  } req;
  memset(&req, 0, sizeof req);
  req.nlh.nlmsg_len = sizeof req;
  req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  req.nlh.nlmsg_flags = NLM_F_REQUEST;
  req.r.sdiag_family = (uint8_t)local->sa_family;
  req.r.sdiag_protocol = IPPROTO_TCP;
  req.r.idiag_states = ~0u;
  req.r.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  if (local->sa_family == AF_INET) {
    const struct sockaddr_in *l = (const void *)local, *p = (const void *)peer;
    req.r.id.idiag_sport = l->sin_port;
    req.r.id.idiag_dport = p->sin_port;
    memcpy(req.r.id.idiag_src, &l->sin_addr, 4);
    memcpy(req.r.id.idiag_dst, &p->sin_addr, 4);
  } else {
    const struct sockaddr_in6 *l = (const void *)local, *p = (const void *)peer;
    req.r.id.idiag_sport = l->sin6_port;
    req.r.id.idiag_dport = p->sin6_port;
    memcpy(req.r.id.idiag_src, &l->sin6_addr, 16);
    memcpy(req.r.id.idiag_dst, &p->sin6_addr, 16);
  }
  struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
  int rc = -ENOENT;
  if (FS_REAL(sendto)(nl, &req, sizeof req, 0, (struct sockaddr *)&sa, sizeof sa) < 0) {
    rc = -errno;
    goto out;
  }
  struct pollfd pfd = { nl, POLLIN, 0 };
  if (FS_REAL(poll)(&pfd, 1, 500) <= 0) {
    rc = -ETIMEDOUT;
    goto out;
  }
  long buf[1024];
  ssize_t n = FS_REAL(recv)(nl, buf, sizeof buf, MSG_DONTWAIT);
  if (n < 0) {
    rc = -errno;
    goto out;
  }
  for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
    if (h->nlmsg_type == NLMSG_ERROR || h->nlmsg_type == NLMSG_DONE)
      break;
    if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY && h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct inet_diag_msg))) {
      struct inet_diag_msg *m = NLMSG_DATA(h);
      *uid = m->idiag_uid;
      rc = 0;
      break;
    }
  }
out:
  fs_fdtab_close_internal(nl);
  return rc;
}

/* ---- item bookkeeping ------------------------------------------------- */

static int fs_rdv_watch(struct fs_rdv_item *it)
{
  fs_fdtab_set_internal(it->ufd, true); /* the application's blanket closes skip it */
  struct epoll_event ev = { .events = EPOLLIN, .data.ptr = it };
  return FS_REAL(epoll_ctl)(A.epfd, EPOLL_CTL_ADD, it->ufd, &ev) < 0 ? -errno : 0;
}

static void fs_rdv_drop(struct fs_rdv_item *it)
{
  struct fs_rdv_item **pp = &A.items;
  while (*pp && *pp != it)
    pp = &(*pp)->next;
  if (*pp)
    *pp = it->next;
  if (it->kind == K_SRV)
    A.npend--;
  if (it->ufd >= 0) {
    /* Leave the epoll set explicitly: close() alone does not when a forked
     * child still holds a copy of the socket, and the agent would then get
     * events for an item it has freed. */
    FS_REAL(epoll_ctl)(A.epfd, EPOLL_CTL_DEL, it->ufd, NULL);
    fs_fdtab_close_internal(it->ufd);
  }
  if (it->kind == K_SRV)
    fs_rdv_closefds(it->fds, 3);
  if (it->ch)
    fs_chan_detach(it->ch, false);
  if (it->c)
    fs_conn_put(it->c);
  free(it);
}

/* ---- server side ------------------------------------------------------ */

static void fs_rdv_srv_new(struct fs_rdv_item *l)
{
  int ufd = fs_fdtab_high(FS_REAL(accept4)(l->ufd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (ufd < 0)
    return;
  if (A.npend >= FS_RDV_MAX_PEND) { /* a flood: refuse, the clients stay on TCP */
    FS_REAL(close)(ufd);
    return;
  }
  struct fs_rdv_item *it = calloc(1, sizeof *it);
  if (!it) {
    FS_REAL(close)(ufd);
    return;
  }
  it->kind = K_SRV;
  it->ufd = ufd;
  it->state = S_WAIT_REQ;
  it->fds[0] = it->fds[1] = it->fds[2] = -1;
  it->shared_listener = l->c ? l->c->listener_shared : false;
  it->deadline = fs_clock_ns() + (uint64_t)FS_RDV_HOLD_MS * 1000000u;
  it->next = A.items;
  A.items = it;
  A.npend++;
  if (fs_rdv_watch(it) < 0)
    fs_rdv_drop(it);
}

/* Try to match a held request to an accepted connection and answer it. */
static bool fs_rdv_srv_try(struct fs_rdv_item *it)
{
  struct fs_conn *c = fs_sock_find((struct sockaddr *)&it->tp, (struct sockaddr *)&it->tl);
  if (!c) {
    if (it->shared_listener) {
      fs_rdv_reply(it->ufd, FS_REASON_NOT_OWNER, -1);
      fs_rdv_drop(it);
      return true;
    }
    return false; /* hold until accept() or the deadline */
  }
  if (!__atomic_load_n(&c->ready, __ATOMIC_ACQUIRE)) {
    fs_conn_put(c); /* accept() is still setting it up (opening hooks): hold */
    return false;
  }
  int status = fs_sock_may_attach(c, it->uid);
  struct fs_chan *ch = NULL;
  if (status == 0) {
    int rc = fs_shm_attach(it->fds[1], c->wake_fd, it->fds[2], &ch);
    if (rc < 0)
      status = rc == -ENOMEM ? FS_REASON_RESOURCES : FS_REASON_PROTOCOL;
    else
      it->fds[2] = -1; /* the channel owns the client's eventfd now */
  }
  fs_rdv_closefds(it->fds, 3);
  if (status != 0) {
    fs_log(FS_LOG_INFO, "rendezvous refused for fd %d: %s", c->fd, fs_reason_name(status));
    fs_rdv_reply(it->ufd, (uint32_t)status, -1);
    fs_conn_put(c);
    fs_rdv_drop(it);
    return true;
  }
  fs_rdv_reply(it->ufd, 0, c->wake_fd);
  it->c = c;
  it->ch = ch;
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
    if (n == (ssize_t)sizeof ack && nf == 0 && ack.magic == FS_RDV_MAGIC_ACK && ack.version == FS_RDV_VERSION) {
      if (fs_sock_attach(it->c, it->ch) == 0)
        it->ch = NULL;
    }
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
  struct fs_rdv_req req;
  ssize_t n = fs_rdv_recvfds(it->ufd, &req, sizeof req, it->fds, 3, &(int){ 0 });
  int nf = 0;
  for (int i = 0; i < 3; i++)
    nf += it->fds[i] >= 0;
  if (n == -EAGAIN)
    return;
  int status = n < 0 ? FS_REASON_PROTOCOL : fs_rdv_check_req(&req, (size_t)n, nf);
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
  /* The tcp dup proved the client's identity; we keep only its addresses. */
  fs_fdtab_close_internal(it->fds[0]);
  it->fds[0] = -1;
  it->state = S_HELD;
  fs_rdv_srv_try(it);
}

/* ---- client side ------------------------------------------------------ */

static int fs_rdv_cli_connect(struct fs_conn *c, uint32_t diag_uid, int *ufd_out)
{
  const struct sockaddr *peer = (const struct sockaddr *)&c->peer;
  struct sockaddr_storage t;
  const struct sockaddr *p4 = fs_addr_unmap(peer, &t);
  struct sockaddr_in6 any6 = { .sin6_family = AF_INET6, .sin6_port = htons(fs_addr_port(peer)) };
  const struct sockaddr *names[3] = { peer, peer, p4->sa_family == AF_INET ? (struct sockaddr *)&any6 : NULL };
  int ufd = fs_fdtab_high(FS_REAL(socket)(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (ufd < 0)
    return FS_REASON_RESOURCES;
  int reason = FS_REASON_NO_PEER;
  for (int i = 0; i < 3; i++) {
    if (!names[i])
      continue;
    struct sockaddr_un un = { .sun_family = AF_UNIX };
    int n = fs_rdv_name(un.sun_path, sizeof un.sun_path, names[i], i > 0);
    if (FS_REAL(connect)(ufd, (struct sockaddr *)&un, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n)) == 0) {
      struct ucred cr;
      socklen_t cl = sizeof cr;
      if (FS_REAL(getsockopt)(ufd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 || cr.uid != diag_uid) {
        reason = FS_REASON_NOT_OWNER;
        break;
      }
      *ufd_out = ufd;
      return 0;
    }
    if (errno == EAGAIN) {
      reason = FS_REASON_RESOURCES;
      break;
    }
  }
  FS_REAL(close)(ufd);
  return reason;
}

static void fs_rdv_cli_start(struct fs_conn *c)
{
  uint32_t uid;
  int reason = 0, ufd = -1, memfd = -1, dupfd = -1;
  struct fs_chan *ch = NULL;
  if (!fs_sock_may_upgrade(c))
    goto out_put;
  int rc = c->policy.fabric == FS_FABRIC_RDMA ? -ENOENT
                                               : fs_rdv_diag((struct sockaddr *)&c->peer, (struct sockaddr *)&c->local, &uid);
  if (rc == -ENOENT && c->policy.fabric != FS_FABRIC_SHM) {
    /* Another host (or rdma asked for): the rdma fabric, if this host has one. */
    if (!fs_rdmacm_available()) {
      reason = fs_rdmacm_fork_lost()                   ? FS_REASON_FORK
               : c->policy.fabric == FS_FABRIC_RDMA ? FS_REASON_NO_DEVICE
                                                    : FS_REASON_REMOTE_HOST;
      goto fail;
    }
    reason = fs_rdmacm_connect(c);
    if (reason == 0)
      return; /* the rdma rendezvous holds c's reference now */
    goto fail;
  }
  if (rc < 0) {
    reason = rc == -ENOENT ? FS_REASON_REMOTE_HOST : FS_REASON_ERROR;
    goto fail;
  }
  if (uid != geteuid() && !c->policy.any_uid) {
    reason = FS_REASON_PEER_UID;
    goto fail;
  }
  reason = fs_rdv_cli_connect(c, uid, &ufd);
  if (reason)
    goto fail;
  /* Pass a dup of our own socket, checked to still be this connection. */
  dupfd = fs_fdtab_move_high(FS_REAL(fcntl)(c->fd, F_DUPFD_CLOEXEC, 0));
  struct sockaddr_storage l, p;
  socklen_t ll = sizeof l, pl = sizeof p;
  if (dupfd < 0 || getsockname(dupfd, (struct sockaddr *)&l, &ll) < 0 ||
      getpeername(dupfd, (struct sockaddr *)&p, &pl) < 0 ||
      !fs_addr_eq((struct sockaddr *)&l, (struct sockaddr *)&c->local) ||
      !fs_addr_eq((struct sockaddr *)&p, (struct sockaddr *)&c->peer)) {
    reason = FS_REASON_ERROR;
    goto fail;
  }
  uint32_t ring = fs_shm_ring_size();
  if (fs_shm_create(ring, c->wake_fd, &memfd, &ch) == 0)
    memfd = fs_fdtab_move_high(memfd);
  else {
    reason = FS_REASON_RESOURCES;
    goto fail;
  }
  struct fs_rdv_req req = { FS_RDV_MAGIC_REQ, FS_RDV_VERSION, FS_FABRIC_SHM, ring, 0 };
  int fds[3] = { dupfd, memfd, c->wake_fd };
  if (fs_rdv_sendfds(ufd, &req, sizeof req, fds, 3) < 0) {
    reason = FS_REASON_NO_PEER;
    goto fail;
  }
  fs_fdtab_close_internal(dupfd);
  fs_fdtab_close_internal(memfd);
  struct fs_rdv_item *it = calloc(1, sizeof *it);
  if (!it) {
    reason = FS_REASON_RESOURCES;
    dupfd = memfd = -1;
    goto fail;
  }
  it->kind = K_CLI;
  it->ufd = ufd;
  it->c = c;
  it->ch = ch;
  it->deadline = fs_clock_ns() + (uint64_t)c->policy.timeout_ms * 1000000u;
  it->next = A.items;
  A.items = it;
  if (fs_rdv_watch(it) < 0)
    fs_rdv_drop(it);
  return;
fail:
  if (ch)
    fs_chan_detach(ch, false);
  if (dupfd >= 0)
    fs_fdtab_close_internal(dupfd);
  if (memfd >= 0)
    fs_fdtab_close_internal(memfd);
  if (ufd >= 0)
    FS_REAL(close)(ufd);
  fs_sock_upgrade_failed(c, reason);
out_put:
  fs_conn_put(c);
}

static void fs_rdv_cli_event(struct fs_rdv_item *it)
{
  struct fs_rdv_rep rep;
  int fds[1] = { -1 }, nf = 0;
  ssize_t n = fs_rdv_recvfds(it->ufd, &rep, sizeof rep, fds, 1, &nf);
  if (n == -EAGAIN)
    return;
  int reason = FS_REASON_PROTOCOL;
  if (n == (ssize_t)sizeof rep && rep.magic == FS_RDV_MAGIC_REP && rep.version == FS_RDV_VERSION) {
    if (rep.status == 0 && nf == 1) {
      struct fs_rdv_ack ack = { FS_RDV_MAGIC_ACK, FS_RDV_VERSION, 0 };
      fs_shm_set_peer(it->ch, fds[0]);
      fds[0] = -1;
      if (fs_rdv_sendfds(it->ufd, &ack, sizeof ack, NULL, 0) == 0 && fs_sock_attach(it->c, it->ch) == 0) {
        it->ch = NULL;
        fs_rdv_drop(it);
        return;
      }
      reason = FS_REASON_ERROR;
    } else if (rep.status > 0 && rep.status < FS_REASON_COUNT && nf == 0) {
      reason = (int)rep.status;
    }
  }
  if (fds[0] >= 0)
    fs_fdtab_close_internal(fds[0]);
  fs_sock_upgrade_failed(it->c, reason);
  fs_rdv_drop(it);
}

/* ---- the agent -------------------------------------------------------- */

static void fs_rdv_timeouts(void)
{
  uint64_t now = fs_clock_ns();
  struct fs_rdv_item *it = A.items, *next;
  for (; it; it = next) {
    next = it->next;
    if (it->kind == K_SRV && it->state == S_HELD && fs_rdv_srv_try(it))
      continue;
    if (it->deadline && now >= it->deadline) {
      if (it->kind == K_CLI)
        fs_sock_upgrade_failed(it->c, FS_REASON_TIMEOUT);
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

static void *fs_rdv_main(void *arg)
{
  (void)arg;
  struct epoll_event ev[16];
  pthread_mutex_lock(&A.lock);
  for (;;) {
    int timeout = fs_rdv_next_timeout(), t2 = fs_rdmacm_next_timeout();
    if (t2 >= 0 && (timeout < 0 || t2 < timeout))
      timeout = t2;
    int epfd = A.epfd;
    pthread_mutex_unlock(&A.lock);
    int n = FS_REAL(epoll_wait)(epfd, ev, 16, timeout);
    pthread_mutex_lock(&A.lock);
    for (int i = 0; i < n; i++) {
      struct fs_rdv_item *it = ev[i].data.ptr;
      enum fs_rdv_kind kind = it->kind;
      switch (kind) {
      case K_EVFD: {
        uint64_t v;
        (void)FS_REAL(read)(A.evfd, &v, sizeof v);
        break;
      }
      case K_LISTENER:
        fs_rdv_srv_new(it);
        break;
      case K_SRV:
        fs_rdv_srv_event(it);
        break;
      case K_CLI:
        fs_rdv_cli_event(it);
        break;
      case K_EXT:
        it->fn();
        break;
      }
      /* An item dropped above may be named again later in ev[]: stop
       * (level-triggered, the rest come back at once).  The kind was read
       * before the call, as the item may be gone now. */
      if (kind != K_EVFD && kind != K_LISTENER && kind != K_EXT)
        break;
    }
    pthread_mutex_lock(&A.qlock);
    struct fs_rdv_job *jobs = A.jobs;
    A.jobs = NULL;
    pthread_mutex_unlock(&A.qlock);
    while (jobs) {
      struct fs_rdv_job *j = jobs;
      jobs = j->next;
      if (j->kind == J_RESEND) {
        /* May block on TCP: drop the agent lock so fork and others go on. */
        pthread_mutex_unlock(&A.lock);
        fs_sockio_resend_job(j->c);
        fs_conn_put(j->c);
        pthread_mutex_lock(&A.lock);
      } else {
        fs_rdv_cli_start(j->c);
      }
      free(j);
    }
    fs_rdv_timeouts();
    fs_rdmacm_tick();
  }
  return NULL;
}

/* Start the agent (A.lock held). */
static int fs_rdv_start(void)
{
  if (A.running)
    return 0;
  A.epfd = FS_REAL(epoll_create1)(EPOLL_CLOEXEC);
  A.evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  fs_fdtab_set_internal(A.epfd, true);
  fs_fdtab_set_internal(A.evfd, true);
  if (A.epfd < 0 || A.evfd < 0)
    goto fail;
  A.evitem.kind = K_EVFD;
  A.evitem.ufd = A.evfd;
  struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &A.evitem };
  if (FS_REAL(epoll_ctl)(A.epfd, EPOLL_CTL_ADD, A.evfd, &ev) < 0)
    goto fail;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&at, 256 * 1024);
  pthread_t tid;
  int rc = pthread_create(&tid, &at, fs_rdv_main, NULL);
  pthread_attr_destroy(&at);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0)
    goto fail;
  A.running = true;
  return 0;
fail:
  fs_log(FS_LOG_WARN, "cannot start the rendezvous agent; staying on TCP");
  if (A.epfd >= 0)
    fs_fdtab_close_internal(A.epfd);
  if (A.evfd >= 0)
    fs_fdtab_close_internal(A.evfd);
  A.epfd = A.evfd = -1;
  return -EAGAIN;
}

static void fs_rdv_poke(void)
{
  uint64_t one = 1;
  if (A.evfd >= 0)
    (void)FS_REAL(write)(A.evfd, &one, sizeof one);
}

void fs_rdv_listen(struct fs_conn *c, int fd)
{
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
    return;
  struct sockaddr_un un = { .sun_family = AF_UNIX };
  int n = fs_rdv_name(un.sun_path, sizeof un.sun_path, (struct sockaddr *)&ss, fs_addr_is_any((struct sockaddr *)&ss));
  pthread_mutex_lock(&A.lock);
  for (struct fs_rdv_item *it = A.items; it; it = it->next)
    if (it->kind == K_LISTENER && !it->c && it->namelen == n && memcmp(it->name, un.sun_path, (size_t)n) == 0) {
      fs_conn_get(c); /* adopt the orphan left by an earlier listener */
      it->c = c;
      c->rdv = it;
      pthread_mutex_unlock(&A.lock);
      return;
    }
  pthread_mutex_unlock(&A.lock);
  int ufd = FS_REAL(socket)(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (ufd < 0)
    return;
  if (FS_REAL(bind)(ufd, (struct sockaddr *)&un, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n)) < 0 ||
      FS_REAL(listen)(ufd, 128) < 0) {
    fs_log(FS_LOG_INFO, "rendezvous name for port %u taken (%s); connections here stay on TCP",
           fs_addr_port((struct sockaddr *)&ss), strerror(errno));
    FS_REAL(close)(ufd);
    return;
  }
  struct fs_rdv_item *it = calloc(1, sizeof *it);
  if (!it) {
    FS_REAL(close)(ufd);
    return;
  }
  it->kind = K_LISTENER;
  it->ufd = ufd;
  it->namelen = n;
  memcpy(it->name, un.sun_path, (size_t)n);
  fs_conn_get(c);
  it->c = c;
  pthread_mutex_lock(&A.lock);
  if (fs_rdv_start() < 0 || fs_rdv_watch(it) < 0) {
    pthread_mutex_unlock(&A.lock);
    fs_conn_put(c);
    FS_REAL(close)(ufd);
    free(it);
    return;
  }
  it->next = A.items;
  A.items = it;
  c->rdv = it;
  pthread_mutex_unlock(&A.lock);
}

void fs_rdv_unlisten(struct fs_conn *c)
{
  pthread_mutex_lock(&A.lock);
  fs_rdmacm_unlisten(c);
  for (struct fs_rdv_item *it = A.items; it; it = it->next)
    if (it->kind == K_LISTENER && it->c == c) {
      /* Connections accepted from it may still upgrade (servers often close
       * the listener right after accept): the name stays served, as an
       * orphan, until a new listen on the same address adopts it. */
      c->rdv = NULL;
      it->c = NULL;
      fs_conn_put(c);
      break;
    }
  pthread_mutex_unlock(&A.lock);
}

static void fs_rdv_queue(struct fs_conn *c, enum fs_rdv_job_kind kind)
{
  struct fs_rdv_job *j = malloc(sizeof *j);
  if (!j) {
    if (kind == J_UPGRADE)
      fs_sock_upgrade_failed(c, FS_REASON_RESOURCES);
    else if (kind == J_RESEND)
      fs_sockio_resend_job(c); /* last resort: inline */
    return;
  }
  fs_conn_get(c);
  j->c = c;
  j->kind = kind;
  pthread_mutex_lock(&A.lock);
  int rc = fs_rdv_start();
  pthread_mutex_unlock(&A.lock);
  if (rc < 0) {
    if (kind == J_UPGRADE)
      fs_sock_upgrade_failed(c, FS_REASON_RESOURCES);
    else if (kind == J_RESEND)
      fs_sockio_resend_job(c);
    fs_conn_put(c);
    free(j);
    return;
  }
  pthread_mutex_lock(&A.qlock);
  j->next = A.jobs;
  A.jobs = j;
  pthread_mutex_unlock(&A.qlock);
  fs_rdv_poke();
}

void fs_rdv_upgrade(struct fs_conn *c)
{
  fs_rdv_queue(c, J_UPGRADE);
}

void fs_rdv_resend(struct fs_conn *c)
{
  fs_rdv_queue(c, J_RESEND);
}

void fs_rdv_listen_rdma(struct fs_conn *c)
{
  /* At once, not queued: a client that connects right after listen()
   * returns must find the rdma listener there, or it stays on TCP.  The
   * device probe this may do costs once per process. */
  pthread_mutex_lock(&A.lock);
  if (fs_rdv_start() == 0)
    fs_rdmacm_listen(c);
  pthread_mutex_unlock(&A.lock);
}

void fs_rdv_pause(void)
{
  pthread_mutex_lock(&A.lock);
}

void fs_rdv_resume(void)
{
  pthread_mutex_unlock(&A.lock);
}

void fs_rdv_accepted(void)
{
  if (__atomic_load_n(&A.npend, __ATOMIC_RELAXED) > 0 || fs_rdmacm_held())
    fs_rdv_poke();
}

void fs_rdv_kick(void)
{
  fs_rdv_poke();
}

int fs_rdv_watch_fd(int fd, void (*fn)(void))
{
  struct fs_rdv_item *it = calloc(1, sizeof *it);
  if (!it)
    return -ENOMEM;
  it->kind = K_EXT;
  it->ufd = fd;
  it->fn = fn;
  int rc = fs_rdv_watch(it);
  if (rc < 0)
    free(it); /* K_EXT items live as long as the agent; the child forgets them */
  return rc;
}

bool fs_rdv_exit_drain(uint64_t deadline_ns)
{
  /* The agent holds its lock across each batch, briefly: wait for it, but
   * never past the deadline (exit() may come from a thread that holds it
   * no longer, or from a signal handler on a thread that does). */
  while (pthread_mutex_trylock(&A.lock) != 0)
    if (!fs_clock_nap(deadline_ns, 100000))
      return false;
  bool done = !A.running || fs_rdmacm_exit_drain(deadline_ns);
  pthread_mutex_unlock(&A.lock); /* a later destructor may still close a listener */
  return done;
}

void fs_rdv_before_fork(void)
{
  pthread_mutex_lock(&A.lock);
  pthread_mutex_lock(&A.qlock);
}

void fs_rdv_after_fork(bool child)
{
  if (!child) {
    pthread_mutex_unlock(&A.qlock);
    pthread_mutex_unlock(&A.lock);
    return;
  }
  /* The child has no agent thread.  It does not serve the parent's
   * rendezvous names (the parent still does) and abandons in-flight
   * handshakes (their peers see the unix socket close in the parent too
   * only when the parent drops them; the parent goes on serving them). */
  struct fs_rdv_item *it = A.items;
  while (it) {
    struct fs_rdv_item *next = it->next;
    if (it->ufd >= 0)
      fs_fdtab_close_internal(it->ufd);
    if (it->kind == K_SRV)
      fs_rdv_closefds(it->fds, 3);
    if (it->ch) /* a mapping the child never attached: unmap only */
      it->ch->ops->release(it->ch);
    if (it->c) {
      if (it->kind == K_LISTENER)
        it->c->rdv = NULL;
      fs_conn_put(it->c);
    }
    free(it);
    it = next;
  }
  struct fs_rdv_job *j = A.jobs;
  while (j) {
    struct fs_rdv_job *next = j->next;
    fs_conn_put(j->c);
    free(j);
    j = next;
  }
  A.items = NULL;
  A.jobs = NULL;
  A.npend = 0;
  fs_rdmacm_after_fork_child();
  if (A.epfd >= 0)
    fs_fdtab_close_internal(A.epfd);
  if (A.evfd >= 0)
    fs_fdtab_close_internal(A.evfd);
  A.epfd = A.evfd = -1;
  A.running = false;
  pthread_mutex_init(&A.qlock, NULL);
  pthread_mutex_init(&A.lock, NULL);
}
