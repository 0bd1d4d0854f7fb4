/* Unit tests for base/log: level parsing, errno left alone, and a process
 * whose stderr is a file past its RLIMIT_FSIZE (sshd's pre-auth child sets
 * it to 0 before its sandbox) is not killed by SIGXFSZ when we log. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
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
static int fsize_child(const char *path)
{
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

START_TEST(t_fsize_limit_not_fatal)
{
  char path[] = "/tmp/check_log.XXXXXX";
  int tfd = mkstemp(path);
  ck_assert_int_ge(tfd, 0);
  close(tfd);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0)
    _exit(fsize_child(path));
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
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

int main(void)
{
  Suite *s = suite_create("log");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, t_levels);
  tcase_add_test(tc, t_fsize_limit_not_fatal);
  suite_add_tcase(s, tc);
  return run_suite(s, false);
}
