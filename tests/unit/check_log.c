/* Unit tests for base/log: level parsing, errno left alone, and a process
 * whose stderr is a file past its RLIMIT_FSIZE (sshd's pre-auth child sets
 * it to 0 before its sandbox) is not killed by SIGXFSZ when we log; with
 * "time" a line carries the monotonic clock. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "tests/unit/check_run.h"

START_TEST(t_levels)
{
  ck_assert_int_eq(fs_log_configure("debug"), 0);
  ck_assert_int_eq(fs_log_level, FS_LOG_DEBUG);
  ck_assert_int_eq(fs_log_configure("WARN"), 0);
  ck_assert_int_eq(fs_log_level, FS_LOG_WARN);
  ck_assert_int_eq(fs_log_configure("info,bogus"), -EINVAL);
  ck_assert_int_eq(fs_log_level, FS_LOG_INFO);
}
END_TEST

/* In a child: stderr on a fresh file, the level at info, one line logged
 * (errno kept), then the file limit at 0 and two more lines.  Exit 0 when
 * errno was kept throughout and SIGXFSZ stayed unblocked. */
static int fsize_child(int unused, const char *path)
{
  (void)unused;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || dup2(fd, 2) < 0)
    return 10;
  fs_log_configure("info");
  errno = EXDEV;
  fs_log(FS_LOG_INFO, "before the limit");
  if (errno != EXDEV)
    return 11;
  struct rlimit rl = { 0, 0 };
  if (setrlimit(RLIMIT_FSIZE, &rl) < 0)
    return 12;
  errno = ENOTSOCK;
  fs_log(FS_LOG_WARN, "past the limit: SIGXFSZ would kill us");
  fs_log(FS_LOG_WARN, "and again");
  if (errno != ENOTSOCK)
    return 13;
  sigset_t cur;
  if (sigprocmask(SIG_SETMASK, NULL, &cur) < 0 || sigismember(&cur, SIGXFSZ))
    return 14;
  return 0;
}

/* A file for a child's stderr: its path in path, the fd returned. */
static int log_file(char *path)
{
  strcpy(path, "/tmp/check_log.XXXXXX");
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  return fd;
}

/* Run fn(fd, path) in a child; its wait status. */
static int in_child(int (*fn)(int fd, const char *path), int fd, const char *path)
{
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0)
    _exit(fn(fd, path));
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  return st;
}

START_TEST(t_fsize_limit_not_fatal)
{
  char path[32];
  close(log_file(path));
  int st = in_child(fsize_child, -1, path);
  struct stat sb;
  ck_assert_int_eq(stat(path, &sb), 0);
  unlink(path);
  ck_assert_msg(!WIFSIGNALED(st), "the child died of signal %d", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  ck_assert_int_eq(WEXITSTATUS(st), 0);
  /* The first line only: the limit stopped the rest. */
  ck_assert_int_gt(sb.st_size, 0);
  ck_assert_int_lt(sb.st_size, 100);
}
END_TEST

/* In a child (the word sticks): stderr on a file, "debug,time", one line
 * between two readings of CLOCK_MONOTONIC.  The line has its pid, then the
 * time (seconds.microseconds, between the readings), then the level. */
static int time_child(int fd, const char *unused)
{
  (void)unused;
  if (dup2(fd, 2) < 0 || fs_log_configure("debug,time") != 0)
    return 10;
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  fs_log(FS_LOG_DEBUG, "stamped");
  clock_gettime(CLOCK_MONOTONIC, &b);
  char line[256] = "", msg[32] = "";
  ssize_t n = pread(fd, line, sizeof line - 1, 0);
  long long sec = -1;
  long us = -1;
  int lpid = 0;
  if (n <= 0 || sscanf(line, "fabsock[%d] %lld.%6ld debug: %31s", &lpid, &sec, &us, msg) != 4)
    return 11;
  if (lpid != (int)getpid() || strcmp(msg, "stamped") != 0 || us < 0 || us > 999999)
    return 12;
  long long t = sec * 1000000 + us;
  if (t < (long long)a.tv_sec * 1000000 + a.tv_nsec / 1000 || t > (long long)b.tv_sec * 1000000 + b.tv_nsec / 1000)
    return 13;
  return 0;
}

START_TEST(t_time_word)
{
  char path[32];
  int fd = log_file(path);
  unlink(path);
  int st = in_child(time_child, fd, NULL);
  close(fd);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("log");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, t_levels);
  tcase_add_test(tc, t_fsize_limit_not_fatal);
  tcase_add_test(tc, t_time_word);
  suite_add_tcase(s, tc);
  return run_suite(s, false);
}
