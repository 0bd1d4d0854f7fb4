/* Unit tests for engine/sock's fork path: what a fork costs a process that
 * never made a socket (a shell under `fabsock run`).
 *
 * After fork every page of the process is shared with the other process or
 * not mapped yet, and the first touch of one is a fault: a copy for a write.
 * The library's fork handlers used to touch a page of each module (the
 * agent, the rendezvous, rdma, the stat table, the aside thread, the fork
 * epoch) in the child, and two in the parent, whether or not the process
 * had ever used them.  Now each side touches one: the agent's, whose locks
 * are held across the fork. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/sock.h"
#include "tests/unit/check_run.h"
#include "tests/unit/pagemap.h"

START_TEST(t_fork_without_sockets_touches_one_page)
{
  int res[2], go[2];
  ck_assert_int_eq(pipe(res), 0);
  ck_assert_int_eq(pipe(go), 0);
  fs_sock_before_fork(true);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    struct pm_snap a = { 0 }, b = { 0 };
    long n = pm_take(&b) < 0 || pm_take(&a) < 0 ? -1 : 0;
    fs_sock_after_fork(0);
    uintptr_t where = 0;
    if (n == 0 && pm_take(&b) == 0)
      n = pm_changed(&a, &b, &where);
    char line[64];
    int len = snprintf(line, sizeof line, "%ld %#lx", n, (unsigned long)where);
    /* Stay until the parent has looked: our exit would change its pages. */
    if (write(res[1], line, (size_t)len) != len || read(go[0], line, 1) != 1)
      _exit(3);
    _exit(0);
  }
  char line[64] = { 0 };
  ck_assert_int_gt(read(res[0], line, sizeof line - 1), 0);
  long child = -1;
  unsigned long cwhere = 0;
  ck_assert_int_eq(sscanf(line, "%ld %lx", &child, &cwhere), 2);

  struct pm_snap a = { 0 }, b = { 0 };
  ck_assert_int_eq(pm_take(&b), 0);
  ck_assert_int_eq(pm_take(&a), 0);
  fs_sock_after_fork(pid);
  ck_assert_int_eq(pm_take(&b), 0);
  uintptr_t where = 0;
  long parent = pm_changed(&a, &b, &where);

  ck_assert_int_eq(write(go[1], "x", 1), 1);
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  ck_assert_msg(child >= 0 && child <= 1, "the child touched %ld pages (the first at %#lx)", child, cwhere);
  ck_assert_msg(parent >= 0 && parent <= 1, "the parent touched %ld pages after the fork (the first at %#lx)",
                parent, (unsigned long)where);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("sock");
  TCase *tc = tcase_create("fork");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, t_fork_without_sockets_touches_one_page);
  suite_add_tcase(s, tc);
  return run_suite(s, true); /* a process that never made a socket */
}
