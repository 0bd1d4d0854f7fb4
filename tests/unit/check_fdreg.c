/* base/fdreg.c: the library's descriptors go high and are marked ours, and
 * the windows in which it makes them (fs_fdreg_make_begin/end): an
 * application's close() or fcntl() of a number that is not ours waits for
 * another thread's window to end, so it never finds, nor closes, one of
 * ours at a low number in the middle of its making (`closeall` over rdma
 * found the device's fd at the number it had just closed).  Its own
 * window, one of our numbers, and a fork child never wait. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/aside.h"
#include "base/fdreg.h"
#include "base/proc.h"
#include "tests/unit/check_run.h"

/* A thread that makes an eventfd in a window and keeps the window open
 * until released; then moves the fd high, marks it and ends the window. */
struct maker {
  pthread_t t;
  int low;          /* the number it was made at */
  int high;         /* where it went */
  int made;         /* the fd exists, in the window */
  int release;      /* the test lets the window end */
  int done;         /* moved and marked, the window is over */
  int linger_ms;    /* after release, before the move: a settle that does
                       not wait sees done == 0 */
};

static void *maker_run(void *arg)
{
  struct maker *m = arg;
  fs_fdreg_make_begin();
  m->low = eventfd(0, EFD_CLOEXEC);
  __atomic_store_n(&m->made, 1, __ATOMIC_RELEASE);
  while (!__atomic_load_n(&m->release, __ATOMIC_ACQUIRE))
    sched_yield();
  struct timespec ts = { 0, m->linger_ms * 1000000L };
  nanosleep(&ts, NULL);
  m->high = fs_fdreg_move_high(m->low);
  __atomic_store_n(&m->done, 1, __ATOMIC_RELEASE);
  fs_fdreg_make_end();
  return NULL;
}

static void maker_start(struct maker *m, int linger_ms)
{
  *m = (struct maker){ .linger_ms = linger_ms };
  ck_assert_int_eq(pthread_create(&m->t, NULL, maker_run, m), 0);
  while (!__atomic_load_n(&m->made, __ATOMIC_ACQUIRE))
    sched_yield();
  ck_assert_int_ge(m->low, 0);
}

static void maker_finish(struct maker *m)
{
  __atomic_store_n(&m->release, 1, __ATOMIC_RELEASE);
  ck_assert_int_eq(pthread_join(m->t, NULL), 0);
  ck_assert_int_ne(m->high, m->low); /* it went up */
  ck_assert(fs_fdreg_is(m->high));
  fs_fdreg_close(m->high);
}

/* The number a window's fd took at first, asked about from another
 * thread (as closeall asks after closing everything): settle waits for
 * the window, after which the number is free again. */
START_TEST(t_settle_waits_for_window)
{
  struct maker m;
  maker_start(&m, 30);
  int low = m.low;
  __atomic_store_n(&m.release, 1, __ATOMIC_RELEASE);
  errno = 7;
  ck_assert(fs_fdreg_settle(low));
  ck_assert_int_eq(errno, 7);
  ck_assert_int_eq(__atomic_load_n(&m.done, __ATOMIC_ACQUIRE), 1);
  ck_assert_int_eq(fcntl(low, F_GETFD), -1);
  ck_assert_int_eq(errno, EBADF);
  maker_finish(&m);
  ck_assert(!fs_fdreg_settle(low)); /* no window: one load */
}
END_TEST

/* Our own numbers, and a thread inside a window of its own, never wait
 * (the libraries a window calls close their own fds meanwhile). */
START_TEST(t_settle_skips_ours_and_own)
{
  struct maker m;
  maker_start(&m, 0);
  int ours = fs_fdreg_move_high(eventfd(0, EFD_CLOEXEC));
  ck_assert(fs_fdreg_is(ours));
  ck_assert(!fs_fdreg_settle(ours));
  fs_fdreg_make_begin();
  ck_assert(!fs_fdreg_settle(m.low));
  fs_fdreg_make_end();
  ck_assert_int_eq(__atomic_load_n(&m.done, __ATOMIC_ACQUIRE), 0); /* nobody waited it out */
  maker_finish(&m);
  fs_fdreg_close(ours);
}
END_TEST

/* A fork child has no maker thread: the parent's open window is not its
 * own, and it never waits for it, however the child was made; its own
 * windows count from nothing and end at nothing (an end never takes the
 * parent's count). */
static int child_check(int fd)
{
  if (fs_fdreg_settle(fd))
    return 1;
  fs_fdreg_make_begin();
  if ((fs_fdreg_win & 0xffffffffu) != 1)
    return 2;
  fs_fdreg_make_end();
  if ((fs_fdreg_win & 0xffffffffu) != 0 || fs_fdreg_settle(fd))
    return 3;
  return 0;
}

static void child_does_not_wait(pid_t pid, int fd)
{
  if (pid == 0)
    _exit(child_check(fd));
  ck_child_exits_ok(pid);
}

START_TEST(t_fork_child_does_not_wait)
{
  struct maker m;
  maker_start(&m, 0);
  child_does_not_wait(fork(), m.low);
  child_does_not_wait((pid_t)syscall(SYS_fork), m.low);
  maker_finish(&m);
}
END_TEST

/* A cancel asked for while a thread is in a window acts after it ends:
 * an eventfd's close or the stat file's write inside is a cancellation
 * point, and a window never ended would hold every close() for good. */
static int in_window_survived;

static void *cancelled_in_window(void *arg)
{
  int *go = arg;
  fs_fdreg_make_begin();
  __atomic_store_n(go, 1, __ATOMIC_RELEASE);
  while (__atomic_load_n(go, __ATOMIC_ACQUIRE) != 2)
    sched_yield();
  pthread_testcancel(); /* the cancel is pending: not here */
  in_window_survived = 1;
  fs_fdreg_make_end();
  for (;;)
    pthread_testcancel(); /* here */
  return NULL;
}

START_TEST(t_no_cancel_inside_window)
{
  pthread_t t;
  int go = 0;
  ck_assert_int_eq(pthread_create(&t, NULL, cancelled_in_window, &go), 0);
  while (!__atomic_load_n(&go, __ATOMIC_ACQUIRE))
    sched_yield();
  ck_assert_int_eq(pthread_cancel(t), 0);
  __atomic_store_n(&go, 2, __ATOMIC_RELEASE);
  void *res;
  ck_assert_int_eq(pthread_join(t, &res), 0);
  ck_assert_ptr_eq(res, PTHREAD_CANCELED);
  ck_assert_int_eq(in_window_survived, 1);
  ck_assert_int_eq(fs_fdreg_win & 0xffffffffu, 0);
}
END_TEST

/* A window held past the bound (a thread stopped inside it): the wait
 * that ran into it is the last; later ones return at once. */
START_TEST(t_gives_up_on_a_stuck_window)
{
  struct maker m;
  maker_start(&m, 0);
  int fd = eventfd(0, EFD_CLOEXEC);
  ck_assert(fs_fdreg_settle(fd));  /* waits the bound out */
  ck_assert_int_eq(__atomic_load_n(&m.done, __ATOMIC_ACQUIRE), 0);
  ck_assert(!fs_fdreg_settle(fd)); /* and never again */
  close(fd);
  maker_finish(&m);
}
END_TEST

/* A window's own fd goes high and is marked ours; a made fd the window
 * does not keep is merely high (FS_FDREG_MAKE_HIGH). */
START_TEST(t_make_macros)
{
  int low = eventfd(0, EFD_CLOEXEC); /* the lowest free number now */
  ck_assert_int_ge(low, 0);
  close(low);
  int kept = FS_FDREG_MAKE(eventfd(0, EFD_CLOEXEC));
  ck_assert_int_gt(kept, low);
  ck_assert(fs_fdreg_is(kept));
  int brief = FS_FDREG_MAKE_HIGH(eventfd(0, EFD_CLOEXEC));
  ck_assert_int_gt(brief, low);
  ck_assert(!fs_fdreg_is(brief));
  ck_assert_int_eq(fs_fdreg_win & 0xffffffffu, 0);
  close(brief);
  fs_fdreg_close(kept);
  ck_assert_int_eq(FS_FDREG_MAKE(-1), -1); /* a failed creation stays failed */
}
END_TEST

/* RLIMIT_NOFILE is asked once, then again only when told it changed
 * (preload/proc.c after setrlimit): a lower limit set behind its back
 * leaves a high fd where it was made (the dup up there fails), never
 * anything worse; once told, the new top quarter is used. */
static int high_eventfd(void)
{
  int fd = fs_fdreg_high(eventfd(0, EFD_CLOEXEC));
  ck_assert_int_ge(fd, 0);
  return fd;
}

START_TEST(t_limit_asked_once)
{
  struct rlimit rl;
  ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
  ck_assert_uint_ge(rl.rlim_max, 4000);
  rl.rlim_cur = 4000;
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
  fs_fdreg_limit_changed();
  int fd = high_eventfd();
  ck_assert_int_ge(fd, 3000);
  close(fd);
  rl.rlim_cur = 2000; /* behind its back */
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
  errno = 0;
  fd = high_eventfd();
  ck_assert_int_lt(fd, 1500); /* still aimed at 3000: stayed low */
  ck_assert_int_eq(errno, 0);
  close(fd);
  fs_fdreg_limit_changed();
  fd = high_eventfd();
  ck_assert_int_ge(fd, 1500);
  ck_assert_int_lt(fd, 2000);
  close(fd);
}
END_TEST

/* The malloc-free directory reader: every entry once, over several
 * getdents64 calls (more names than its buffer holds), its descriptor
 * high and closed after; a missing directory is -ENOENT. */
#define DIR_FILES 300
START_TEST(t_dir_reads_every_entry)
{
  char dir[] = "/tmp/check_fdreg.XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[128];
  for (int i = 0; i < DIR_FILES; i++) {
    snprintf(path, sizeof path, "%s/entry-with-a-longish-name-%03d", dir, i);
    int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
  }
  static unsigned char seen[DIR_FILES];
  memset(seen, 0, sizeof seen);
  struct fs_fdreg_dir d;
  ck_assert_int_eq(fs_fdreg_dir_open(&d, dir), 0);
  ck_assert_int_ge(d.fd, 3);
  int fd = d.fd, dots = 0, n = 0;
  for (const char *name; (name = fs_fdreg_dir_next(&d)) != NULL;) {
    if (!strcmp(name, ".") || !strcmp(name, "..")) {
      dots++;
      continue;
    }
    int i = -1;
    ck_assert_int_eq(sscanf(name, "entry-with-a-longish-name-%d", &i), 1);
    ck_assert(i >= 0 && i < DIR_FILES);
    seen[i]++;
    n++;
  }
  ck_assert_int_eq(dots, 2);
  ck_assert_int_eq(n, DIR_FILES);
  for (int i = 0; i < DIR_FILES; i++)
    ck_assert_uint_eq(seen[i], 1);
  fs_fdreg_dir_close(&d);
  ck_assert_int_lt(fcntl(fd, F_GETFD), 0);
  for (int i = 0; i < DIR_FILES; i++) {
    snprintf(path, sizeof path, "%s/entry-with-a-longish-name-%03d", dir, i);
    unlink(path);
  }
  rmdir(dir);
  ck_assert_int_eq(fs_fdreg_dir_open(&d, dir), -ENOENT);
}
END_TEST

/* Allocations made by threads other than the test's own, counted here:
 * the test program's malloc family comes first (glibc's __libc_ ones do
 * the work).  A thread's first malloc reserves a glibc arena (64 MiB of
 * address space) unless a free one is at hand, so the count is the test,
 * not the arenas. */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
static pid_t test_tid;
static unsigned others;

static void count_other(void)
{
  if (test_tid && syscall(SYS_gettid) != test_tid)
    __atomic_add_fetch(&others, 1, __ATOMIC_RELAXED);
}

void *malloc(size_t n)
{
  count_other();
  return __libc_malloc(n);
}

void *calloc(size_t k, size_t n)
{
  count_other();
  return __libc_calloc(k, n);
}

void *realloc(void *p, size_t n)
{
  count_other();
  return __libc_realloc(p, n);
}

/* A scan run aside (here /proc/PID/fd) mallocs nothing: the aside thread's
 * first malloc reserved a glibc arena, 64 MiB of the application's address
 * space, and a client under ulimit -v ran out of memory. */
START_TEST(t_aside_scan_mallocs_nothing)
{
  ck_assert_int_eq(fs_proc_holds_socket((int)getpid(), 1), 0); /* the thread started */
  ck_assert(fs_aside_active()); /* it does run aside */
  test_tid = (pid_t)syscall(SYS_gettid);
  __atomic_store_n(&others, 0, __ATOMIC_RELAXED);
  ck_assert_int_eq(fs_proc_holds_socket((int)getpid(), 1), 0);
  ck_assert_uint_eq(__atomic_load_n(&others, __ATOMIC_RELAXED), 0);
  test_tid = 0;
}
END_TEST

int main(void)
{
  Suite *s = suite_create("fdreg");
  TCase *tc = tcase_create("window");
  tcase_add_test(tc, t_settle_waits_for_window);
  tcase_add_test(tc, t_settle_skips_ours_and_own);
  tcase_add_test(tc, t_fork_child_does_not_wait);
  tcase_add_test(tc, t_make_macros);
  tcase_add_test(tc, t_no_cancel_inside_window);
  tcase_add_test(tc, t_gives_up_on_a_stuck_window);
  tcase_add_test(tc, t_limit_asked_once);
  tcase_add_test(tc, t_dir_reads_every_entry);
  tcase_add_test(tc, t_aside_scan_mallocs_nothing);
  suite_add_tcase(s, tc);
  return run_suite(s, true);
}
