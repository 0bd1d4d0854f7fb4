/* base/proc.c: fs_proc_self, the pid kept in a page a child finds zeroed,
 * right in the process and in a child however it was made: fork() (the
 * atfork handlers run) and the raw system call (as _Fork, none run). */
#include <check.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/proc.h"
#include "tests/unit/check_run.h"

static void child_agrees(pid_t pid)
{
  if (pid == 0)
    _exit(fs_proc_self() == (int)getpid() ? 0 : 1);
  ck_assert_int_gt(pid, 0);
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st));
  ck_assert_int_eq(WEXITSTATUS(st), 0);
}

START_TEST(t_self_in_children)
{
  ck_assert_int_eq(fs_proc_self(), (int)getpid());
  ck_assert_int_eq(fs_proc_self(), (int)getpid()); /* from the page now */
  child_agrees(fork());
  child_agrees((pid_t)syscall(SYS_fork));
  ck_assert_int_eq(fs_proc_self(), (int)getpid()); /* the parent's untouched */
}
END_TEST

int main(void)
{
  Suite *s = suite_create("proc");
  TCase *tc = tcase_create("self");
  tcase_add_test(tc, t_self_in_children);
  suite_add_tcase(s, tc);
  return run_suite(s, true);
}
