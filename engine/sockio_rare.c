/* The MSG_* flags few programs use, each with the path it needs beside the
 * ordinary send and receive (engine/sockio.h): MSG_TRUNC receives
 * (fs_sockio_discard), MSG_FASTOPEN sends (fs_sockio_fastopen). */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "engine/conn.h"
#include "engine/sock.h"
#include "engine/sockio.h"

/* Linux's TCP takes MSG_TRUNC as "discard": the bytes are consumed (or, with
 * MSG_PEEK, counted) and never copied, so the buffer may be NULL.  HAProxy
 * drains a connection it closes with recv(fd, NULL, INT_MAX, MSG_TRUNC |
 * MSG_DONTWAIT).  A ring, or a hook that must see every byte, has no such
 * call: read into scratch memory instead, in chunks, as one call would. */
#define FS_DISCARD_CHUNK (64u << 10)

ssize_t fs_sockio_discard(struct fs_conn *c, int fd, struct fs_io *io, fs_io_fn recv)
{
  int flags = fs_io_flags(io) & ~MSG_TRUNC;
  size_t want = 0;
  for (int i = 0; i < io->iovcnt; i++)
    want = io->iov[i].iov_len > SIZE_MAX - want ? SIZE_MAX : want + io->iov[i].iov_len;
  if (want > SSIZE_MAX)
    want = SSIZE_MAX;
  size_t cap = want < FS_DISCARD_CHUNK ? want : FS_DISCARD_CHUNK;
  char small[2048];
  char *buf = cap > sizeof small ? malloc(cap) : NULL;
  if (!buf) {
    buf = small;
    cap = cap < sizeof small ? cap : sizeof small;
  }
  bool peek = flags & MSG_PEEK, waitall = (flags & MSG_WAITALL) && !peek;
  size_t got = 0;
  ssize_t r;
  do {
    size_t n = want - got < cap ? want - got : cap;
    struct iovec v = { buf, n };
    /* After the first bytes a call that does not wait for all takes only
     * what is there. */
    struct fs_io sub = { .op = FS_IO_RECV, .flags = flags | (got && !waitall ? MSG_DONTWAIT : 0),
                         .iov = &v, .iovcnt = 1 };
    r = recv(c, fd, &sub);
    if (r > 0)
      got += (size_t)r;
    if (r <= 0 || peek || (size_t)r < n)
      break;
  } while (got < want);
  if (buf != small)
    free(buf);
  if (!got && r < 0)
    return r;
  fs_sockio_no_meta(io);
  return (ssize_t)got;
}

/* sendto/sendmsg(MSG_FASTOPEN) with an address, on a socket not connected
 * yet, is a connect (TCP Fast Open: curl --tcp-fastopen): the kernel's
 * send, counted as any TCP send, after which the socket is connecting (the
 * kernel says when it is done, as after a non-blocking connect: with a
 * cookie the call returns while the SYN is out).  It stayed "unconnected":
 * never upgraded, its stat row without addresses. */
ssize_t fs_sockio_fastopen(struct fs_conn *c, int fd, struct fs_io *io, fs_io_fn send)
{
  const struct sockaddr *to = NULL;
  socklen_t tolen = 0;
  if (io->op == FS_IO_SENDTO) {
    to = io->to;
    tolen = io->tolen;
  } else if (io->op == FS_IO_SENDMSG) {
    to = io->msg->msg_name;
    tolen = io->msg->msg_namelen;
  }
  /* On a connected socket the kernel sends nothing and says EISCONN
   * (EOPNOTSUPP where Fast Open is off): on a fabric the bytes went. */
  if (fs_conn_state(c) != FS_STATE_UNCONNECTED)
    return fs_sock_tcp_io(fd, io);
  bool opens = to != NULL;
  ssize_t r = send(c, fd, io);
  if (opens && (r >= 0 || r == -EINPROGRESS))
    fs_sock_connect_done(c, fd, -EINPROGRESS, to, tolen);
  return r;
}
