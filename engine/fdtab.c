#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>

#include "engine/fdtab.h"
#include "base/real.h"

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
    if (__atomic_sub_fetch(&old->nfds, 1, __ATOMIC_ACQ_REL) == 0 && fs_conn_last_fd_hook)
      fs_conn_last_fd_hook(old);
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
