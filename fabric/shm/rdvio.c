/* The shm rendezvous's plumbing: names, descriptors over unix sockets,
 * sock_diag.  See fabric/shm/rdv.h for the protocol.  Everything here uses
 * FS_REAL() only. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/addr.h"
#include "base/fdreg.h"
#include "base/real.h"
#include "base/reason.h"
#include "base/stat.h"
#include "base/bell.h"
#include "fabric/shm/rdv.h"
#include "fabric/shm/rdvio.h"
#include "fabric/shm/shm.h"

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
  int n = snprintf(buf + 1, len - 1, "fabsock1/%c/%s/%u", fs_addr_family(a) == AF_INET6 ? '6' : '4', ip,
                   fs_addr_port(a));
  buf[0] = 0;
  return n + 1;
}

int fs_rdv_proc_name(char *buf, size_t len, int pid)
{
  int n = snprintf(buf + 1, len - 1, "fabsock1/p/%d", pid);
  buf[0] = 0;
  return n + 1;
}

/* ---- small I/O helpers ------------------------------------------------ */

int fs_rdv_unix_socket(void)
{
  return FS_FDREG_MAKE_HIGH(FS_REAL(socket)(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
}

void fs_rdv_reply(int ufd, uint32_t status, int efd)
{
  struct fs_rdv_rep rep = { FS_RDV_MAGIC_REP, FS_RDV_VERSION, 0, status, 0 };
  (void)fs_rdv_sendfds(ufd, &rep, sizeof rep, &efd, status == 0 ? 1 : 0);
}

void fs_rdv_refuse(int ufd, uint32_t status)
{
  fs_rdv_reply(ufd, status, -1);
  /* Its request, if there: closed unread, it reset the client's socket,
   * which then lost the reply (ECONNRESET).  Read without room for its
   * descriptors, the kernel drops them. */
  char req[64];
  (void)FS_REAL(recv)(ufd, req, sizeof req, MSG_DONTWAIT);
  FS_REAL(close)(ufd);
}

/* A burst of 100 clients left 100 in the TCP listener's accept queue, and
 * rendezvous taken meanwhile held what their clients passed until accept()
 * (FS_RDV_HOLD_MS), which then failed with EMFILE: the queue counts. */
int fs_rdv_app_fds(int any_fd, int tcp_fd)
{
  fs_fdreg_make_begin(); /* a number of the application's, for a moment */
  int n = FS_REAL(fcntl)(any_fd, F_DUPFD_CLOEXEC, 0);
  if (n >= 0)
    FS_REAL(close)(n);
  fs_fdreg_make_end();
  if (n < 0)
    return INT_MAX / 2;
  struct tcp_info ti;
  socklen_t len = sizeof ti;
  if (tcp_fd >= 0 && FS_REAL(getsockopt)(tcp_fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 && ti.tcpi_state == TCP_LISTEN)
    n += (int)ti.tcpi_unacked;
  return n;
}

void fs_rdv_accept(int ufd, int efd, const struct fs_rdv_bell *b)
{
  bool bell = b->efd >= 0;
  struct fs_rdv_rep rep = { FS_RDV_MAGIC_REP, FS_RDV_VERSION, bell ? FS_RDV_F_BELL : 0, 0, bell ? b->slot : 0 };
  int fds[2] = { bell ? b->efd : efd, b->memfd };
  (void)fs_rdv_sendfds(ufd, &rep, sizeof rep, fds, bell ? 2 : 1);
}

int fs_rdv_bind_name(int ufd, const char *name, int n)
{
  struct sockaddr_un un = { .sun_family = AF_UNIX };
  memcpy(un.sun_path, name, (size_t)n);
  socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n);
  return FS_REAL(bind)(ufd, (struct sockaddr *)&un, len) < 0 || FS_REAL(listen)(ufd, SOMAXCONN) < 0 ? -1 : 0;
}

int fs_rdv_sendfds(int ufd, const void *msg, size_t len, const int *fds, int nfds)
{
  struct iovec iov = { (void *)msg, len };
  union {
    char buf[CMSG_SPACE(4 * sizeof(int))]; /* a request with a doorbell passes 4 */
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
ssize_t fs_rdv_recvfds(int ufd, void *msg, size_t len, int *fds, int max, int *nfds)
{
  char big[64];
  struct iovec iov = { big, sizeof big };
  union {
    char buf[CMSG_SPACE(8 * sizeof(int))];
    struct cmsghdr align;
  } u;
  struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
  *nfds = 0;
  fs_fdreg_make_begin(); /* the fds come at the lowest free numbers */
  ssize_t r = FS_REAL(recvmsg)(ufd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (r < 0) {
    r = -errno;
    fs_fdreg_make_end();
    return r;
  }
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
      continue;
    int n = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    int got[8];
    memcpy(got, CMSG_DATA(cm), (size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) {
      if (*nfds < max) {
        got[i] = fs_fdreg_move_high(got[i]);
        fds[(*nfds)++] = got[i];
      } else {
        FS_REAL(close)(got[i]);
        *nfds = max + 1; /* too many: reported as a protocol error */
      }
    }
  }
  fs_fdreg_make_end();
  if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || (size_t)r > len) {
    /* Closed here, and forgotten here: the caller's fds[] is its own list
     * of what to close, and a second close would hit whatever descriptor
     * the application has opened at that number meanwhile. */
    for (int i = 0; i < *nfds && i < max; i++) {
      fs_fdreg_close(fds[i]);
      fds[i] = -1;
    }
    *nfds = 0;
    /* Our buffer holds 8 descriptors: with fewer sent, a truncated control
     * message means the kernel could not install them (RLIMIT_NOFILE). */
    return (mh.msg_flags & MSG_CTRUNC) && !(mh.msg_flags & MSG_TRUNC) && (size_t)r <= len ? -EMFILE : -EPROTO;
  }
  memcpy(msg, big, (size_t)r);
  return r;
}

void fs_rdv_closefds(int *fds, int n)
{
  for (int i = 0; i < n; i++)
    if (fds[i] >= 0) {
      fs_fdreg_close(fds[i]); /* received fds are marked ours (fs_rdv_recvfds) */
      fds[i] = -1;
    }
}

/* ---- requests --------------------------------------------------------- */

int fs_rdv_check_req(const struct fs_rdv_req *r, size_t len, int nfds)
{
  if (len < FS_RDV_REQ_LEN || r->magic != FS_RDV_MAGIC_REQ)
    return FS_REASON_PROTOCOL;
  if (r->version != FS_RDV_VERSION)
    return FS_REASON_VERSION;
  bool plain = len == FS_RDV_REQ_LEN && nfds == 3 && r->flags == 0;
  bool bell = len == FS_RDV_REQ_BELL_LEN && nfds == 4 && r->flags == FS_RDV_F_BELL && r->slot < FS_BELL_SLOTS;
  if (!(plain || bell) || r->fabric != FS_FABRIC_SHM || r->ring_size < FS_SHM_RING_MIN ||
      r->ring_size > FS_SHM_RING_MAX || (r->ring_size & (r->ring_size - 1)))
    return FS_REASON_PROTOCOL;
  return 0;
}

/* ---- whom a connecting end asks --------------------------------------- */

/* Does a process of ours (any user) listen on TCP port `port`? */
bool fs_rdv_listened(uint16_t port)
{
  int pids[1];
  return fs_stat_listeners(port, pids, 1) > 0;
}

/* Connect ufd to the abstract name: 0 if connected and its server is uid
 * (and pid, if > 0); NO_PEER if nobody serves the name; NOT_OWNER for a
 * server of another pid, or FS_RDV_OTHER_UID of another uid (a squatter,
 * or a prefork master: see fs_rdv_attempt in rdv.c); RESOURCES for a full
 * backlog.  Nothing is sent: a squatter gets nothing. */
static int fs_rdv_dial(int ufd, const char *name, int n, int pid, uint32_t uid)
{
  struct sockaddr_un un = { .sun_family = AF_UNIX };
  memcpy(un.sun_path, name, (size_t)n);
  if (FS_REAL(connect)(ufd, (struct sockaddr *)&un, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n)) < 0)
    return errno == EAGAIN ? FS_REASON_RESOURCES : FS_REASON_NO_PEER;
  struct ucred cr;
  socklen_t cl = sizeof cr;
  if (FS_REAL(getsockopt)(ufd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 || (pid > 0 && cr.pid != pid))
    return FS_REASON_NOT_OWNER;
  return cr.uid == uid ? 0 : FS_RDV_OTHER_UID;
}

/* The names served beside the peer's listener: its exact address, that
 * family's wildcard, the IPv6 wildcard of a dual-stack listener. */
int fs_rdv_dial_names(const struct sockaddr *peer, uint32_t diag_uid, int ufd)
{
  struct sockaddr_storage t;
  const struct sockaddr *p4 = fs_addr_unmap(peer, &t);
  struct sockaddr_in6 any6 = { .sin6_family = AF_INET6, .sin6_port = htons(fs_addr_port(peer)) };
  const struct sockaddr *names[3] = { peer, peer, fs_addr_family(p4) == AF_INET ? (struct sockaddr *)&any6 : NULL };
  int reason = FS_REASON_NO_PEER;
  for (int i = 0; i < 3 && reason == FS_REASON_NO_PEER; i++) {
    if (!names[i])
      continue;
    char name[108];
    int n = fs_rdv_name(name, sizeof name, names[i], i > 0);
    reason = fs_rdv_dial(ufd, name, n, 0, diag_uid);
  }
  return reason;
}

#define FS_RDV_WHO_WAIT_MS 100 /* the agent waits this long for an answer, chrooted only */

/* Ask the process serving the peer's listener name which process holds the
 * peer's socket (rdv.h, holder query): its pid, FS_RDV_AGAIN, or 0 (no
 * answer: nobody serves the name, or an older library does). */
static int fs_rdv_ask_holder(const struct sockaddr *peer, uint32_t inode)
{
  int qfd = fs_rdv_unix_socket();
  if (qfd < 0)
    return 0;
  int r = fs_rdv_dial_names(peer, 0, qfd), nf, fds[1], ans = 0;
  struct fs_rdv_who q = { FS_RDV_MAGIC_WHO, FS_RDV_VERSION, 0, inode, 0 };
  struct fs_rdv_rep rep = { 0 };
  struct pollfd p = { qfd, POLLIN, 0 };
  if ((r == 0 || r == FS_RDV_OTHER_UID) && fs_rdv_sendfds(qfd, &q, sizeof q, NULL, 0) == 0 &&
      FS_REAL(poll)(&p, 1, FS_RDV_WHO_WAIT_MS) == 1 &&
      fs_rdv_recvfds(qfd, &rep, sizeof rep, fds, 0, &nf) == (ssize_t)sizeof rep && rep.magic == FS_RDV_MAGIC_REP) {
    if (rep.status == FS_REASON_NOT_OWNER && rep.pad2 > 0 && rep.pad2 <= INT32_MAX)
      ans = (int)rep.pad2;
    else if (rep.status == FS_REASON_PENDING)
      ans = FS_RDV_AGAIN;
  }
  FS_REAL(close)(qfd);
  return ans;
}

bool fs_rdv_who_answered(int ufd, const void *msg, ssize_t n, int nfds)
{
  struct fs_rdv_who q;
  if (n != (ssize_t)sizeof q || nfds != 0)
    return false;
  memcpy(&q, msg, sizeof q);
  if (q.magic != FS_RDV_MAGIC_WHO)
    return false;
  int pids[2], k = q.version == FS_RDV_VERSION && q.inode ? fs_stat_holders(q.inode, pids, 2) : -1;
  struct fs_rdv_rep rep = { FS_RDV_MAGIC_REP, FS_RDV_VERSION, 0,
                            k == 1 ? FS_REASON_NOT_OWNER : k >= 0 ? FS_REASON_PENDING : FS_REASON_NO_PEER,
                            k == 1 ? (uint32_t)pids[0] : 0 };
  (void)fs_rdv_sendfds(ufd, &rep, sizeof rep, NULL, 0);
  return true;
}

/* The process that holds the peer's socket (the one that accepted it, or
 * the child it went to), found in the stat tables by the socket's inode
 * and proven by SO_PEERCRED.  Prefork servers, fork after accept, servers
 * whose listening process is gone (daemons).  A chrooted client (HAProxy's
 * worker) has no tables in sight: the listener's process names the holder. */
int fs_rdv_dial_holder(const struct sockaddr *peer, uint32_t diag_uid, uint32_t inode, int ufd, bool told_shared,
                       uint16_t port)
{
  int pids[2];
  int n = fs_stat_holders(inode, pids, 2);
  if (n < 0) {
    int asked = fs_rdv_ask_holder(peer, inode);
    if (asked == FS_RDV_AGAIN)
      return told_shared ? FS_RDV_UNLISTED : FS_RDV_AGAIN; /* as below, out of a chroot */
    if (asked > 0) {
      pids[0] = asked;
      n = 1;
    }
  }
  if (n == 0 && (told_shared || fs_rdv_listened(port)))
    return FS_RDV_UNLISTED; /* told: a prefork worker lists it at the threshold (engine/sock.c) */
  if (n < 0 || (n == 0 && !told_shared))
    return FS_REASON_NO_PEER; /* no listener name, no holder: no libfabsock there */
  if (n != 1)
    return FS_RDV_AGAIN; /* not accepted yet, or shared since fork */
  char name[108];
  int len = fs_rdv_proc_name(name, sizeof name, pids[0]);
  int reason = fs_rdv_dial(ufd, name, len, pids[0], diag_uid);
  /* Its uid too: the stat tables are written by their processes, and a
   * table that lists a socket its process does not hold must not get that
   * process our socket's dup (a server without libfabsock has no table). */
  if (reason == FS_RDV_OTHER_UID)
    reason = FS_REASON_NOT_OWNER;
  /* A child forked a moment ago lists the socket before it serves its name. */
  return reason == FS_REASON_NO_PEER ? FS_RDV_AGAIN : reason;
}
