/* The runner every unit test program ends with (header-only). */
#ifndef CHECK_RUN_H
#define CHECK_RUN_H

#include <check.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* Run suite s as the harness asks (CK_VERBOSITY, CK_TAP_LOG_FILE_NAME,
 * CK_FORK); own_process: every test in a process of its own whatever
 * CK_FORK says (state with no reset).  Returns main()'s exit status. */
static inline int run_suite(Suite *s, bool own_process)
{
  SRunner *sr = srunner_create(s);
  if (own_process)
    srunner_set_fork_status(sr, CK_FORK);
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* The parent's side of a child that reports by its exit status: pid is a
 * child (fork succeeded) and it exited with 0. */
static inline void ck_child_exits_ok(pid_t pid)
{
  ck_assert_int_gt(pid, 0);
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st));
  ck_assert_int_eq(WEXITSTATUS(st), 0);
}

/* fn() in a child process (state it changes for good: limits, tables),
 * which reports by its exit status: 0 or the step that failed. */
static inline void ck_in_child(int (*fn)(void))
{
  pid_t pid = fork();
  if (pid == 0)
    _exit(fn());
  ck_child_exits_ok(pid);
}

#endif
