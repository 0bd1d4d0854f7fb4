/* A liburing ring's submissions and registered files (engine/uring.h). */
#include <errno.h>
#include <stdint.h>

#include "engine/conn.h"
#include "engine/fdtab.h"
#include "engine/sock.h"
#include "engine/uring.h"

/* fd goes to the kernel's hands through a ring: back to TCP for good, or,
 * for a close, forgotten (its fabric EOF on the way) as close() does. */
static void fs_uring_fd(int fd, bool closes)
{
  if (fd < 0 || !fs_fdtab_tracked(fd))
    return;
  if (closes) {
    struct fs_conn *c = fs_fdtab_take(fd);
    if (c)
      fs_sock_close(c, fd);
    return;
  }
  struct fs_conn *c = fs_fdtab_get(fd);
  if (c) {
    fs_sock_to_kernel(c, fd);
    fs_conn_put(c);
  }
}

void fs_uring_files(const int *fds, unsigned n)
{
  if (!fds)
    return;
  int saved = errno;
  for (unsigned i = 0; i < n; i++)
    fs_uring_fd(fds[i], false);
  errno = saved;
}

void fs_uring_sqes(const struct io_uring_sqe *sqes, unsigned shift, unsigned mask, unsigned from, unsigned to)
{
  if (!sqes || to - from > mask + 1)
    return;
  int saved = errno;
  for (unsigned i = from; i != to; i++) {
    const struct io_uring_sqe *s = &sqes[(i & mask) << shift];
    uint8_t op = s->opcode;
    /* A close of a registered slot (file_index) names no descriptor. */
    if (!(s->flags & IOSQE_FIXED_FILE) && !(op == IORING_OP_CLOSE && s->file_index))
      fs_uring_fd(s->fd, op == IORING_OP_CLOSE);
    if ((op == IORING_OP_SPLICE || op == IORING_OP_TEE) && !(s->splice_flags & SPLICE_F_FD_IN_FIXED))
      fs_uring_fd(s->splice_fd_in, false);
    if (op == IORING_OP_FILES_UPDATE)
      fs_uring_files((const int *)(uintptr_t)s->addr, s->len);
  }
  errno = saved;
}

void fs_uring_register(unsigned opcode, const void *arg, unsigned nr)
{
  if (!arg)
    return;
  if (opcode == IORING_REGISTER_FILES) {
    fs_uring_files(arg, nr);
  } else if (opcode == IORING_REGISTER_FILES_UPDATE) {
    const struct io_uring_files_update *u = arg;
    fs_uring_files((const int *)(uintptr_t)u->fds, nr);
  } else if (opcode == IORING_REGISTER_FILES2) {
    const struct io_uring_rsrc_register *r = arg;
    if (!(r->flags & IORING_RSRC_REGISTER_SPARSE))
      fs_uring_files((const int *)(uintptr_t)r->data, r->nr);
  } else if (opcode == IORING_REGISTER_FILES_UPDATE2) {
    const struct io_uring_rsrc_update2 *u = arg;
    fs_uring_files((const int *)(uintptr_t)u->data, u->nr);
  }
}
