/* base/proc.c: fs_proc_self, the pid kept in a page a child finds zeroed,
 * right in the process and in a child however it was made: fork() (the
 * atfork handlers run) and the raw system call (as _Fork, none run);
 * fs_proc_as_room, the application's share of RLIMIT_AS; and the fork
 * handlers registered at the first fork work, not before. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/proc.h"
#include "tests/unit/check_run.h"

static void child_agrees(pid_t pid)
{
  if (pid == 0)
    _exit(fs_proc_self() == (int)getpid() ? 0 : 1);
  ck_child_exits_ok(pid);
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

/* This process's address space now, from /proc/self/statm. */
static unsigned long long vm_now(void)
{
  FILE *f = fopen("/proc/self/statm", "r");
  ck_assert_ptr_nonnull(f);
  unsigned long long pages = 0;
  ck_assert_int_eq(fscanf(f, "%llu", &pages), 1);
  fclose(f);
  return pages * (unsigned long long)sysconf(_SC_PAGESIZE);
}

/* Rings may take address space only while the application keeps half of
 * its limit (FS_PROC_AS_KEEP): under ulimit -v they took all that was left, and a client
 * plain TCP served failed with MemoryError.  No limit: always room.  errno
 * is kept either way. */
static void *idle_thread(void *arg)
{
  int *go = arg;
  while (!__atomic_load_n(go, __ATOMIC_ACQUIRE))
    usleep(1000);
  return NULL;
}

/* One thread: told without a system call where glibc can; two: told. */
START_TEST(t_single_threaded)
{
  ck_assert(fs_proc_single_threaded()); /* each test runs in a forked child */
  int go = 0;
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, idle_thread, &go), 0);
  ck_assert(!fs_proc_single_threaded());
  __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  for (int i = 0; i < 1000 && !fs_proc_single_threaded(); i++)
    usleep(1000); /* the kernel reaps the thread a little after the join */
  ck_assert(fs_proc_single_threaded());
}
END_TEST

START_TEST(t_as_room)
{
  errno = 5;
  ck_assert_int_eq(fs_proc_as_room((size_t)1 << 40), 0); /* unlimited (the test's own process) */
  ck_assert_int_eq(errno, 5);
  unsigned long long vm = vm_now(), mib = 1 << 20;
  /* a limit with 64 MiB to spare beyond the part kept free */
  unsigned long long keep_div = FS_PROC_AS_KEEP;
  unsigned long long lim = (vm + 64 * mib) * keep_div / (keep_div - 1);
  struct rlimit rl = { lim, lim };
  ck_assert_int_eq(setrlimit(RLIMIT_AS, &rl), 0);
  size_t fits = (size_t)(lim - vm - lim / keep_div) - 4 * mib; /* slack for what stdio maps */
  ck_assert_int_eq(fs_proc_as_room(fits), 0);
  ck_assert_int_eq(fs_proc_as_room((size_t)(lim - vm - lim / keep_div) + 4 * mib), -ENOMEM);
  ck_assert_int_eq(fs_proc_as_room((size_t)lim), -ENOMEM);
  ck_assert_int_eq(errno, 5);
}
END_TEST

static int prepares;
static void count_prepare(void)
{
  prepares++;
}
static void nothing(void)
{
}

/* prepares after one fork(): its child exits at once. */
static int prepares_after_fork(void)
{
  pid_t pid = fork();
  if (pid == 0)
    _exit(0);
  int st;
  if (pid < 0 || waitpid(pid, &st, 0) != pid)
    return -1;
  return prepares;
}

/* The handlers a preloaded process stores at load are registered only by
 * an arm (preload/proc.c: the daemon(3) and forkpty(3) wrappers), not by
 * fork work (its first socket: a one-shot client paid the registration's
 * page faults): once, however many arms follow.  In a child, whose bits
 * and registration start clear here (this test process may have set bits
 * before). */
START_TEST(t_atfork_armed_once)
{
  pid_t pid = fork();
  if (pid == 0) {
    fs_proc_fork_work = 0;
    fs_proc_atfork_armed = false;
    fs_proc_atfork_arm(); /* nothing stored yet: nothing registered, not armed */
    fs_proc_atfork_set(count_prepare, nothing, nothing);
    if (prepares_after_fork() != 0)
      _exit(1);
    fs_proc_fork_work_add(FS_FORK_CANCEL | FS_FORK_CONN);
    if (prepares_after_fork() != 0)
      _exit(2);
    fs_proc_atfork_arm();
    if (prepares_after_fork() != 1)
      _exit(3);
    fs_proc_atfork_arm();
    _exit(prepares_after_fork() == 2 ? 0 : 4);
  }
  ck_child_exits_ok(pid);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("proc");
  TCase *tc = tcase_create("self");
  tcase_add_test(tc, t_self_in_children);
  tcase_add_test(tc, t_single_threaded);
  tcase_add_test(tc, t_as_room);
  tcase_add_test(tc, t_atfork_armed_once);
  suite_add_tcase(s, tc);
  return run_suite(s, true);
}
