/* Unit tests for base/aside.c: jobs run on a thread whose descriptor table
 * is its own; a forked child gets a thread of its own; a confined process
 * runs them in place. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/aside.h"
#include "tests/unit/check_run.h"

/* What a job saw of its table. */
struct seen {
  int probe;    /* an fd open in the application's table */
  int probe_ok; /* fcntl(probe) succeeded in the job */
  int opened;   /* the number open() gave the job */
  int here;     /* fs_aside_here() in the job */
};

static int job_look(void *arg)
{
  struct seen *s = arg;
  s->probe_ok = fcntl(s->probe, F_GETFD) >= 0;
  s->opened = open("/dev/null", O_RDONLY | O_CLOEXEC);
  s->here = fs_aside_here();
  errno = EIO; /* the caller's errno must not see it */
  return 42;
}

static int job_close(void *arg)
{
  return close(*(int *)arg);
}

START_TEST(t_job_runs_with_a_table_of_its_own)
{
  struct seen s = { .probe = open("/dev/null", O_RDONLY | O_CLOEXEC) };
  ck_assert_int_ge(s.probe, 0);
  int low = dup(0); /* the application's next number */
  close(low);
  errno = ENOTTY;
  ck_assert_int_eq(fs_aside_run(job_look, &s), 42);
  ck_assert_int_eq(errno, ENOTTY);
  ck_assert(fs_aside_active());
  ck_assert(s.here);
  ck_assert(!fs_aside_here());
  ck_assert_msg(!s.probe_ok, "the job saw the application's fd %d", s.probe);
  ck_assert_int_ge(s.opened, 0);
  /* What the job opened is not in the application's table ... */
  ck_assert_int_eq(fcntl(low, F_GETFD), -1);
  ck_assert_int_eq(errno, EBADF);
  /* ... and stays usable by the next job (the thread is the same one). */
  ck_assert_int_eq(fs_aside_run(job_close, &s.opened), 0);
  ck_assert_int_eq(fcntl(s.probe, F_GETFD), FD_CLOEXEC); /* ours untouched */
  close(s.probe);
}
END_TEST

static int job_inner(void *arg)
{
  (void)arg;
  return fs_aside_here() ? 7 : 8;
}

static int job_nested(void *arg)
{
  (void)arg;
  return fs_aside_run(job_inner, NULL) * 10; /* in place, not a wait for itself */
}

START_TEST(t_nested_job_runs_in_place)
{
  ck_assert_int_eq(fs_aside_run(job_nested, NULL), 70);
}
END_TEST

/* The child of fork() (after the preload's hook) starts its own thread;
 * one that forbade it runs jobs in place, in its own table. */
static int child_run(bool forbid)
{
  fs_aside_atfork_child();
  if (forbid)
    fs_aside_forbid();
  struct seen s = { .probe = 1 };
  if (fs_aside_run(job_look, &s) != 42)
    return 10;
  if (fs_aside_active() == forbid || s.probe_ok != forbid || s.here == forbid)
    return 11;
  return 0;
}

START_TEST(t_forked_child_and_forbid)
{
  struct seen s = { .probe = 1 };
  ck_assert_int_eq(fs_aside_run(job_look, &s), 42); /* the parent's thread runs */
  for (int forbid = 0; forbid <= 1; forbid++) {
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
      _exit(child_run(forbid));
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child (forbid=%d): status %d", forbid, st);
  }
}
END_TEST

/* A child that forked without the hook (a raw clone) has no thread though
 * the state says there is one: its jobs run in place, and do not hang. */
START_TEST(t_fork_without_hook)
{
  struct seen s = { .probe = 1 };
  ck_assert_int_eq(fs_aside_run(job_look, &s), 42);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    struct seen c = { .probe = 1 };
    _exit(fs_aside_run(job_look, &c) == 42 && !fs_aside_active() && c.probe_ok ? 0 : 1);
  }
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("aside");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, t_job_runs_with_a_table_of_its_own);
  tcase_add_test(tc, t_forked_child_and_forbid);
  tcase_add_test(tc, t_fork_without_hook);
  tcase_add_test(tc, t_nested_job_runs_in_place);
  suite_add_tcase(s, tc);
  return run_suite(s, true);
}
