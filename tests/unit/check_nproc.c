/* engine/nproc.c: a process about to forbid itself new threads gets its
 * agent first, if it listens (HAProxy's workers set RLIMIT_NPROC to 0),
 * and nothing if it does not (sshd's pre-auth child sets it, then a
 * seccomp filter).  Each test in its own process. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/proc.h"
#include "engine/fdtab.h"
#include "engine/nproc.h"
#include "engine/sock.h"
#include "tests/unit/check_run.h"

/* A tracked TCP listener on 127.0.0.1, as listen() makes it. */
static int listener(void)
{
  ck_assert(fs_sock_enabled());
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(fd, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  ck_assert_int_eq(listen(fd, 8), 0);
  fs_sock_created(fd, AF_INET, SOCK_STREAM, 0);
  struct fs_conn *c = fs_fdtab_get(fd);
  ck_assert_ptr_nonnull(c);
  fs_sock_listening(c, fd);
  return fd;
}

/* Fork as the preload does; the child runs fn and exits with its result. */
static int in_child(int (*fn)(void))
{
  fs_sock_before_fork(true);
  pid_t pid = fork();
  fs_sock_after_fork(pid);
  ck_assert_int_ge(pid, 0);
  if (pid == 0)
    _exit(fn());
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st));
  return WEXITSTATUS(st);
}

/* The child of a listening process (a prefork worker): no agent thread
 * until its first accept, which the limit would make too late. */
static int child_limits(void)
{
  int before = fs_proc_threads();
  fs_nproc_limiting();
  int after = fs_proc_threads();
  return before == 1 && after == 2 ? 0 : 10 + before * 4 + after;
}

START_TEST(t_a_worker_gets_its_agent_before_the_limit)
{
  (void)listener();
  ck_assert_int_eq(in_child(child_limits), 0);
}
END_TEST

/* No listener: no thread (it would sit outside a seccomp filter to come). */
START_TEST(t_no_listener_no_thread)
{
  ck_assert(fs_sock_enabled());
  int before = fs_proc_threads();
  fs_nproc_limiting();
  ck_assert_int_eq(fs_proc_threads(), before);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("nproc");
  TCase *tc = tcase_create("limit");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, t_a_worker_gets_its_agent_before_the_limit);
  tcase_add_test(tc, t_no_listener_no_thread);
  suite_add_tcase(s, tc);
  return run_suite(s, true);
}
