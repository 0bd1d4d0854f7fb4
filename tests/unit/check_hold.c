/* Unit tests for engine/hold: when a peer's rendezvous request for an
 * accepted connection waits for the connection's first use here.  (The
 * rendezvous around it, held then answered or handed on: check_rdv.) */
#include <check.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/fdtab.h"
#include "engine/hold.h"
#include "engine/sock.h"
#include "tests/unit/check_run.h"

static struct fs_conn *accepted(uint32_t timeout_ms)
{
  struct fs_conn *c = fs_conn_new(-1, AF_INET);
  ck_assert_ptr_nonnull(c);
  c->dir = FS_DIR_ACCEPT;
  c->policy.timeout_ms = timeout_ms;
  __atomic_store_n(&c->ready, true, __ATOMIC_RELEASE);
  return c;
}

START_TEST(t_held_until_first_use)
{
  struct fs_conn *c = accepted(600000);
  ck_assert(fs_hold_request(c));
  ck_assert(fs_hold_request(c)); /* asked again at the next tick: still */
  fs_hold_use(c);
  ck_assert(c->used);
  ck_assert(!fs_hold_request(c));
  fs_conn_put(c);
}
END_TEST

START_TEST(t_held_while_accept_sets_up)
{
  struct fs_conn *c = accepted(600000);
  fs_hold_use(c);
  __atomic_store_n(&c->ready, false, __ATOMIC_RELEASE);
  ck_assert(fs_hold_request(c));
  fs_conn_put(c);
}
END_TEST

/* Only an accepted end waits: a connecting end never, one on TCP for good
 * (handed on: fd-passed) is answered at once. */
START_TEST(t_not_held)
{
  struct fs_conn *c = accepted(600000);
  c->dir = FS_DIR_CONNECT;
  ck_assert(!fs_hold_request(c));
  c->dir = FS_DIR_ACCEPT;
  c->no_upgrade = true;
  ck_assert(!fs_hold_request(c));
  fs_conn_put(c);
}
END_TEST

/* Forked with (shared_hist), unused: held too, the image that holds it may
 * be about to exec (sshd's child re-execs with the connection on fd 0; an
 * end attached before the exec goes back to TCP for good).  Used by the
 * image that forked it: the child took over the flag, and
 * fs_sock_may_attach decides. */
START_TEST(t_forked_unused_held)
{
  struct fs_conn *c = accepted(600000);
  c->shared_hist = true;
  ck_assert(fs_hold_request(c));
  c->used = true;
  ck_assert(!fs_hold_request(c));
  fs_conn_put(c);
}
END_TEST

/* Never used: the wait ends after a quarter of the connection's timeout
 * (here 2 ms), counted from the first time it was asked. */
START_TEST(t_hold_ends)
{
  struct fs_conn *c = accepted(8);
  ck_assert(fs_hold_request(c));
  int naps = 0;
  struct timespec ms = { 0, 1000000 };
  while (fs_hold_request(c) && naps < 20000) {
    nanosleep(&ms, NULL);
    naps++;
  }
  ck_assert_msg(!fs_hold_request(c), "still held after %d naps of 1 ms", naps);
  ck_assert(!c->used);
  fs_conn_put(c);
}
END_TEST

/* The bound restarts in a forked child: the parent's wait (a request it
 * held for a connection it then forked a server for) is not the child's,
 * whose own first request must get its whole quarter. */
START_TEST(t_hold_restarts_in_the_child)
{
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(fd, 0);
  struct fs_conn *c = accepted(600000);
  c->fd = fd;
  ck_assert_int_eq(fs_fdtab_install(fd, c), 0);
  ck_assert(fs_hold_request(c));
  ck_assert_uint_ne(c->hold_ns, 0);
  fs_sock_before_fork(true);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    fs_sock_after_fork(0);
    _exit(c->hold_ns == 0 ? 0 : 1);
  }
  fs_sock_after_fork(pid);
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st));
  ck_assert_msg(WEXITSTATUS(st) == 0, "the child kept the parent's hold start");
  ck_assert_uint_ne(c->hold_ns, 0); /* the parent's own stays */
  fs_conn_put(c);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("hold");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, t_held_until_first_use);
  tcase_add_test(tc, t_held_while_accept_sets_up);
  tcase_add_test(tc, t_not_held);
  tcase_add_test(tc, t_forked_unused_held);
  tcase_add_test(tc, t_hold_ends);
  tcase_add_test(tc, t_hold_restarts_in_the_child);
  suite_add_tcase(s, tc);
  return run_suite(s, false);
}
