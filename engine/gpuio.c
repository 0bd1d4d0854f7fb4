#include <errno.h>

#include "engine/gpuio.h"

static bool fs_gpuio_is_dev(const void *p, size_t n)
{
  return n > 0 && fs_gpu_maybe_device(p) && fs_gpu_classify(p, n) == FS_GPU_DEVICE;
}

bool fs_gpuio_device_slow(const struct fs_io *io)
{
  for (int i = 0; i < io->iovcnt; i++)
    if (fs_gpuio_is_dev(io->iov[i].iov_base, io->iov[i].iov_len))
      return true;
  return false;
}

struct fs_gpuio_ctx {
  struct fs_conn *c;
  int fd;
  int flags;
  bool tx;
  fs_io_fn chunk;
};

/* One host chunk through the ordinary engine path (fabric or TCP, hooks). */
static ssize_t fs_gpuio_chunk(void *arg, void *host, size_t n)
{
  struct fs_gpuio_ctx *x = arg;
  struct iovec v = { host, n };
  struct fs_io io = { .op = x->tx ? FS_IO_SEND : FS_IO_RECV, .flags = x->flags, .iov = &v, .iovcnt = 1 };
  return x->chunk(x->c, x->fd, &io);
}

static ssize_t fs_gpuio_sink(void *arg, const void *host, size_t n)
{
  return fs_gpuio_chunk(arg, (void *)host, n);
}

/* A receive chunk; after the first, only what has already arrived (with
 * MSG_WAITALL every chunk waits: the caller asked for all of it). */
static ssize_t fs_gpuio_source(void *arg, void *host, size_t n, bool more)
{
  struct fs_gpuio_ctx *x = arg;
  int flags = x->flags;
  if (more && !(flags & MSG_WAITALL))
    x->flags |= MSG_DONTWAIT;
  ssize_t r = fs_gpuio_chunk(x, host, n);
  x->flags = flags;
  return r;
}

static int fs_gpuio_flags(const struct fs_io *io, bool tx)
{
  /* write/read carry no flags; SIGPIPE behaviour of write equals send(0). */
  if (io->op == FS_IO_WRITE || io->op == FS_IO_WRITEV || io->op == FS_IO_READ || io->op == FS_IO_READV)
    return 0;
  return tx ? io->flags : io->flags & ~MSG_PEEK;
}

/* Segment by segment: host segments go as they are, device segments through
 * staging.  Stops at the first short transfer, like the kernel does. */
static ssize_t fs_gpuio_xfer(struct fs_conn *c, int fd, struct fs_io *io, bool tx, fs_io_fn chunk)
{
  struct fs_gpuio_ctx x = { c, fd, fs_gpuio_flags(io, tx), tx, chunk };
  if (!tx && (io->flags & MSG_PEEK) && io->op != FS_IO_READ && io->op != FS_IO_READV)
    return -EOPNOTSUPP; /* peeking into device memory is not supported */
  size_t done = 0;
  for (int i = 0; i < io->iovcnt; i++) {
    void *b = io->iov[i].iov_base;
    size_t n = io->iov[i].iov_len;
    if (n == 0)
      continue;
    ssize_t r = fs_gpuio_is_dev(b, n) ? (tx ? fs_gpu_stage_out(b, n, fs_gpuio_sink, &x)
                                            : fs_gpu_stage_in(b, n, fs_gpuio_source, &x))
                                      : fs_gpuio_chunk(&x, b, n);
    if (r < 0)
      return done ? (ssize_t)done : r;
    done += (size_t)r;
    if ((size_t)r < n)
      break;
    if (!tx && !(io->flags & MSG_WAITALL))
      break; /* a read returns what one segment got, as recv would */
  }
  return (ssize_t)done;
}

ssize_t fs_gpuio_send(struct fs_conn *c, int fd, struct fs_io *io, fs_io_fn chunk)
{
  return fs_gpuio_xfer(c, fd, io, true, chunk);
}

ssize_t fs_gpuio_recv(struct fs_conn *c, int fd, struct fs_io *io, fs_io_fn chunk)
{
  return fs_gpuio_xfer(c, fd, io, false, chunk);
}
