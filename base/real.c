/* Lazy, checked resolution of the real libc symbols listed in real.h. */
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "base/real.h"
#include "base/hot.h"
#include "base/log.h"

struct fs_real_table fs_real_tab FS_HOT;

static const char *const fs_real_names[FS_REAL_ID_COUNT] = {
#define FS_REAL_X_NAME(ret, name, err, params, args) [FS_REAL_ID_##name] = #name,
  FS_REAL_SYMBOLS(FS_REAL_X_NAME)
#undef FS_REAL_X_NAME
};

/* Stubs used when libc lacks a symbol (e.g. close_range on an old libc):
 * the call fails as an unsupported system call would. */
#define FS_REAL_X_STUB(ret, name, err, params, args) \
  static ret fs_real_missing_##name params { errno = ENOSYS; return err; }
FS_REAL_SYMBOLS(FS_REAL_X_STUB)
#undef FS_REAL_X_STUB

static void *const fs_real_stubs[FS_REAL_ID_COUNT] = {
#define FS_REAL_X_STUBPTR(ret, name, err, params, args) [FS_REAL_ID_##name] = (void *)fs_real_missing_##name,
  FS_REAL_SYMBOLS(FS_REAL_X_STUBPTR)
#undef FS_REAL_X_STUBPTR
};

void *fs_real_resolve(enum fs_real_id id)
{
  int saved = errno;
  void *p = dlsym(RTLD_NEXT, fs_real_names[id]);
  if (p == NULL) {
    p = fs_real_stubs[id];
    fs_log(FS_LOG_WARN, "no library after libfabsock has %s; calls fail with ENOSYS", fs_real_names[id]);
  }
  switch (id) {
#define FS_REAL_X_STORE(ret, name, err, params, args) \
  case FS_REAL_ID_##name: \
    __atomic_store_n(&fs_real_tab.name, (__typeof__(fs_real_tab.name))p, __ATOMIC_RELEASE); \
    break;
    FS_REAL_SYMBOLS(FS_REAL_X_STORE)
#undef FS_REAL_X_STORE
  case FS_REAL_ID_COUNT:
    break;
  }
  errno = saved;
  return p;
}

/* Set once all are resolved; then each fork reads only this. */
static bool fs_real_all FS_HOT;

void fs_real_resolve_all(void)
{
  if (__atomic_load_n(&fs_real_all, __ATOMIC_ACQUIRE))
    return;
#define FS_REAL_X_ALL(ret, name, err, params, args) \
  if (!strstr(#name, "io_uring") && __atomic_load_n(&fs_real_tab.name, __ATOMIC_ACQUIRE) == NULL) \
    (void)fs_real_resolve(FS_REAL_ID_##name);
  FS_REAL_SYMBOLS(FS_REAL_X_ALL)
#undef FS_REAL_X_ALL
  __atomic_store_n(&fs_real_all, true, __ATOMIC_RELEASE);
}
