#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "base/hot.h"
#include "base/log.h"
#include "base/real.h"

int fs_log_level = FS_LOG_WARN;
static int fs_log_syslog FS_HOT;
static int fs_log_time FS_HOT; /* "time": each line says when (CLOCK_MONOTONIC, s.us) */

int fs_log_configure(const char *spec)
{
  static const char *const names[] = { "off", "error", "warn", "info", "debug" };
  int rc = 0;
  if (spec == NULL)
    return 0;
  while (*spec) {
    size_t n = strcspn(spec, ",");
    int found = 0;
    for (int i = 0; i < 5; i++)
      if (strlen(names[i]) == n && strncasecmp(spec, names[i], n) == 0) {
        fs_log_level = i;
        found = 1;
      }
    if (n == 6 && strncasecmp(spec, "syslog", 6) == 0) {
      fs_log_syslog = 1;
      found = 1;
    }
    if (n == 4 && strncasecmp(spec, "time", 4) == 0) {
      fs_log_time = 1;
      found = 1;
    }
    if (!found && n > 0)
      rc = -EINVAL;
    spec += n;
    if (*spec == ',')
      spec++;
  }
  return rc;
}

/* stderr is dead to us: a file past the process's RLIMIT_FSIZE. */
static int fs_log_stderr_dead FS_HOT;

/* One write, so lines from threads do not interleave.  A process may have
 * set RLIMIT_FSIZE to 0 (sshd's pre-auth child does, before its sandbox)
 * with stderr on a file: the write then raises SIGXFSZ, whose default
 * action kills the process.  So the signal is blocked for the write, and
 * one it raised is taken back before unblocking; stderr is not written
 * again. */
static void fs_log_write(const char *buf, size_t len)
{
  if (__atomic_load_n(&fs_log_stderr_dead, __ATOMIC_RELAXED))
    return;
  sigset_t xfsz, old;
  sigemptyset(&xfsz);
  sigaddset(&xfsz, SIGXFSZ);
  bool masked = pthread_sigmask(SIG_BLOCK, &xfsz, &old) == 0;
  if (FS_REAL(write)(2, buf, len) < 0 && errno == EFBIG) {
    __atomic_store_n(&fs_log_stderr_dead, 1, __ATOMIC_RELAXED);
    if (masked && !sigismember(&old, SIGXFSZ)) {
      const struct timespec now = { 0, 0 };
      (void)sigtimedwait(&xfsz, NULL, &now); /* ours: it was not blocked before */
    }
  }
  if (masked)
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void fs_log_emit(int level, const char *fmt, ...)
{
  static const char *const tags[] = { "", "error", "warn", "info", "debug" };
  int saved = errno;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  if (fs_log_syslog) {
    static const int prio[] = { LOG_ERR, LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };
    vsyslog(prio[level], fmt, ap);
  } else {
    /* With "time", the monotonic clock: the two ends' lines of an upgrade
     * (rendezvous, cutover) line up, and with the application's own. */
    struct timespec ts = { 0, 0 };
    if (fs_log_time)
      clock_gettime(CLOCK_MONOTONIC, &ts);
    int n = fs_log_time ? snprintf(buf, sizeof buf, "fabsock[%d] %lld.%06ld %s: ", (int)getpid(), (long long)ts.tv_sec,
                                   ts.tv_nsec / 1000, tags[level])
                        : snprintf(buf, sizeof buf, "fabsock[%d] %s: ", (int)getpid(), tags[level]);
    if (n < 0)
      n = 0;
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    if (m < 0)
      m = 0;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof buf - 2)
      len = sizeof buf - 2;
    buf[len++] = '\n';
    fs_log_write(buf, len);
  }
  va_end(ap);
  errno = saved;
}
