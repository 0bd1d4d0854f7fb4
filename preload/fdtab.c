#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>

#include "core/sock.h"
#include "preload/fdtab.h"
#include "preload/real.h"

struct fs_conn *fs_fdtab_slots[FS_FDTAB_SIZE];
int fs_fdtab_hiwater;

struct fs_conn *fs_fdtab_get_slow(int fd, struct fs_conn *c)
{
  for (;;) {
    if (fs_conn_tryget(c)) {
      if (__atomic_load_n(&fs_fdtab_slots[fd], __ATOMIC_ACQUIRE) == c)
        return c;
      fs_conn_put(c);
    }
    c = __atomic_load_n(&fs_fdtab_slots[fd], __ATOMIC_ACQUIRE);
    if (c == NULL)
      return NULL;
  }
}

int fs_fdtab_install(int fd, struct fs_conn *c)
{
  if ((unsigned)fd >= FS_FDTAB_SIZE)
    return -EBADF;
  fs_conn_get(c);
  __atomic_fetch_add(&c->nfds, 1, __ATOMIC_RELAXED);
  struct fs_conn *old = __atomic_exchange_n(&fs_fdtab_slots[fd], c, __ATOMIC_ACQ_REL);
  int hw = __atomic_load_n(&fs_fdtab_hiwater, __ATOMIC_RELAXED);
  while (fd + 1 > hw &&
         !__atomic_compare_exchange_n(&fs_fdtab_hiwater, &hw, fd + 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    ;
  if (old != NULL) {
    /* The kernel fd was closed behind our back (closefrom by syscall, ...). */
    if (__atomic_sub_fetch(&old->nfds, 1, __ATOMIC_ACQ_REL) == 0)
      fs_sock_last_close(old);
    fs_conn_put(old);
  }
  return 0;
}

struct fs_conn *fs_fdtab_take(int fd)
{
  if ((unsigned)fd >= FS_FDTAB_SIZE)
    return NULL;
  if (__atomic_load_n(&fs_fdtab_slots[fd], __ATOMIC_RELAXED) == NULL)
    return NULL;
  struct fs_conn *c = __atomic_exchange_n(&fs_fdtab_slots[fd], NULL, __ATOMIC_ACQ_REL);
  if (c)
    __atomic_fetch_sub(&c->nfds, 1, __ATOMIC_ACQ_REL);
  return c;
}

void fs_fdtab_foreach(void (*fn)(int fd, struct fs_conn *c, void *arg), void *arg)
{
  int hw = __atomic_load_n(&fs_fdtab_hiwater, __ATOMIC_ACQUIRE);
  for (int fd = 0; fd < hw; fd++) {
    struct fs_conn *c = fs_fdtab_get(fd);
    if (c != NULL) {
      fn(fd, c, arg);
      fs_conn_put(c);
    }
  }
}

static uint64_t fs_fdtab_internal_bits[FS_FDTAB_INTERNAL_MAX / 64];

void fs_fdtab_set_internal(int fd, bool on)
{
  if (fd < 0 || fd >= FS_FDTAB_INTERNAL_MAX)
    return;
  uint64_t bit = 1ull << (fd & 63);
  if (on)
    __atomic_fetch_or(&fs_fdtab_internal_bits[fd / 64], bit, __ATOMIC_RELEASE);
  else
    __atomic_fetch_and(&fs_fdtab_internal_bits[fd / 64], ~bit, __ATOMIC_RELEASE);
}

bool fs_fdtab_internal(int fd)
{
  if (fd < 0 || fd >= FS_FDTAB_INTERNAL_MAX)
    return false;
  return (__atomic_load_n(&fs_fdtab_internal_bits[fd / 64], __ATOMIC_ACQUIRE) >> (fd & 63)) & 1;
}

int fs_fdtab_high(int fd)
{
  int saved = errno;
  struct rlimit rl;
  unsigned long lim = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (unsigned long)rl.rlim_cur
                                                                                          : 1024;
  unsigned long base = lim / 4 * 3; /* where core/sock.c stops accelerating */
  if (base > FS_FDTAB_INTERNAL_MAX * 3ul / 4)
    base = FS_FDTAB_INTERNAL_MAX * 3ul / 4;
  if (fd >= 0 && (unsigned long)fd < base) {
    int hi = FS_REAL(fcntl)(fd, F_DUPFD_CLOEXEC, (int)base);
    if (hi >= 0) {
      FS_REAL(close)(fd);
      fd = hi;
    }
  }
  errno = saved;
  return fd;
}

int fs_fdtab_move_high(int fd)
{
  fd = fs_fdtab_high(fd);
  fs_fdtab_set_internal(fd, true);
  return fd;
}

void fs_fdtab_close_internal(int fd)
{
  fs_fdtab_set_internal(fd, false);
  FS_REAL(close)(fd);
}
