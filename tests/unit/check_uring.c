/* engine/uring.c: a followed ring's SQEs and registered files.  Each tracked
 * socket one names goes back to TCP for good (kernel-io), a closed one is
 * forgotten, and nothing else is touched: file descriptors, fixed-file
 * indexes that happen to equal a socket's number, SQEs outside the range. */
#include <check.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/conn.h"
#include "engine/fdtab.h"
#include "engine/sock.h"
#include "engine/uring.h"
#include "tests/unit/check_run.h"

/* A tracked socket, established on TCP, that could still upgrade. */
static int tracked(void)
{
  ck_assert(fs_sock_enabled());
  int sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  struct fs_conn *c = fs_conn_new(sv[0], AF_INET);
  ck_assert_ptr_nonnull(c);
  c->state = FS_STATE_TCP;
  c->dir = FS_DIR_CONNECT;
  ck_assert_int_eq(fs_fdtab_install(sv[0], c), 0);
  fs_conn_put(c);
  return sv[0];
}

static bool kernel_io(int fd)
{
  struct fs_conn *c = fs_fdtab_get(fd);
  ck_assert_ptr_nonnull(c);
  bool k = c->kernel_io;
  fs_conn_put(c);
  return k;
}

static struct io_uring_sqe sqes[8];

static void sqe(unsigned pos, uint8_t op, int fd, uint8_t flags)
{
  struct io_uring_sqe *s = &sqes[pos & 7];
  memset(s, 0, sizeof *s);
  s->opcode = op;
  s->fd = fd;
  s->flags = flags;
}

START_TEST(t_sqes_name_sockets)
{
  int a = tracked(), b = tracked(), c = tracked(), d = tracked(), e = tracked();
  int file = dup(0);
  /* positions 6..9 wrap the 8-entry array */
  sqe(6, IORING_OP_READ, file, 0);
  sqe(7, IORING_OP_RECV, a, 0);
  sqe(8, IORING_OP_READ, b, IOSQE_FIXED_FILE); /* an index, not fd b */
  sqe(9, IORING_OP_SPLICE, file, 0);
  sqes[9 & 7].splice_fd_in = c;
  sqe(10, IORING_OP_SEND, d, 0); /* past `to`: not taken by this submission */
  fs_uring_sqes(sqes, 0, 7, 6, 10);
  ck_assert(kernel_io(a));
  ck_assert(!kernel_io(b));
  ck_assert(kernel_io(c));
  ck_assert(!kernel_io(d));
  /* more than the ring holds: a broken ring, nothing looked at */
  fs_uring_sqes(sqes, 0, 7, 0, 100);
  ck_assert(!kernel_io(d));
  /* a close through the ring: forgotten as close() forgets it */
  sqe(10, IORING_OP_CLOSE, e, 0);
  fs_uring_sqes(sqes, 0, 7, 10, 11);
  ck_assert_ptr_null(fs_fdtab_get(e));
  /* a close of a registered slot names no descriptor, whatever its fd says */
  int g = tracked();
  sqe(11, IORING_OP_CLOSE, g, 0);
  sqes[11 & 7].file_index = 3;
  fs_uring_sqes(sqes, 0, 7, 11, 12);
  ck_assert(!kernel_io(g));
  /* files updated through an SQE */
  int upd[2] = { file, d };
  sqe(11, IORING_OP_FILES_UPDATE, -1, 0);
  sqes[11 & 7].addr = (uint64_t)(uintptr_t)upd;
  sqes[11 & 7].len = 2;
  fs_uring_sqes(sqes, 0, 7, 11, 12);
  ck_assert(kernel_io(d));
  close(file);
}
END_TEST

START_TEST(t_registered_files)
{
  int a = tracked(), b = tracked(), c = tracked(), d = tracked(), f = dup(0);
  int one[3] = { f, -1, a };
  fs_uring_files(one, 3);
  ck_assert(kernel_io(a));
  fs_uring_register(IORING_REGISTER_FILES, (int[]){ b }, 1);
  ck_assert(kernel_io(b));
  struct io_uring_rsrc_update2 u = { .data = (uint64_t)(uintptr_t)(int[]){ c }, .nr = 1 };
  fs_uring_register(IORING_REGISTER_FILES_UPDATE2, &u, 1);
  ck_assert(kernel_io(c));
  struct io_uring_rsrc_register sparse = { .nr = 8, .flags = IORING_RSRC_REGISTER_SPARSE };
  fs_uring_register(IORING_REGISTER_FILES2, &sparse, 0); /* no array to read */
  struct io_uring_rsrc_register r = { .nr = 1, .data = (uint64_t)(uintptr_t)(int[]){ d } };
  fs_uring_register(IORING_REGISTER_BUFFERS, &r, 1); /* not files */
  ck_assert(!kernel_io(d));
  fs_uring_register(IORING_REGISTER_FILES2, &r, 1);
  ck_assert(kernel_io(d));
  close(f);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("uring");
  TCase *tc = tcase_create("follow");
  tcase_add_test(tc, t_sqes_name_sockets);
  tcase_add_test(tc, t_registered_files);
  suite_add_tcase(s, tc);
  return run_suite(s, true);
}
