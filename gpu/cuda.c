/* Lazy, checked, once-only loading of the CUDA driver (see cuda.h). */
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/hot.h"
#include "gpu/cuda.h"
#include "base/log.h"

static struct fs_cuda fs_cuda_tab;
static const struct fs_cuda *fs_cuda_ptr FS_HOT; /* set once by fs_cuda_load; read atomically */
static pthread_once_t fs_cuda_once FS_HOT = PTHREAD_ONCE_INIT;

/* Environment, read once: 0 = unread, 1 = enabled, 2 = disabled. */
static int fs_cuda_env_state FS_HOT;
static const char *fs_cuda_env_lib FS_HOT;

static void fs_cuda_read_env(void)
{
  if (__atomic_load_n(&fs_cuda_env_state, __ATOMIC_ACQUIRE) != 0)
    return;
  /* Racing threads compute the same values. */
  const char *v = getenv("FABSOCK_CUDA");
  /* A library path: not taken from the environment of a setuid program
   * (libfabsock may be preloaded system-wide). */
  const char *lib = secure_getenv("FABSOCK_CUDA_LIB");
  fs_cuda_env_lib = (lib != NULL && *lib != '\0') ? lib : "libcuda.so.1";
  int state = (v != NULL && strcmp(v, "0") == 0) ? 2 : 1;
  __atomic_store_n(&fs_cuda_env_state, state, __ATOMIC_RELEASE);
}

bool fs_cuda_disabled(void)
{
  fs_cuda_read_env();
  return fs_cuda_env_state == 2;
}

const char *fs_cuda_lib_name(void)
{
  fs_cuda_read_env();
  return fs_cuda_env_lib;
}

/* Is an object whose file name starts with `stem` (the driver's name up to
 * ".so") mapped?  dl_iterate_phdr reads the loader's list in memory. */
struct fs_cuda_stem {
  const char *stem;
  size_t len;
  bool seen;
};

static int fs_cuda_stem_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
  (void)size;
  struct fs_cuda_stem *w = arg;
  const char *n = info->dlpi_name ? info->dlpi_name : "";
  const char *slash = strrchr(n, '/');
  if (strncmp(slash ? slash + 1 : n, w->stem, w->len) == 0)
    w->seen = true;
  return w->seen;
}

bool fs_cuda_in_process(void)
{
  if (fs_cuda_disabled())
    return false;
  int saved = errno;
  /* dlopen(RTLD_NOLOAD) of a name that is not loaded searches the whole
   * library path (a dozen failed opens and the cache: at the first send
   * of every process, a PostgreSQL backend per connection).  So only once
   * an object of that name is in the list does it ask the loader, which
   * also knows it by its soname. */
  const char *name = fs_cuda_lib_name(), *slash = strrchr(name, '/');
  struct fs_cuda_stem w = { slash ? slash + 1 : name, 0, false };
  const char *so = strstr(w.stem, ".so");
  w.len = so ? (size_t)(so - w.stem) : strlen(w.stem);
  dl_iterate_phdr(fs_cuda_stem_cb, &w);
  void *h = NULL;
  if (w.seen) {
    h = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
    if (h != NULL)
      dlclose(h); /* NOLOAD took a reference; give it back */
  }
  errno = saved;
  return h != NULL;
}

struct fs_cuda_sym {
  const char *name;
  size_t off;
  bool required;
};

#define FS_CUDA_SYM(n, req) { #n, offsetof(struct fs_cuda, n), req }
static const struct fs_cuda_sym fs_cuda_syms[] = {
  FS_CUDA_SYM(cuInit, true),
  FS_CUDA_SYM(cuPointerGetAttribute, true),
  FS_CUDA_SYM(cuPointerGetAttributes, true),
  FS_CUDA_SYM(cuMemGetAddressRange_v2, true),
  FS_CUDA_SYM(cuMemcpyDtoH_v2, true),
  FS_CUDA_SYM(cuMemcpyHtoD_v2, true),
  FS_CUDA_SYM(cuMemcpyDtoHAsync_v2, true),
  FS_CUDA_SYM(cuMemcpyHtoDAsync_v2, true),
  FS_CUDA_SYM(cuStreamSynchronize, true),
  FS_CUDA_SYM(cuMemHostAlloc, true),
  FS_CUDA_SYM(cuMemFreeHost, true),
  FS_CUDA_SYM(cuCtxGetCurrent, true),
  FS_CUDA_SYM(cuCtxPushCurrent_v2, true),
  FS_CUDA_SYM(cuCtxPopCurrent_v2, true),
  FS_CUDA_SYM(cuDeviceGet, true),
  FS_CUDA_SYM(cuDevicePrimaryCtxRetain, true),
  FS_CUDA_SYM(cuGetErrorString, false),
  FS_CUDA_SYM(cuMemGetHandleForAddressRange, false),
};
#undef FS_CUDA_SYM

static void fs_cuda_load(void)
{
  int saved = errno;
  const char *name = fs_cuda_lib_name();
  if (fs_cuda_disabled())
    goto out;
  void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *e = dlerror();
    fs_log(FS_LOG_INFO, "gpu: cannot load %s (%s); GPU buffers unsupported", name, e ? e : "?");
    goto out;
  }
  struct fs_cuda t;
  memset(&t, 0, sizeof t);
  for (size_t i = 0; i < sizeof fs_cuda_syms / sizeof fs_cuda_syms[0]; i++) {
    void *p = dlsym(h, fs_cuda_syms[i].name);
    if (p == NULL && fs_cuda_syms[i].required) {
      fs_log(FS_LOG_WARN, "gpu: %s lacks %s; GPU buffers unsupported", name, fs_cuda_syms[i].name);
      dlclose(h);
      goto out;
    }
    /* Object and function pointers share a representation on POSIX. */
    memcpy((char *)&t + fs_cuda_syms[i].off, &p, sizeof p);
  }
  fs_cuda_tab = t;
  /* The handle is kept for the life of the process: never dlclose()d. */
  __atomic_store_n(&fs_cuda_ptr, &fs_cuda_tab, __ATOMIC_RELEASE);
  fs_log(FS_LOG_DEBUG, "gpu: loaded %s", name);
out:
  errno = saved;
}

const struct fs_cuda *fs_cuda_get(void)
{
  const struct fs_cuda *t = __atomic_load_n(&fs_cuda_ptr, __ATOMIC_ACQUIRE);
  if (t != NULL)
    return t;
  int saved = errno;
  pthread_once(&fs_cuda_once, fs_cuda_load);
  errno = saved;
  return __atomic_load_n(&fs_cuda_ptr, __ATOMIC_ACQUIRE);
}

const struct fs_cuda *fs_cuda_loaded(void)
{
  return __atomic_load_n(&fs_cuda_ptr, __ATOMIC_ACQUIRE);
}

int fs_cuda_errno(fs_cu_result r)
{
  switch (r) {
  case FS_CU_SUCCESS:
    return 0;
  case FS_CU_ERROR_INVALID_VALUE:
  case FS_CU_ERROR_INVALID_CONTEXT:
  case FS_CU_ERROR_INVALID_HANDLE:
    return -EINVAL;
  case FS_CU_ERROR_OUT_OF_MEMORY:
    return -ENOMEM;
  case FS_CU_ERROR_NOT_INITIALIZED:
  case FS_CU_ERROR_DEINITIALIZED:
  case FS_CU_ERROR_STUB_LIBRARY:
  case FS_CU_ERROR_NO_DEVICE:
  case FS_CU_ERROR_INVALID_DEVICE:
    return -ENODEV;
  case FS_CU_ERROR_ILLEGAL_ADDRESS:
    return -EFAULT;
  case FS_CU_ERROR_NOT_SUPPORTED:
    return -EOPNOTSUPP;
  default:
    return -EIO;
  }
}

const char *fs_cuda_strerror(fs_cu_result r)
{
  const struct fs_cuda *t = fs_cuda_loaded();
  const char *s = NULL;
  if (t != NULL && t->cuGetErrorString != NULL && t->cuGetErrorString(r, &s) == FS_CU_SUCCESS &&
      s != NULL)
    return s;
  return "CUDA error";
}
