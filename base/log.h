/* Diagnostics to stderr (or syslog), never to stdout, never touching errno.
 *
 * FABSOCK_LOG=error|warn|info|debug[,syslog][,time]; default warn.  time: each
 * line carries the monotonic clock, seconds.microseconds (stderr only). */
#ifndef FS_BASE_LOG_H
#define FS_BASE_LOG_H

enum fs_log_level { FS_LOG_OFF = 0, FS_LOG_ERROR, FS_LOG_WARN, FS_LOG_INFO, FS_LOG_DEBUG };

extern int fs_log_level;

/* Parse a FABSOCK_LOG value; unknown words are ignored (returns -EINVAL). */
int fs_log_configure(const char *spec);

void fs_log_emit(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define fs_log(level, ...) \
  do { \
    if (__builtin_expect((level) <= fs_log_level, 0)) \
      fs_log_emit((level), __VA_ARGS__); \
  } while (0)

#endif
