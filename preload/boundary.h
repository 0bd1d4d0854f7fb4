/* The errno boundary: internal code returns -errno, only here is errno set. */
#ifndef FS_PRELOAD_BOUNDARY_H
#define FS_PRELOAD_BOUNDARY_H

#include <errno.h>
#include <sys/types.h>

/* r >= 0 is returned as is; r < 0 sets errno = -r and returns -1. */
static inline ssize_t fs_boundary_ret(ssize_t r)
{
  if (r < 0) {
    errno = (int)-r;
    return -1;
  }
  return r;
}

/* Convert a libc-style result (-1 + errno) into the internal convention. */
#define FS_SYSRET(expr) (__extension__({ __typeof__(expr) r__ = (expr); r__ < 0 ? (__typeof__(r__))-errno : r__; }))

#endif
