/* A TCP socket of this host looked up by its addresses (NETLINK_SOCK_DIAG),
 * for both fabrics: who holds the peer's end (shm), and whether a
 * connection a request names has ended (shm, rdma).  See fabric/diag.h. */
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include "base/addr.h"
#include "base/clock.h"
#include "base/fdreg.h"
#include "base/real.h"
#include "fabric/diag.h"

int fs_diag_lookup(const struct sockaddr *local, const struct sockaddr *peer, uint32_t *uid, uint32_t *inode,
                   uint8_t *state)
{
  struct fs_addr_ip l, p;
  fs_addr_ip_of(local, &l);
  fs_addr_ip_of(peer, &p);
  if (l.family == 0 || l.family != p.family)
    return -EINVAL;
  int nl = FS_FDREG_MAKE(FS_REAL(socket)(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
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
  req.r.sdiag_family = (uint8_t)l.family;
  req.r.sdiag_protocol = IPPROTO_TCP;
  req.r.idiag_states = ~0u;
  req.r.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  req.r.id.idiag_sport = l.port_be;
  req.r.id.idiag_dport = p.port_be;
  memcpy(req.r.id.idiag_src, l.ip, l.family == AF_INET ? 4 : 16);
  memcpy(req.r.id.idiag_dst, p.ip, p.family == AF_INET ? 4 : 16);
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
      if (inode)
        *inode = m->idiag_inode;
      if (state)
        *state = m->idiag_state;
      rc = 0;
      break;
    }
  }
out:
  fs_fdreg_close(nl);
  return rc;
}

bool fs_diag_ended(int rc, uint32_t inode, uint8_t state, bool accepted)
{
  if (rc == -ENOENT)
    return true;
  if (rc < 0)
    return false;
  if (state == TCP_LISTEN)
    return accepted;
  if (inode != 0)
    return false;
  switch (state) {
  case TCP_FIN_WAIT1:
  case TCP_FIN_WAIT2:
  case TCP_TIME_WAIT:
  case TCP_CLOSE:
  case TCP_LAST_ACK:
  case TCP_CLOSING:
    return true;
  default:
    return false;
  }
}

bool fs_diag_ended_look(const struct sockaddr *local, const struct sockaddr *peer, uint64_t *look_ns,
                        uint32_t *inode)
{
  uint64_t now = fs_clock_ns();
  if (inode)
    *inode = 0;
  if (now < *look_ns)
    return false;
  *look_ns = now + 50000000u;
  uint32_t uid, ino = 0;
  uint8_t st = 0;
  int rc = fs_diag_lookup(local, peer, &uid, &ino, &st);
  if (fs_diag_ended(rc, ino, st, false))
    return true;
  if (inode && rc == 0)
    *inode = ino;
  return false;
}
