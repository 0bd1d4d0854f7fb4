#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "base/hot.h"
#include "engine/fdtab.h"
#include "base/real.h"

struct fs_conn *fs_fdtab_low[FS_FDTAB_LOW] FS_HOT_BSS;
struct fs_conn **fs_fdtab_high FS_HOT;
int fs_fdtab_hiwater FS_HOT;

#define FS_FDTAB_BYTES ((size_t)FS_FDTAB_SIZE * sizeof(void *))

void *fs_fdtab_map_new(void)
{
  int saved = errno;
  /* Private: a fork child's copy is its own, as the .bss it replaces was. */
  void *m = mmap(NULL, FS_FDTAB_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  errno = saved;
  return m == MAP_FAILED ? NULL : m;
}

void fs_fdtab_map_drop(void *t)
{
  int saved = errno;
  munmap(t, FS_FDTAB_BYTES);
  errno = saved;
}

FS_FORK_TEXT struct fs_conn *fs_fdtab_get_slow(struct fs_conn **s, struct fs_conn *c)
{
  for (;;) {
    if (fs_conn_tryget(c)) {
      if (__atomic_load_n(s, __ATOMIC_ACQUIRE) == c)
        return c;
      fs_conn_put(c);
    }
    c = __atomic_load_n(s, __ATOMIC_ACQUIRE);
    if (c == NULL)
      return NULL;
  }
}

int fs_fdtab_install(int fd, struct fs_conn *c)
{
  if ((unsigned)fd >= FS_FDTAB_SIZE)
    return -EBADF;
  struct fs_conn **s = FS_FDTAB_SLOT(fs_fdtab_low, &fs_fdtab_high, &fs_fdtab_hiwater, fd, true);
  if (!s)
    return -ENOMEM;
  fs_conn_get(c);
  __atomic_fetch_add(&c->nfds, 1, __ATOMIC_RELAXED);
  struct fs_conn *old = __atomic_exchange_n(s, c, __ATOMIC_ACQ_REL);
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
  struct fs_conn **s = fs_fdtab_slot(fd);
  if (s == NULL || __atomic_load_n(s, __ATOMIC_RELAXED) == NULL)
    return NULL;
  struct fs_conn *c = __atomic_exchange_n(s, NULL, __ATOMIC_ACQ_REL);
  if (c)
    __atomic_fetch_sub(&c->nfds, 1, __ATOMIC_ACQ_REL);
  return c;
}

FS_FORK_TEXT void fs_fdtab_foreach(void (*fn)(int fd, struct fs_conn *c, void *arg), void *arg)
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
