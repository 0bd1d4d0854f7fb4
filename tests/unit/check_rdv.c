/* Unit tests for fabric/shm/rdv: names, request validation, sock_diag lookups,
 * and a live rendezvous listener fed hostile requests: every one is refused
 * with a reply, and the real connection stays on TCP, unharmed. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pwd.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fabric/shm/rdv.h"
#include "fabric/diag.h"
#include "fabric/shm/rdvio.h"
#include "fabric/shm/shm.h"
#include "engine/adopt.h"
#include "engine/agent.h"
#include "base/addr.h"
#include "base/fdreg.h"
#include "base/reason.h"
#include "fabric/shm/rdv_int.h"
#include "engine/sock.h"
#include "engine/fdtab.h"
#include "base/real.h"
#include "tests/unit/check_run.h"

START_TEST(t_names)
{
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(80) };
  inet_pton(AF_INET, "10.1.2.3", &a.sin_addr);
  char n[108];
  int len = fs_rdv_name(n, sizeof n, (struct sockaddr *)&a, false);
  ck_assert_int_eq(n[0], 0);
  ck_assert_str_eq(n + 1, "fabsock1/4/10.1.2.3/80");
  ck_assert_int_eq(len, (int)strlen(n + 1) + 1);
  fs_rdv_name(n, sizeof n, (struct sockaddr *)&a, true);
  ck_assert_str_eq(n + 1, "fabsock1/4/*/80");
  struct sockaddr_in6 m = { .sin6_family = AF_INET6, .sin6_port = htons(8080) };
  inet_pton(AF_INET6, "::ffff:127.0.0.1", &m.sin6_addr);
  fs_rdv_name(n, sizeof n, (struct sockaddr *)&m, false);
  ck_assert_str_eq(n + 1, "fabsock1/4/127.0.0.1/8080"); /* mapped = IPv4 */
  inet_pton(AF_INET6, "::1", &m.sin6_addr);
  fs_rdv_name(n, sizeof n, (struct sockaddr *)&m, false);
  ck_assert_str_eq(n + 1, "fabsock1/6/[::1]/8080");
}
END_TEST

START_TEST(t_check_req)
{
  struct fs_rdv_req ok = { FS_RDV_MAGIC_REQ, FS_RDV_VERSION, FS_FABRIC_SHM, 1u << 20, 0, 0, 0 };
  ck_assert_int_eq(fs_rdv_check_req(&ok, FS_RDV_REQ_LEN, 3), 0);
  ck_assert_int_eq(fs_rdv_check_req(&ok, FS_RDV_REQ_LEN - 1, 3), FS_REASON_PROTOCOL);
  ck_assert_int_eq(fs_rdv_check_req(&ok, FS_RDV_REQ_LEN, 2), FS_REASON_PROTOCOL);
  ck_assert_int_eq(fs_rdv_check_req(&ok, FS_RDV_REQ_LEN, 4), FS_REASON_PROTOCOL);
  struct fs_rdv_req r = ok;
  r.magic = 1;
  ck_assert_int_eq(fs_rdv_check_req(&r, FS_RDV_REQ_LEN, 3), FS_REASON_PROTOCOL);
  r = ok;
  r.version = 9;
  ck_assert_int_eq(fs_rdv_check_req(&r, FS_RDV_REQ_LEN, 3), FS_REASON_VERSION);
  r = ok;
  r.ring_size = 3u << 20; /* not a power of two */
  ck_assert_int_eq(fs_rdv_check_req(&r, FS_RDV_REQ_LEN, 3), FS_REASON_PROTOCOL);
  r.ring_size = 1u << 30;
  ck_assert_int_eq(fs_rdv_check_req(&r, FS_RDV_REQ_LEN, 3), FS_REASON_PROTOCOL);
  r = ok;
  r.fabric = FS_FABRIC_RDMA;
  ck_assert_int_eq(fs_rdv_check_req(&r, FS_RDV_REQ_LEN, 3), FS_REASON_PROTOCOL);
  /* A doorbell: 24 bytes, flag, four fds, a slot in range; nothing else. */
  r = ok;
  r.flags = FS_RDV_F_BELL;
  r.slot = 65535;
  ck_assert_int_eq(fs_rdv_check_req(&r, FS_RDV_REQ_BELL_LEN, 4), 0);
  ck_assert_int_eq(fs_rdv_check_req(&r, FS_RDV_REQ_BELL_LEN, 3), FS_REASON_PROTOCOL);
  ck_assert_int_eq(fs_rdv_check_req(&r, FS_RDV_REQ_LEN, 4), FS_REASON_PROTOCOL);
  ck_assert_int_eq(fs_rdv_check_req(&r, FS_RDV_REQ_LEN, 3), FS_REASON_PROTOCOL);
  r.slot = 65536;
  ck_assert_int_eq(fs_rdv_check_req(&r, FS_RDV_REQ_BELL_LEN, 4), FS_REASON_PROTOCOL);
  r.slot = 0;
  r.flags = 3;
  ck_assert_int_eq(fs_rdv_check_req(&r, FS_RDV_REQ_BELL_LEN, 4), FS_REASON_PROTOCOL);
  r = ok; /* no flag: 16 bytes only */
  ck_assert_int_eq(fs_rdv_check_req(&r, FS_RDV_REQ_BELL_LEN, 3), FS_REASON_PROTOCOL);
}
END_TEST

/* A loopback TCP pair: listener lfd (tracked, rendezvous on), client cfd,
 * accepted sfd (tracked). */
static int lfd, cfd, sfd;
static struct sockaddr_in laddr;

static void pair_setup(void)
{
  lfd = FS_REAL(socket)(AF_INET, SOCK_STREAM, 0);
  fs_sock_created(lfd, AF_INET, SOCK_STREAM, 0);
  laddr = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  ck_assert_int_eq(FS_REAL(bind)(lfd, (struct sockaddr *)&laddr, sizeof laddr), 0);
  socklen_t l = sizeof laddr;
  getsockname(lfd, (struct sockaddr *)&laddr, &l);
  ck_assert_int_eq(FS_REAL(listen)(lfd, 16), 0);
  struct fs_conn *lc = fs_fdtab_get(lfd);
  ck_assert_ptr_nonnull(lc);
  fs_sock_listening(lc, lfd);
  cfd = FS_REAL(socket)(AF_INET, SOCK_STREAM, 0); /* the client is plain */
  ck_assert_int_eq(FS_REAL(connect)(cfd, (struct sockaddr *)&laddr, sizeof laddr), 0);
  sfd = FS_REAL(accept)(lfd, NULL, NULL);
  ck_assert_int_ge(sfd, 0);
  fs_sock_accepted(lc, lfd, sfd, 0, NULL, 0); /* getpeername tells */
  fs_conn_put(lc);
}

static int rdv_connect(void)
{
  struct sockaddr_un un = { .sun_family = AF_UNIX };
  int n = fs_rdv_name(un.sun_path, sizeof un.sun_path, (struct sockaddr *)&laddr, false);
  int u = FS_REAL(socket)(AF_UNIX, SOCK_SEQPACKET, 0);
  ck_assert_int_eq(FS_REAL(connect)(u, (struct sockaddr *)&un, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n)), 0);
  return u;
}

static int send_req(int u, const void *msg, size_t len, const int *fds, int nfds)
{
  struct iovec iov = { (void *)msg, len };
  char cbuf[CMSG_SPACE(4 * sizeof(int))] = { 0 };
  struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
  if (nfds) {
    mh.msg_control = cbuf;
    mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
    memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
  }
  return (int)FS_REAL(sendmsg)(u, &mh, 0);
}

/* The reply status, or -1 if the listener closed without one. */
static int reply_status(int u, int timeout_ms)
{
  struct pollfd p = { u, POLLIN, 0 };
  ck_assert_int_eq(FS_REAL(poll)(&p, 1, timeout_ms), 1);
  struct fs_rdv_rep rep;
  ssize_t n = FS_REAL(recv)(u, &rep, sizeof rep, 0);
  if (n != sizeof rep)
    return -1;
  ck_assert_uint_eq(rep.magic, FS_RDV_MAGIC_REP);
  return (int)rep.status;
}

static void assert_still_tcp(void)
{
  struct fs_conn *c = fs_fdtab_get(sfd);
  ck_assert_ptr_nonnull(c);
  ck_assert_ptr_null(c->chan);
  fs_conn_put(c);
  /* and the connection carries bytes unharmed */
  ck_assert_int_eq(FS_REAL(write)(cfd, "ping", 4), 4);
  char b[8];
  struct iovec v = { b, sizeof b };
  struct fs_io io = { .op = FS_IO_READ, .iov = &v, .iovcnt = 1 };
  c = fs_fdtab_get(sfd);
  ck_assert_int_eq(fs_sock_recv(c, sfd, &io), 4);
  fs_conn_put(c);
  ck_assert_int_eq(memcmp(b, "ping", 4), 0);
}

START_TEST(t_hostile_requests)
{
  pair_setup();
  /* garbage, no fds */
  int u = rdv_connect();
  send_req(u, "garbage!garbage!", 16, NULL, 0);
  ck_assert_int_eq(reply_status(u, 2000), FS_REASON_PROTOCOL);
  FS_REAL(close)(u);
  /* right shape, one fd */
  struct fs_rdv_req req = { FS_RDV_MAGIC_REQ, FS_RDV_VERSION, FS_FABRIC_SHM, 1u << 20, 0, 0, 0 };
  u = rdv_connect();
  send_req(u, &req, FS_RDV_REQ_LEN, &cfd, 1);
  ck_assert_int_eq(reply_status(u, 2000), FS_REASON_PROTOCOL);
  FS_REAL(close)(u);
  /* truncated */
  u = rdv_connect();
  send_req(u, &req, 5, NULL, 0);
  ck_assert_int_eq(reply_status(u, 2000), FS_REASON_PROTOCOL);
  FS_REAL(close)(u);
  /* the real socket, but an unsealed memfd of the wrong size */
  int mfd = memfd_create("bad", 0);
  ck_assert_int_eq(ftruncate(mfd, 4096), 0);
  int efd = eventfd(0, 0);
  int fds[3] = { cfd, mfd, efd };
  u = rdv_connect();
  send_req(u, &req, FS_RDV_REQ_LEN, fds, 3);
  ck_assert_int_eq(reply_status(u, 2000), FS_REASON_PROTOCOL);
  FS_REAL(close)(u);
  /* a valid memfd, but a socket that is not the peer of any of our
   * connections: held, then refused (never attached to the wrong one) */
  int ofd = FS_REAL(socket)(AF_INET, SOCK_STREAM, 0);
  FS_REAL(connect)(ofd, (struct sockaddr *)&laddr, sizeof laddr);
  int junk = FS_REAL(accept)(lfd, NULL, NULL); /* accepted untracked */
  struct fs_chan *ch;
  int goodmem;
  ck_assert_int_eq(fs_shm_create(1u << 20, efd, &goodmem, &ch), 0);
  int fds2[3] = { ofd, goodmem, efd };
  u = rdv_connect();
  send_req(u, &req, FS_RDV_REQ_LEN, fds2, 3);
  ck_assert_int_eq(reply_status(u, 5000), FS_REASON_TIMEOUT);
  FS_REAL(close)(u);
  /* a flood of silent connections does not stop the listener */
  int flood[300];
  for (int i = 0; i < 300; i++)
    flood[i] = rdv_connect();
  for (int i = 0; i < 300; i++)
    FS_REAL(close)(flood[i]);
  u = rdv_connect();
  send_req(u, "x", 1, NULL, 0);
  ck_assert_int_eq(reply_status(u, 3000), FS_REASON_PROTOCOL);
  FS_REAL(close)(u);
  assert_still_tcp();
  ch->ops->release(ch); /* never attached: just our view of it */
  FS_REAL(close)(goodmem);
  FS_REAL(close)(efd);
  FS_REAL(close)(junk);
  FS_REAL(close)(ofd);
  FS_REAL(close)(mfd);
}
END_TEST

/* The lowest descriptor number not in use. */
static int lowest_free(void)
{
  int x = FS_REAL(fcntl)(0, F_DUPFD, 0);
  ck_assert_int_ge(x, 0);
  FS_REAL(close)(x);
  return x;
}

/* A request whose descriptors the kernel cannot all install (the server at
 * its RLIMIT_NOFILE) is refused as "resources", and the server closes each
 * descriptor it did get exactly once: it once closed them a second time,
 * and under nginx at ulimit -n 1024 that second close hit the file nginx
 * had just opened at the same number (sendfile/close: EBADF). */
START_TEST(t_truncated_fds)
{
  pair_setup();
  struct fs_chan *ch;
  int efd = eventfd(0, EFD_CLOEXEC), mem;
  ck_assert_int_eq(fs_shm_create(1u << 20, efd, &mem, &ch), 0);
  int u = rdv_connect();
  /* The agent's accept first: past its descriptor budget it refuses at
   * accept and closes (`resources`, but not the path under test), and
   * under load it came after the limit below (sendmsg: EPIPE). */
  for (int i = 0; i < 3000 && !__atomic_load_n(&fs_rdv_a.npend, __ATOMIC_RELAXED); i++)
    usleep(1000);
  ck_assert_int_gt(__atomic_load_n(&fs_rdv_a.npend, __ATOMIC_RELAXED), 0);
  /* Room for one descriptor more. */
  int first = lowest_free();
  struct rlimit old, low;
  ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
  low = old;
  low.rlim_cur = (rlim_t)first + 2;
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
  struct fs_rdv_req req = { FS_RDV_MAGIC_REQ, FS_RDV_VERSION, FS_FABRIC_SHM, 1u << 20, 0, 0, 0 };
  int fds[3] = { cfd, mem, efd };
  ck_assert_int_eq(send_req(u, &req, FS_RDV_REQ_LEN, fds, 3), (int)FS_RDV_REQ_LEN);
  int status = reply_status(u, 3000);
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
  ck_assert_int_eq(status, FS_REASON_RESOURCES);
  /* Take the numbers the server used and freed, then make the agent drop
   * the handshake and serve another: none of ours may be closed by it. */
  int probe[4], np = 0;
  for (; np < 4; np++) {
    probe[np] = eventfd(0, EFD_CLOEXEC);
    ck_assert_int_ge(probe[np], 0);
  }
  FS_REAL(close)(u); /* the agent drops its side of the handshake now */
  int u2 = rdv_connect();
  send_req(u2, "x", 1, NULL, 0);
  ck_assert_int_eq(reply_status(u2, 3000), FS_REASON_PROTOCOL);
  for (int i = 0; i < np; i++)
    ck_assert_msg(FS_REAL(fcntl)(probe[i], F_GETFD, 0) >= 0, "descriptor %d closed by the library", probe[i]);
  for (int i = 0; i < np; i++)
    FS_REAL(close)(probe[i]);
  FS_REAL(close)(u2);
  assert_still_tcp();
  ch->ops->release(ch);
  FS_REAL(close)(mem);
  FS_REAL(close)(efd);
}
END_TEST

/* A valid request for the accepted sfd, on a rendezvous connection of its
 * own (u), with the client's side of the channel (ch, mem, efd). */
struct vreq {
  int u, mem, efd;
  struct fs_chan *ch;
};

static void vreq_send(struct vreq *r)
{
  r->efd = eventfd(0, EFD_CLOEXEC);
  ck_assert_int_eq(fs_shm_create(1u << 20, r->efd, &r->mem, &r->ch), 0);
  r->u = rdv_connect();
  struct fs_rdv_req req = { FS_RDV_MAGIC_REQ, FS_RDV_VERSION, FS_FABRIC_SHM, 1u << 20, 0, 0, 0 };
  int fds[3] = { cfd, r->mem, r->efd };
  ck_assert_int_eq(send_req(r->u, &req, FS_RDV_REQ_LEN, fds, 3), (int)FS_RDV_REQ_LEN);
}

static void vreq_free(struct vreq *r)
{
  FS_REAL(close)(r->u);
  r->ch->ops->release(r->ch);
  FS_REAL(close)(r->mem);
  FS_REAL(close)(r->efd);
}

/* No reply on u for a while: the request is held.  (It cannot come sooner
 * under load: the hold lasts a quarter of the connection's timeout.) */
static void assert_held(int u)
{
  struct pollfd p = { u, POLLIN, 0 };
  int n = FS_REAL(poll)(&p, 1, 300);
  ck_assert_msg(n == 0, "the request was answered (poll %d) before the connection was used", n);
}

static struct fs_chan *sfd_chan(void)
{
  struct fs_conn *c = fs_fdtab_get(sfd);
  ck_assert_ptr_nonnull(c);
  struct fs_chan *ch = __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE);
  fs_conn_put(c);
  return ch;
}

/* pair_setup, with sfd's set-up bound (policy timeout) ms. */
static void pair_setup_timeout(uint32_t ms)
{
  pair_setup();
  struct fs_conn *c = fs_fdtab_get(sfd);
  ck_assert_ptr_nonnull(c);
  c->policy.timeout_ms = ms;
  fs_conn_put(c);
}

/* A request for a connection this process accepted but has not used yet is
 * held until its first use (node cluster's primary accepts and hands each
 * connection to a worker without touching it: attached there first, it
 * went back to TCP for good when handed on), then answered at once. */
START_TEST(t_held_until_first_use)
{
  pair_setup_timeout(600000);
  struct vreq r;
  vreq_send(&r);
  assert_held(r.u);
  ck_assert_ptr_null(sfd_chan());
  /* The first use: a receive that finds nothing. */
  char b[4];
  struct iovec v = { b, sizeof b };
  struct fs_io io = { .op = FS_IO_RECV, .flags = MSG_DONTWAIT, .iov = &v, .iovcnt = 1 };
  struct fs_conn *c = fs_fdtab_get(sfd);
  ck_assert_int_eq(fs_sock_recv(c, sfd, &io), -EAGAIN);
  fs_conn_put(c);
  ck_assert_int_eq(reply_status(r.u, 10000), 0);
  ck_assert_ptr_nonnull(sfd_chan());
  vreq_free(&r);
}
END_TEST

/* Handed on unused (SCM_RIGHTS): the held request is answered not-owner,
 * so that the client looks for the process it went to. */
START_TEST(t_held_then_handed_on)
{
  pair_setup_timeout(600000);
  struct vreq r;
  vreq_send(&r);
  assert_held(r.u);
  char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
  struct msghdr mh = { .msg_control = cbuf, .msg_controllen = sizeof cbuf };
  struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &sfd, sizeof sfd);
  fs_adopt_scm_sent(&mh);
  ck_assert_int_eq(reply_status(r.u, 10000), FS_REASON_NOT_OWNER);
  ck_assert_ptr_null(sfd_chan());
  vreq_free(&r);
}
END_TEST

/* Never used: after a quarter of its timeout the connection takes the
 * channel anyway (a busy server, not a hand-over). */
START_TEST(t_held_unused_attaches_later)
{
  pair_setup_timeout(200);
  struct vreq r;
  vreq_send(&r);
  ck_assert_int_eq(reply_status(r.u, 10000), 0);
  ck_assert_ptr_nonnull(sfd_chan());
  vreq_free(&r);
}
END_TEST

START_TEST(t_diag)
{
  pair_setup();
  struct sockaddr_storage l, p;
  socklen_t ll = sizeof l, pl = sizeof p;
  getsockname(cfd, (struct sockaddr *)&l, &ll);
  getpeername(cfd, (struct sockaddr *)&p, &pl);
  uint32_t uid = 12345;
  /* the server end: local = client's peer, peer = client's local */
  uint32_t inode = 0;
  uint8_t st = 0;
  ck_assert_int_eq(fs_diag_lookup((struct sockaddr *)&p, (struct sockaddr *)&l, &uid, &inode, &st), 0);
  ck_assert_uint_eq(uid, geteuid());
  ck_assert_uint_ne(inode, 0); /* held by this process */
  ck_assert_uint_eq(st, TCP_ESTABLISHED);
  ck_assert(!fs_diag_ended(0, inode, st, false));
  struct sockaddr_in nowhere = { .sin_family = AF_INET, .sin_port = htons(9) };
  inet_pton(AF_INET, "192.0.2.1", &nowhere.sin_addr);
  ck_assert_int_eq(fs_diag_lookup((struct sockaddr *)&nowhere, (struct sockaddr *)&l, &uid, NULL, NULL), -ENOENT);
  /* The client closed first: the server end in CLOSE_WAIT is still held,
   * and one in an accept queue shows the same state: not taken for closed. */
  FS_REAL(close)(cfd);
  for (int i = 0; i < 200 && st != TCP_CLOSE_WAIT; i++) {
    ck_assert_int_eq(fs_diag_lookup((struct sockaddr *)&p, (struct sockaddr *)&l, &uid, &inode, &st), 0);
    usleep(1000);
  }
  ck_assert_uint_eq(st, TCP_CLOSE_WAIT);
  ck_assert(!fs_diag_ended(0, inode, st, false));
  /* The server end closed (no process holds it: an orphan in LAST_ACK, or
   * gone): what the shm fabric's peer_gone takes for a dead peer, and the
   * rendezvous for a connection that ended. */
  FS_REAL(close)(sfd);
  int rc = fs_diag_lookup((struct sockaddr *)&p, (struct sockaddr *)&l, &uid, &inode, &st);
  ck_assert_msg(fs_diag_ended(rc, inode, st, true), "rc %d inode %u state %u", rc, inode, st);
  /* Gone, or found as the listener on its port (state LISTEN, inode not
   * 0): not taken for the end of a connection not known to be accepted. */
  if (rc == 0 && st == TCP_LISTEN)
    ck_assert(!fs_diag_ended(rc, inode, st, false));
}
END_TEST

/* A request for a connection this process accepted and closed already (a
 * connection per request, upgrading at once) is answered `closed` at once:
 * held to its deadline, such requests filled the listener's slots and the
 * connections after them stayed on TCP. */
START_TEST(t_closed_before_the_request)
{
  pair_setup_timeout(600000);
  struct sockaddr_storage l, p;
  socklen_t ll = sizeof l, pl = sizeof p;
  getsockname(cfd, (struct sockaddr *)&l, &ll);
  getpeername(cfd, (struct sockaddr *)&p, &pl);
  struct fs_conn *t = fs_fdtab_take(sfd);
  ck_assert_ptr_nonnull(t);
  fs_sock_close(t, sfd);
  FS_REAL(close)(sfd);
  uint32_t uid, inode = 1;
  uint8_t st = 0;
  int rc = 0;
  for (int i = 0; i < 200; i++) { /* the orphan's state once its FIN is out */
    rc = fs_diag_lookup((struct sockaddr *)&p, (struct sockaddr *)&l, &uid, &inode, &st);
    if (fs_diag_ended(rc, inode, st, false))
      break;
    usleep(1000);
  }
  ck_assert_msg(fs_diag_ended(rc, inode, st, false), "rc %d inode %u state %u", rc, inode, st);
  struct vreq r;
  vreq_send(&r);
  /* The first look answers it, not the hold's end (timeout). */
  ck_assert_int_eq(reply_status(r.u, 10000), FS_REASON_CLOSED);
  vreq_free(&r);
}
END_TEST

/* The connecting end's application closes the connection while its
 * request is held (here: the accepted end unused, held until its first
 * use, a quarter of a 600 s bound): the client lets the request go at its
 * next tick and the server drops its side on the EOF, where both waited for
 * the reply or their bounds (the client's 600 s too). */
START_TEST(t_client_closed_lets_go)
{
  pair_setup_timeout(600000);
  FS_REAL(close)(cfd); /* a tracked client instead of pair_setup's plain one */
  cfd = FS_REAL(socket)(AF_INET, SOCK_STREAM, 0);
  fs_sock_created(cfd, AF_INET, SOCK_STREAM, 0);
  ck_assert_int_eq(FS_REAL(connect)(cfd, (struct sockaddr *)&laddr, sizeof laddr), 0);
  struct fs_conn *cc = fs_fdtab_get(cfd);
  ck_assert_ptr_nonnull(cc);
  fs_sock_connect_done(cc, cfd, 0, (struct sockaddr *)&laddr, sizeof laddr);
  cc->policy.timeout_ms = 600000;
  int s2 = FS_REAL(accept)(lfd, NULL, NULL);
  ck_assert_int_ge(s2, 0);
  struct fs_conn *lc = fs_fdtab_get(lfd);
  fs_sock_accepted(lc, lfd, s2, 0, NULL, 0);
  fs_conn_put(lc);
  struct fs_conn *sc = fs_fdtab_get(s2);
  ck_assert_ptr_nonnull(sc);
  sc->policy.timeout_ms = 600000;
  fs_conn_put(sc);
  fs_agent_upgrade(cc);
  int i;
  for (i = 0; i < 1000 && __atomic_load_n(&fs_rdv_a.npend, __ATOMIC_ACQUIRE) == 0; i++)
    usleep(10000);
  ck_assert_msg(__atomic_load_n(&fs_rdv_a.npend, __ATOMIC_ACQUIRE) > 0, "the request never reached the server");
  usleep(100000);
  ck_assert_int_gt(__atomic_load_n(&fs_rdv_a.npend, __ATOMIC_ACQUIRE), 0); /* held: s2 is unused */
  struct fs_conn *t = fs_fdtab_take(cfd);
  ck_assert_ptr_nonnull(t);
  fs_sock_close(t, cfd);
  FS_REAL(close)(cfd);
  cfd = -1;
  for (i = 0; i < 1000 && __atomic_load_n(&fs_rdv_a.npend, __ATOMIC_ACQUIRE) > 0; i++)
    usleep(10000);
  ck_assert_msg(__atomic_load_n(&fs_rdv_a.npend, __ATOMIC_ACQUIRE) == 0, "the server still holds the request");
  /* Let go for its close, not answered at the hold's end (2 s: timeout). */
  for (i = 0; i < 1000 && __atomic_load_n(&cc->reason, __ATOMIC_ACQUIRE) != FS_REASON_CLOSED; i++)
    usleep(10000);
  ck_assert_str_eq(fs_reason_name(cc->reason), "closed");
  fs_conn_put(cc);
  t = fs_fdtab_take(s2);
  fs_sock_close(t, s2);
  FS_REAL(close)(s2);
}
END_TEST

/* An accepted end whose peer is on another host, where no fabric of its
 * policy reaches another host (here: shm alone), says remote-host once it
 * crosses its threshold, not pending; it is not given up before its time
 * (a rendezvous may still come: a peer of ours that bound another of our
 * addresses), and at its give-up it keeps that reason (it said
 * peer-no-fabsock of a peer that runs libfabsock on a host without rdma). */
START_TEST(t_remote_peer_says_so)
{
  pair_setup();
  struct fs_conn *c = fs_fdtab_get(sfd);
  ck_assert_ptr_nonnull(c);
  c->policy.fabric = FS_FABRIC_SHM;
  c->tcp_rx = c->policy.upgrade_bytes;
  struct sockaddr_in far = { .sin_family = AF_INET, .sin_port = htons(40000) };
  inet_pton(AF_INET, "192.0.2.7", &far.sin_addr);
  struct sockaddr_storage real_peer = c->peer;
  memcpy(&c->peer, &far, sizeof far);
  ck_assert_int_eq(c->reason, FS_REASON_PENDING);
  fs_sock_maybe_upgrade(c, false);
  ck_assert_int_eq(c->reason, FS_REASON_REMOTE_HOST);
  ck_assert(!c->no_upgrade);
  ck_assert_int_eq(fs_sock_may_attach(c, geteuid()), 0);
  c->crossed_ns -= 600ull * 1000000000u; /* past any give-up */
  fs_sock_maybe_upgrade(c, false);
  ck_assert(c->no_upgrade);
  ck_assert_int_eq(c->reason, FS_REASON_REMOTE_HOST);
  fs_conn_put(c);
  /* A peer on this host (loopback here; or the address it dialled): pending. */
  FS_REAL(close)(cfd);
  FS_REAL(close)(sfd);
  FS_REAL(close)(lfd);
  pair_setup();
  c = fs_fdtab_get(sfd);
  c->policy.fabric = FS_FABRIC_SHM;
  c->tcp_rx = c->policy.upgrade_bytes;
  ck_assert(fs_addr_eq((struct sockaddr *)&c->peer, (struct sockaddr *)&real_peer) ||
            fs_addr_is_loopback((struct sockaddr *)&c->peer));
  fs_sock_maybe_upgrade(c, false);
  ck_assert_int_eq(c->reason, FS_REASON_PENDING);
  memcpy(&c->peer, &far, sizeof far); /* the peer dialled our own address from it */
  memcpy(&c->local, &far, sizeof far);
  c->crossed_ns = 0;
  fs_sock_maybe_upgrade(c, false);
  ck_assert_int_eq(c->reason, FS_REASON_PENDING);
  fs_conn_put(c);
}
END_TEST

/* One holder query (rdv.h) on a fresh connection to the listener's name:
 * the reply's status, and its pid in *pid. */
static int ask_who(const void *q, size_t len, const int *fds, int nfds, uint32_t *pid)
{
  int u = rdv_connect();
  ck_assert_int_eq(send_req(u, q, len, fds, nfds), (int)len);
  struct pollfd p = { u, POLLIN, 0 };
  ck_assert_int_eq(FS_REAL(poll)(&p, 1, 3000), 1);
  struct fs_rdv_rep rep;
  ck_assert_int_eq(FS_REAL(recv)(u, &rep, sizeof rep, 0), (ssize_t)sizeof rep);
  ck_assert_uint_eq(rep.magic, FS_RDV_MAGIC_REP);
  FS_REAL(close)(u);
  *pid = rep.pad2;
  return (int)rep.status;
}

/* A client in a chroot cannot read the stat tables: it asks the listener's
 * process who holds the peer's socket.  Here a child forked with the
 * accepted socket lists it (this process is never its own answer): its pid
 * comes back; an inode nobody lists is "pending"; a malformed query gets
 * no pid, and one with descriptors is a bad request.  The connection stays
 * on TCP, unharmed. */
START_TEST(t_holder_query)
{
  pair_setup();
  struct stat st;
  ck_assert_int_eq(fstat(sfd, &st), 0);
  uint32_t pid = 1;
  struct fs_rdv_who q = { FS_RDV_MAGIC_WHO, FS_RDV_VERSION, 0, (uint32_t)st.st_ino, 0 };
  ck_assert_int_eq(ask_who(&q, sizeof q, NULL, 0, &pid), FS_REASON_PENDING);
  ck_assert_uint_eq(pid, 0);
  int go[2];
  ck_assert_int_eq(pipe(go), 0);
  fs_sock_before_fork(true);
  pid_t child = fork();
  fs_sock_after_fork(child);
  if (child == 0) {
    /* Its table stays its own until its end crosses the threshold
     * (engine/sockfork.c): as if it had. */
    fs_sock_forked_crossed();
    char b;
    (void)!FS_REAL(read)(go[0], &b, 1); /* until the parent is done */
    _exit(0);
  }
  int status = -1;
  for (int i = 0; i < 200 && (status = ask_who(&q, sizeof q, NULL, 0, &pid)) != FS_REASON_NOT_OWNER; i++)
    usleep(10000);
  ck_assert_int_eq(status, FS_REASON_NOT_OWNER);
  ck_assert_uint_eq(pid, (uint32_t)child);
  struct fs_rdv_who bad = q;
  bad.version = 7;
  ck_assert_int_eq(ask_who(&bad, sizeof bad, NULL, 0, &pid), FS_REASON_NO_PEER);
  ck_assert_uint_eq(pid, 0);
  bad = q;
  bad.inode = 0;
  ck_assert_int_eq(ask_who(&bad, sizeof bad, NULL, 0, &pid), FS_REASON_NO_PEER);
  ck_assert_int_eq(ask_who(&q, sizeof q, &cfd, 1, &pid), FS_REASON_PROTOCOL);
  ck_assert_int_eq(ask_who(&q, sizeof q - 1, NULL, 0, &pid), FS_REASON_PROTOCOL);
  ck_assert_int_eq(FS_REAL(write)(go[1], "x", 1), 1);
  ck_assert_int_eq(waitpid(child, &status, 0), child);
  assert_still_tcp();
}
END_TEST

/* A listener name served by another uid than the peer socket's: a prefork
 * master whose workers run as another user, or a squatter.  The dial says
 * so (the client then asks the holder, checked by pid and uid) and sends
 * nothing: the name's server reads no byte.  Root only (a second uid). */
START_TEST(t_name_of_another_uid)
{
  struct passwd *pw = getpwnam("nobody");
  if (geteuid() != 0 || !pw) {
    fprintf(stderr, "# SKIP t_name_of_another_uid: needs root and a user nobody\n");
    return;
  }
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(1) };
  inet_pton(AF_INET, "127.77.0.1", &a.sin_addr); /* nobody else's name */
  int ready[2], got[2];
  ck_assert_int_eq(pipe(ready), 0);
  ck_assert_int_eq(pipe(got), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) { /* the name's server, as nobody: count what it is sent */
    alarm(20); /* never outlive a failed test */
    if (setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0)
      _exit(2);
    int l = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    struct sockaddr_un un = { .sun_family = AF_UNIX };
    int n = fs_rdv_name(un.sun_path, sizeof un.sun_path, (struct sockaddr *)&a, false);
    if (bind(l, (struct sockaddr *)&un, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n)) < 0 ||
        listen(l, 4) < 0 || write(ready[1], "r", 1) != 1)
      _exit(3);
    int c = accept(l, NULL, NULL);
    char buf[256];
    ssize_t r = c < 0 ? -1 : recv(c, buf, sizeof buf, 0); /* 0: closed having sent nothing */
    char v = r == 0 ? '0' : 'x';
    _exit(write(got[1], &v, 1) == 1 ? 0 : 4);
  }
  char b;
  ck_assert_int_eq(read(ready[0], &b, 1), 1);
  int ufd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(ufd, 0);
  ck_assert_int_eq(fs_rdv_dial_names((struct sockaddr *)&a, 0, ufd), FS_RDV_OTHER_UID);
  close(ufd);
  ck_assert_int_eq(read(got[0], &b, 1), 1);
  ck_assert_int_eq(b, '0');
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  close(ready[0]), close(ready[1]), close(got[0]), close(got[1]);
}
END_TEST

/* The fd of ours bound to the listener's rendezvous name, -1 if none. */
static int rdv_bound_fd(void)
{
  struct sockaddr_un want = { .sun_family = AF_UNIX };
  int n = fs_rdv_name(want.sun_path, sizeof want.sun_path, (struct sockaddr *)&laddr, false);
  socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n);
  for (int fd = 0; fd < 65536; fd++) {
    struct sockaddr_un un;
    socklen_t l = sizeof un;
    int listening = 0;
    socklen_t ol = sizeof listening;
    if (getsockname(fd, (struct sockaddr *)&un, &l) == 0 && un.sun_family == AF_UNIX && l == len &&
        memcmp(un.sun_path, want.sun_path, (size_t)n) == 0 &&
        getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ol) == 0 && listening)
      return fd;
  }
  return -1;
}

/* A server that drops its privileges for good (setuid) serves its names
 * again from new sockets, the library's like every socket it keeps
 * (counted in the fd budget; the application's closefrom skips them).  One
 * paused at the time (FS_RDV_MAX_PEND rendezvous in flight) was bound and
 * left unmarked until it was watched again.  Root only (a second uid). */
START_TEST(t_paused_listener_rebound_after_setuid_is_ours)
{
  struct passwd *pw = getpwnam("nobody");
  if (geteuid() != 0 || !pw) {
    fprintf(stderr, "# SKIP t_paused_listener_rebound_after_setuid_is_ours: needs root and a user nobody\n");
    return;
  }
  pid_t pid = fork();
  if (pid == 0) {
    alarm(20);
    pair_setup();
    /* Rendezvous connections that send nothing: in flight until their
     * deadline, and the listener pauses at the cap. */
    for (int i = 0; i <= FS_RDV_MAX_PEND; i++)
      if (rdv_connect() < 0)
        _exit(2);
    for (int i = 0; i < 500 && __atomic_load_n(&fs_rdv_a.npaused, __ATOMIC_ACQUIRE) == 0; i++)
      usleep(10000);
    if (__atomic_load_n(&fs_rdv_a.npaused, __ATOMIC_ACQUIRE) == 0)
      _exit(3);
    if (setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0)
      _exit(4);
    fs_agent_creds_changed(); /* what the interposed setuid() calls */
    int fd = rdv_bound_fd();
    if (fd < 0)
      _exit(5);
    _exit(fs_fdreg_is(fd) ? 0 : 6);
  }
  ck_child_exits_ok(pid);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("rdv");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, t_names);
  tcase_add_test(tc, t_name_of_another_uid);
  tcase_add_test(tc, t_paused_listener_rebound_after_setuid_is_ours);
  tcase_add_test(tc, t_check_req);
  tcase_add_test(tc, t_diag);
  tcase_add_test(tc, t_remote_peer_says_so);
  tcase_add_test(tc, t_hostile_requests);
  tcase_add_test(tc, t_holder_query);
  tcase_add_test(tc, t_truncated_fds);
  tcase_add_test(tc, t_held_until_first_use);
  tcase_add_test(tc, t_held_then_handed_on);
  tcase_add_test(tc, t_held_unused_attaches_later);
  tcase_add_test(tc, t_closed_before_the_request);
  tcase_add_test(tc, t_client_closed_lets_go);
  suite_add_tcase(s, tc);
  return run_suite(s, false);
}
