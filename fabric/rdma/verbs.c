/* rdma-core, loaded on first use: see verbs.h. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "base/aside.h"
#include "base/fdreg.h"
#include "base/log.h"
#include "fabric/rdma/verbs.h"

struct fs_verbs fs_verbs;

static pthread_once_t fs_verbs_once = PTHREAD_ONCE_INIT;
static int fs_verbs_rc = -ENOENT;

static void fs_verbs_do_load(void)
{
  /* The Debian packages' sonames (libibverbs1, librdmacm1); RTLD_NODELETE:
   * the providers they load keep pointers into them. */
  void *lib_ibv = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  void *lib_cm = lib_ibv ? dlopen("librdmacm.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) : NULL;
  if (!lib_ibv || !lib_cm) {
    fs_log(FS_LOG_INFO, "rdma-core not loadable (%s): remote peers stay on tcp", dlerror());
    return;
  }
  void *sym;
#define FS_VERBS_RESOLVE(lib, name)                                                        \
  sym = dlsym(lib_##lib, #name);                                                           \
  if (!sym) {                                                                              \
    fs_log(FS_LOG_INFO, "rdma-core lacks %s: remote peers stay on tcp", #name);           \
    return;                                                                                \
  }                                                                                        \
  fs_verbs.name = (__typeof__(fs_verbs.name))sym;
  FS_VERBS_LIST(FS_VERBS_RESOLVE)
#undef FS_VERBS_RESOLVE
  fs_verbs_rc = 0;
}

int fs_verbs_load(void)
{
  pthread_once(&fs_verbs_once, fs_verbs_do_load);
  return fs_verbs_rc;
}

/* Counts the uverbs devices; runs aside (base/aside.h): a directory
 * descriptor must not take one of the application's numbers. */
static int fs_verbs_sysfs_job(void *arg)
{
  struct fs_fdreg_dir d;
  int rc = fs_fdreg_dir_open(&d, (const char *)arg);
  if (rc < 0)
    return rc == -ENOENT || rc == -ENOTDIR ? 0 : rc;
  int n = 0;
  for (const char *name; (name = fs_fdreg_dir_next(&d)) != NULL;)
    if (name[0] != '.' && strcmp(name, "abi_version") != 0)
      n++;
  fs_fdreg_dir_close(&d);
  return n;
}

int fs_verbs_devices_in(const char *dir)
{
  return fs_aside_run(fs_verbs_sysfs_job, (void *)dir);
}

bool fs_verbs_device_listed(void)
{
  return fs_verbs_devices_in("/sys/class/infiniband_verbs") != 0;
}
