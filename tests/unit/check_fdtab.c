/* Unit tests for engine/fdtab and engine/conn: lookup, dup sharing,
 * replacement of stale entries, and lock-free readers racing closers; and
 * base/fdreg's high fds (with base/proc's thread count, which decides
 * where the fd table grows for them). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/fdreg.h"
#include "base/proc.h"
#include "engine/conn.h"
#include "engine/fdtab.h"
#include "tests/unit/check_run.h"

START_TEST(t_untracked_is_null)
{
  ck_assert_ptr_null(fs_fdtab_get(0));
  ck_assert_ptr_null(fs_fdtab_get(-1));
  ck_assert_ptr_null(fs_fdtab_get(FS_FDTAB_SIZE));
  ck_assert(!fs_fdtab_tracked(5));
}
END_TEST

/* fds from FS_FDTAB_LOW up live in a table mapped at the first install
 * among them (engine/fdtab.h); lookups before it find nothing, take does
 * nothing, and the install maps it.  Each test runs in a process of its
 * own (run_suite below), forked from a runner that installed nothing. */
START_TEST(t_high_table_mapped_at_first_install)
{
  const int lo = 7, hi = FS_FDTAB_LOW + 7;
  ck_assert(!fs_fdtab_any());
  ck_assert_ptr_null(fs_fdtab_high);
  ck_assert_ptr_null(fs_fdtab_get(hi));
  ck_assert(!fs_fdtab_tracked(hi));
  ck_assert_ptr_null(fs_fdtab_take(hi));
  struct fs_conn *c = fs_conn_new(lo, AF_INET);
  ck_assert_ptr_nonnull(c);
  ck_assert(!fs_fdtab_names(hi, c));
  ck_assert_int_eq(fs_fdtab_install(FS_FDTAB_SIZE, c), -EBADF);
  ck_assert_int_eq(fs_fdtab_install(lo, c), 0);
  ck_assert(fs_fdtab_any());
  ck_assert_ptr_null(fs_fdtab_high); /* a low fd needs none */
  ck_assert_int_eq(fs_fdtab_install(hi, c), 0);
  ck_assert_ptr_nonnull(fs_fdtab_high);
  ck_assert(fs_fdtab_tracked(hi) && fs_fdtab_names(hi, c) && fs_fdtab_tracked(lo));
  ck_assert(!fs_fdtab_tracked(hi + 1) && !fs_fdtab_tracked(hi - FS_FDTAB_LOW + 1));
  struct fs_conn *g = fs_fdtab_get(hi);
  ck_assert_ptr_eq(g, c);
  fs_conn_put(g);
  ck_assert_int_eq(fs_fdtab_hiwater, hi + 1);
  ck_assert_ptr_eq(fs_fdtab_take(hi), c);
  ck_assert_ptr_eq(fs_fdtab_take(lo), c);
  ck_assert(!fs_fdtab_tracked(hi) && !fs_fdtab_tracked(lo));
  ck_assert_uint_eq(c->refs, 3); /* the two taken references, and ours */
  fs_conn_put(c);
  fs_conn_put(c);
  fs_conn_put(c);
}
END_TEST

/* The high table cannot be mapped (an address-space limit): an install
 * there fails with ENOMEM and maps nothing; the low fds still work. */
START_TEST(t_high_table_enomem)
{
  struct rlimit rl = { 0, 0 };
  ck_assert_int_eq(getrlimit(RLIMIT_AS, &rl), 0);
  /* Room for this process as it is, not for 8 MiB more. */
  FILE *f = fopen("/proc/self/statm", "r");
  ck_assert_ptr_nonnull(f);
  unsigned long pages = 0;
  ck_assert_int_eq(fscanf(f, "%lu", &pages), 1);
  fclose(f);
  rl.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (1u << 20);
  ck_assert_int_eq(setrlimit(RLIMIT_AS, &rl), 0);
  struct fs_conn *c = fs_conn_new(7, AF_INET);
  ck_assert_ptr_nonnull(c);
  errno = 1234;
  ck_assert_int_eq(fs_fdtab_install(FS_FDTAB_LOW + 3, c), -ENOMEM);
  ck_assert_int_eq(errno, 1234); /* internal: errno untouched */
  ck_assert_ptr_null(fs_fdtab_high);
  ck_assert(!fs_fdtab_tracked(FS_FDTAB_LOW + 3));
  ck_assert_uint_eq(c->refs, 1);
  ck_assert_uint_eq(c->nfds, 0);
  ck_assert_int_eq(fs_fdtab_install(7, c), 0);
  ck_assert(fs_fdtab_tracked(7));
  ck_assert_ptr_eq(fs_fdtab_take(7), c);
  fs_conn_put(c);
  fs_conn_put(c);
}
END_TEST

START_TEST(t_install_get_take)
{
  struct fs_conn *c = fs_conn_new(100, AF_INET);
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(fs_fdtab_install(100, c), 0);
  ck_assert_int_eq(fs_fdtab_install(101, c), 0); /* a dup */
  ck_assert_uint_eq(c->refs, 3);
  ck_assert_uint_eq(c->nfds, 2);
  struct fs_conn *g = fs_fdtab_get(101);
  ck_assert_ptr_eq(g, c);
  fs_conn_put(g);
  struct fs_conn *t = fs_fdtab_take(100);
  ck_assert_ptr_eq(t, c);
  ck_assert_uint_eq(c->nfds, 1);
  fs_conn_put(t);
  ck_assert_ptr_null(fs_fdtab_get(100));
  t = fs_fdtab_take(101);
  fs_conn_put(t);
  ck_assert_uint_eq(c->refs, 1);
  fs_conn_put(c);
  ck_assert_int_eq(fs_fdtab_install(-3, c), -EBADF);
}
END_TEST

START_TEST(t_stale_replaced)
{
  struct fs_conn *a = fs_conn_new(200, AF_INET), *b = fs_conn_new(200, AF_INET6);
  fs_fdtab_install(200, a);
  fs_conn_put(a); /* table holds the only ref */
  fs_fdtab_install(200, b); /* a close we never saw: a is dropped */
  struct fs_conn *g = fs_fdtab_get(200);
  ck_assert_ptr_eq(g, b);
  ck_assert_int_eq(g->family, AF_INET6);
  fs_conn_put(g);
  fs_conn_put(fs_fdtab_take(200));
  fs_conn_put(b);
}
END_TEST

static struct fs_conn *foreach_want;

static void foreach_fn(int fd, struct fs_conn *x, void *arg)
{
  (void)fd;
  if (x == foreach_want)
    (*(int *)arg)++;
}

START_TEST(t_foreach)
{
  struct fs_conn *c = fs_conn_new(300, AF_INET);
  fs_fdtab_install(300, c);
  fs_fdtab_install(302, c);
  int seen = 0;
  foreach_want = c;
  fs_fdtab_foreach(foreach_fn, &seen);
  ck_assert_int_eq(seen, 2);
  fs_conn_put(fs_fdtab_take(300));
  fs_conn_put(fs_fdtab_take(302));
  fs_conn_put(c);
}
END_TEST

static volatile int stop;

static void *reader(void *arg)
{
  (void)arg;
  unsigned long hits = 0;
  while (!stop)
    for (int fd = 400; fd < 408; fd++) {
      struct fs_conn *c = fs_fdtab_get(fd);
      if (c) {
        /* A reference we hold keeps the object alive and for this fd. */
        ck_assert_uint_ge(c->refs, 1);
        ck_assert_int_eq(c->fd, fd);
        hits++;
        fs_conn_put(c);
      }
    }
  return (void *)hits;
}

START_TEST(t_race_readers_closers)
{
  pthread_t th[3];
  stop = 0;
  for (int i = 0; i < 3; i++)
    pthread_create(&th[i], NULL, reader, NULL);
  for (int round = 0; round < 200000; round++) {
    int fd = 400 + round % 8;
    struct fs_conn *c = fs_conn_new(fd, AF_INET);
    ck_assert_ptr_nonnull(c);
    fs_fdtab_install(fd, c);
    fs_conn_put(c);
    struct fs_conn *t = fs_fdtab_take(fd);
    if (t)
      fs_conn_put(t);
  }
  stop = 1;
  for (int i = 0; i < 3; i++)
    pthread_join(th[i], NULL);
}
END_TEST

START_TEST(t_move_high)
{
  struct rlimit rl;
  ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
  rl.rlim_cur = 1024; /* the usual soft limit: the top quarter starts at 768 */
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
  int fd = eventfd(0, 0);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_lt(fd, 768);
  int hi = fs_fdreg_move_high(fd);
  ck_assert_int_ge(hi, 768);
  ck_assert_int_lt(hi, 1024);
  ck_assert(fs_fdreg_is(hi));
  ck_assert(!fs_fdreg_is(fd));
  ck_assert_int_eq(fcntl(fd, F_GETFD), -1); /* the low number is free again */
  ck_assert_int_eq(errno, EBADF);
  ck_assert_int_eq(fcntl(hi, F_GETFD), FD_CLOEXEC);
  ck_assert_int_eq(write(hi, &(uint64_t){ 1 }, 8), 8); /* the same eventfd */
  fs_fdreg_close(hi);
  ck_assert(!fs_fdreg_is(hi));
  /* no room up there (limit 16): the fd stays where it is, marked */
  rl.rlim_cur = 16;
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
  fd = eventfd(0, 0);
  ck_assert_int_ge(fd, 0);
  int same = fs_fdreg_move_high(fd);
  ck_assert(same == fd || same >= 12);
  ck_assert(fs_fdreg_is(same));
  fs_fdreg_close(same);
}
END_TEST

/* The kernel's fd table size (FDSize in /proc/self/status). */
static long fd_table_size(void)
{
  FILE *f = fopen("/proc/self/status", "r");
  ck_assert_ptr_nonnull(f);
  char line[256];
  long n = -1;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "FDSize:", 7) == 0)
      n = strtol(line + 7, NULL, 10);
  fclose(f);
  return n;
}

/* The table grows to reach the top quarter now, and nothing stays open up
 * there; errno is kept. */
START_TEST(t_reserve)
{
  struct rlimit rl;
  ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
  rl.rlim_cur = 8192; /* the top quarter starts at 6144 */
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
  ck_assert_int_lt(fd_table_size(), 6145); /* a fresh test process */
  errno = 4321;
  fs_fdreg_reserve(0);
  ck_assert_int_eq(errno, 4321);
  ck_assert_int_ge(fd_table_size(), 6145);
  ck_assert_int_eq(fcntl(6144, F_GETFD), -1);
  ck_assert_int_eq(errno, EBADF);
  fs_fdreg_reserve(-1); /* no fd to copy: nothing */
  ck_assert_int_eq(errno, EBADF);
}
END_TEST

static void *sleeper(void *arg)
{
  int *fds = arg;
  char b;
  (void)read(fds[0], &b, 1);
  return NULL;
}

START_TEST(t_proc_threads)
{
  ck_assert_int_eq(fs_proc_threads(), 1); /* each test runs in a forked child */
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, sleeper, fds), 0);
  ck_assert_int_eq(fs_proc_threads(), 2);
  ck_assert_int_eq(write(fds[1], "x", 1), 1);
  pthread_join(t, NULL);
  ck_assert_int_eq(fs_proc_threads(), 1);
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

/* The process's first socket sets its fork work bits (FS_FORK_CONN: every
 * tracked fd has a connection), which a fork() of ours acts on, and
 * registers no fork handlers (base/proc.h: only a daemon(3) or forkpty(3)
 * does, a fork inside libc; registered here, a one-shot client paid two
 * page faults for them).  In a child, whose bits and registration start
 * clear here. */
START_TEST(t_first_conn_sets_work_not_atfork)
{
  pid_t pid = fork();
  if (pid == 0) {
    fs_proc_fork_work = 0;
    fs_proc_atfork_armed = false;
    fs_proc_atfork_set(count_prepare, nothing, nothing);
    pid_t g = fork();
    if (g == 0)
      _exit(0);
    if (g < 0 || waitpid(g, NULL, 0) != g || prepares != 0)
      _exit(2);
    struct fs_conn *c = fs_conn_new(300, AF_INET);
    if (!c || fs_fdtab_install(300, c) != 0)
      _exit(3);
    if (!fs_proc_fork_work_has(FS_FORK_CONN) || fs_proc_atfork_armed)
      _exit(4);
    g = fork();
    if (g == 0)
      _exit(0);
    _exit(g > 0 && waitpid(g, NULL, 0) == g && prepares == 0 ? 0 : 5);
  }
  ck_child_exits_ok(pid);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("fdtab");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, t_untracked_is_null);
  tcase_add_test(tc, t_high_table_mapped_at_first_install);
  tcase_add_test(tc, t_high_table_enomem);
  tcase_add_test(tc, t_install_get_take);
  tcase_add_test(tc, t_stale_replaced);
  tcase_add_test(tc, t_foreach);
  tcase_add_test(tc, t_race_readers_closers);
  tcase_add_test(tc, t_move_high);
  tcase_add_test(tc, t_reserve);
  tcase_add_test(tc, t_proc_threads);
  tcase_add_test(tc, t_first_conn_sets_work_not_atfork);
  suite_add_tcase(s, tc);
  return run_suite(s, true);
}
