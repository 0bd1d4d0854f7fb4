/* One application I/O call, described exactly (no code: a type the send
 * and receive paths and the gpu staging share). */
#ifndef FS_ENGINE_IO_H
#define FS_ENGINE_IO_H

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

struct fs_conn;

enum fs_io_op {
  FS_IO_READ, FS_IO_READV, FS_IO_RECV, FS_IO_RECVFROM, FS_IO_RECVMSG,
  FS_IO_WRITE, FS_IO_WRITEV, FS_IO_SEND, FS_IO_SENDTO, FS_IO_SENDMSG,
  FS_IO_SENDFILE, /* TCP only: a fabric send gets -EXDEV (the caller bounces it) */
};

/* One application call, described exactly, so that on TCP the engine can
 * replay it with the same libc function and on a fabric honour its flags. */
struct fs_io {
  enum fs_io_op op;
  int flags;
  struct iovec *iov;
  int iovcnt;
  struct msghdr *msg;          /* RECVMSG/SENDMSG */
  struct sockaddr *from;       /* RECVFROM */
  socklen_t *fromlen;
  const struct sockaddr *to;   /* SENDTO */
  socklen_t tolen;
  int in_fd;                   /* SENDFILE: from in_fd at *off (NULL: its position) */
  off_t *off;
  size_t count;
};

/* The call's MSG_* flags: read, write and sendfile take none. */
static inline int fs_io_flags(const struct fs_io *io)
{
  switch (io->op) {
  case FS_IO_READ: case FS_IO_READV: case FS_IO_WRITE: case FS_IO_WRITEV: case FS_IO_SENDFILE: return 0;
  default: return io->flags;
  }
}

/* A send or receive entry point (fs_sock_send, fs_sock_recv). */
typedef ssize_t (*fs_io_fn)(struct fs_conn *c, int fd, struct fs_io *io);

#endif
