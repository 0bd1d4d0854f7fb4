/* Unit tests for engine/stdio: a connection that a used stdin, stdout or
 * stderr sits on (an inetd-style program's) must stay on TCP; one that only
 * an unused stream, or no stream, sits on may upgrade.  Each test runs in a
 * process of its own: it points the standard streams at a socket. */
#include <check.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/conn.h"
#include "engine/fdtab.h"
#include "engine/stdio.h"
#include "tests/unit/check_run.h"

/* A connection for a socketpair end moved to fd at (0, 1 or 2); *peer gets
 * the other end. */
static struct fs_conn *on_fd(int at, int *peer)
{
  int sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  ck_assert_int_eq(dup2(sv[0], at), at);
  close(sv[0]);
  *peer = sv[1];
  struct fs_conn *c = fs_conn_new(at, AF_INET);
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(fs_fdtab_install(at, c), 0);
  return c;
}

START_TEST(t_stdin_seen_once_read)
{
  int peer;
  struct fs_conn *c = on_fd(0, &peer);
  ck_assert_msg(!fs_stdio_used(c), "stdin never read: no buffer yet");
  ck_assert_int_eq(write(peer, "x\n", 2), 2);
  ck_assert_int_eq(fgetc(stdin), 'x');
  ck_assert_msg(fs_stdio_used(c), "stdin read through stdio");
  struct fs_conn *other = fs_conn_new(peer, AF_INET);
  ck_assert_int_eq(fs_fdtab_install(peer, other), 0);
  ck_assert_msg(!fs_stdio_used(other), "no stream sits on the other end");
}
END_TEST

START_TEST(t_stdout_and_stderr_seen_once_written)
{
  int p1, p2;
  struct fs_conn *out = on_fd(1, &p1);
  ck_assert_int_ge(fputs("reply\n", stdout), 0);
  ck_assert_int_eq(fflush(stdout), 0);
  ck_assert_msg(fs_stdio_used(out), "stdout written through stdio");
  char buf[8];
  ck_assert_int_eq(read(p1, buf, sizeof buf), 6);
  struct fs_conn *err = on_fd(2, &p2);
  if (stderr->_IO_buf_base == NULL) /* unbuffered, and not written yet */
    ck_assert(!fs_stdio_used(err));
  ck_assert_int_ge(fputs("log\n", stderr), 0);
  ck_assert_msg(fs_stdio_used(err), "stderr written through stdio");
}
END_TEST

int main(void)
{
  Suite *s = suite_create("stdio");
  TCase *tc = tcase_create("streams");
  tcase_add_test(tc, t_stdin_seen_once_read);
  tcase_add_test(tc, t_stdout_and_stderr_seen_once_written);
  suite_add_tcase(s, tc);
  return run_suite(s, true);
}
