/* The hook chain: builds instances from a spec, dispatches bytes to them,
 * loads hook shared objects.  Built-ins are called directly; a .so through
 * its struct fabsock_hook_ops. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hooks/hook.h"
#include "hooks/hook_dpi.h"
#include "hooks/hook_frame.h"
#include "hooks/hook_spec.h"
#include "base/log.h"

enum { K_FRAME, K_DPI, K_USER };

struct hook_inst {
  int kind;
  void *state;                        /* fs_hook_frame, fs_hook_dpi, or the .so's */
  const struct fabsock_hook_ops *ops; /* K_USER */
  char name[32];                      /* for log lines */
};

struct fs_hookset {
  int aborted;                  /* atomic; sticky */
  int fd;
  int n;
  int counts;                   /* FS_HOOK_DIR_* counted by frame hooks */
  struct fs_hook_frame *wake;        /* first frame hook checking recv */
  struct hook_inst inst[];
};

/* ---- hook shared objects: loaded once per path, never unloaded (instances
 * of other connections may still run their code) -------------------------- */

#define UMOD_MAX 32

struct umod {
  char *path;
  const struct fabsock_hook_ops *ops;
};

static struct umod umods[UMOD_MAX];
static int numods;
static pthread_mutex_t umod_lock = PTHREAD_MUTEX_INITIALIZER;

static const struct fabsock_hook_ops *umod_find(const char *path)
{
  const struct fabsock_hook_ops *ops = NULL;
  pthread_mutex_lock(&umod_lock);
  for (int i = 0; i < numods; i++)
    if (strcmp(umods[i].path, path) == 0)
      ops = umods[i].ops;
  pthread_mutex_unlock(&umod_lock);
  return ops;
}

static int umod_get(const char *path, const struct fabsock_hook_ops **out, char *err, size_t errlen)
{
  if ((*out = umod_find(path)) != NULL)
    return 0;
  struct stat st;
  if (stat(path, &st) < 0 || !S_ISREG(st.st_mode)) {
    fs_hook_spec_errf(err, errlen, "hook %s: no such file", path);
    return -ENOENT;
  }
  /* dlopen runs the object's constructors: never under our lock.  Loading
   * twice in a race is harmless (dlopen reference-counts one copy). */
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *e = dlerror();
    fs_hook_spec_errf(err, errlen, "hook %s: cannot load: %s", path, e ? e : "?");
    return -ELIBBAD;
  }
  fabsock_hook_entry_fn *entry;
  *(void **)&entry = dlsym(h, "fabsock_hook_entry");
  const struct fabsock_hook_ops *ops = entry ? entry() : NULL;
  if (ops == NULL) {
    fs_hook_spec_errf(err, errlen, "hook %s: no fabsock_hook_entry, or it returned NULL", path);
    dlclose(h);
    return -ELIBBAD;
  }
  if (ops->abi_version == 0 || ops->abi_version > FABSOCK_HOOK_ABI_VERSION) {
    fs_hook_spec_errf(err, errlen, "hook %s: built for hook ABI %u, this library has %d", path,
                 ops->abi_version, FABSOCK_HOOK_ABI_VERSION);
    dlclose(h);
    return -ELIBBAD;
  }
  pthread_mutex_lock(&umod_lock);
  if (numods < UMOD_MAX) {
    char *p = strdup(path);
    if (p) {
      umods[numods].path = p;
      umods[numods].ops = ops;
      numods++;
    }
  }
  pthread_mutex_unlock(&umod_lock);
  *out = ops;
  return 0;
}

/* ---- chain ---------------------------------------------------------------- */

static void set_name(struct hook_inst *in, const char *name)
{
  fs_hook_spec_printable(in->name, sizeof in->name, name, strlen(name));
}

static void inst_close(struct hook_inst *in)
{
  switch (in->kind) {
  case K_FRAME: fs_hook_frame_free(in->state); break;
  case K_DPI: fs_hook_dpi_free(in->state); break;
  default:
    if (in->ops->close)
      in->ops->close(in->state);
  }
}

void fs_hook_close(struct fs_hookset *hs)
{
  if (hs == NULL)
    return;
  int saved = errno;
  for (int i = 0; i < hs->n; i++)
    inst_close(&hs->inst[i]);
  free(hs);
  errno = saved;
}

static int open_item(struct fs_hookset *hs, const struct fs_hook_spec_item *it,
                     const struct fabsock_conn_info *ci, struct fs_stat_conn *stat,
                     char *err, size_t errlen)
{
  struct hook_inst *in = &hs->inst[hs->n];
  int rc;
  if (strchr(it->name, '/')) {
    rc = umod_get(it->name, &in->ops, err, errlen);
    if (rc < 0)
      return rc;
    const char *base = strrchr(it->name, '/') + 1;
    set_name(in, in->ops->name && in->ops->name[0] ? in->ops->name : base);
    in->kind = K_USER;
    in->state = NULL;
    rc = in->ops->open ? in->ops->open(it->args, ci, &in->state) : 0;
    if (rc != 0) {
      fs_hook_spec_errf(err, errlen, "hook %s: open failed (%d)", in->name, rc);
      return rc < 0 ? rc : -EINVAL;
    }
  } else if (strcmp(it->name, "frame") == 0) {
    struct fs_hook_frame_conf conf;
    rc = fs_hook_frame_conf_parse(it->args, &conf, err, errlen);
    if (rc < 0)
      return rc;
    int count = conf.dirs & ~hs->counts;
    in->state = fs_hook_frame_new(&conf, hs->fd, stat, count);
    if (in->state == NULL) {
      fs_hook_spec_errf(err, errlen, "frame: out of memory");
      return -ENOMEM;
    }
    if (stat)
      hs->counts |= count;
    if (hs->wake == NULL && fs_hook_frame_checks(in->state, FS_HOOK_RECV))
      hs->wake = in->state;
    in->kind = K_FRAME;
    set_name(in, "frame");
  } else if (strcmp(it->name, "dpi") == 0) {
    struct fs_hook_dpi_conf conf;
    rc = fs_hook_dpi_conf_parse(it->args, &conf, err, errlen);
    if (rc == 0)
      rc = fs_hook_dpi_new(&conf, hs->fd, (struct fs_hook_dpi **)&in->state, err, errlen);
    if (rc < 0)
      return rc;
    in->kind = K_DPI;
    set_name(in, "dpi");
  } else {
    fs_hook_spec_errf(err, errlen, "unknown hook '%s' (frame, dpi, or a path to a .so)", it->name);
    return -EINVAL;
  }
  hs->n++;
  return 0;
}

int fs_hook_open(const char *spec, const struct fabsock_conn_info *info,
                 struct fs_stat_conn *stat, struct fs_hookset **out)
{
  int saved = errno;
  struct fs_hook_spec sp;
  struct fs_hookset *hs = NULL;
  char err[512] = "", msg[600];
  struct fabsock_conn_info dflt = { .size = sizeof dflt, .fd = -1 };
  *out = NULL;
  int rc = fs_hook_spec_parse(spec, &sp, err, sizeof err);
  if (rc < 0 || sp.n == 0)
    goto out;
  hs = calloc(1, sizeof *hs + (size_t)sp.n * sizeof hs->inst[0]);
  if (hs == NULL) {
    rc = -ENOMEM;
    snprintf(err, sizeof err, "out of memory");
    goto out;
  }
  hs->fd = info ? info->fd : -1;
  for (int i = 0; i < sp.n && rc == 0; i++)
    rc = open_item(hs, &sp.item[i], info ? info : &dflt, stat, err, sizeof err);
  if (rc == 0) {
    *out = hs;
    hs = NULL;
  }
out:
  if (rc < 0) {
    snprintf(msg, sizeof msg, "hook: cannot set up hooks: %s", err);
    fs_hook_spec_log_once(FS_LOG_WARN, msg);
  }
  fs_hook_close(hs);
  fs_hook_spec_free(&sp);
  errno = saved;
  return rc;
}

static int user_verdict(struct fs_hookset *hs, struct hook_inst *in, int dir, int v)
{
  char why[160] = "";
  const char *r = in->ops->reason ? in->ops->reason(in->state) : NULL;
  if (r)
    fs_hook_spec_printable(why, sizeof why, r, strnlen(r, 200));
  else
    snprintf(why, sizeof why, "verdict %d", v);
  fs_log(FS_LOG_WARN, "hook %s: fd %d: %s; closing (%s)", in->name, hs->fd, why,
         dir == FS_HOOK_SEND ? "send" : "recv");
  return 1;
}

static int dispatch(struct fs_hookset *hs, int dir, const void *buf, size_t len)
{
  if (hs == NULL)
    return 0;
  if (__atomic_load_n(&hs->aborted, __ATOMIC_ACQUIRE))
    return -ECONNABORTED;
  if (len == 0)
    return 0;
  int saved = errno, v = 0;
  for (int i = 0; i < hs->n && v == 0; i++) {
    struct hook_inst *in = &hs->inst[i];
    switch (in->kind) {
    case K_FRAME: v = fs_hook_frame_feed(in->state, dir, buf, len); break;
    case K_DPI: v = fs_hook_dpi_feed(in->state, dir, buf, len); break;
    default: {
      int (*fn)(void *, const void *, size_t) = dir == FS_HOOK_SEND ? in->ops->on_send
                                                                     : in->ops->on_recv;
      if (fn && (v = fn(in->state, buf, len)) != FABSOCK_HOOK_PASS)
        v = user_verdict(hs, in, dir, v);
    }
    }
  }
  errno = saved;
  if (v) {
    __atomic_store_n(&hs->aborted, 1, __ATOMIC_RELEASE);
    return -ECONNABORTED;
  }
  return 0;
}

int fs_hook_send(struct fs_hookset *hs, const void *buf, size_t len)
{
  return dispatch(hs, FS_HOOK_SEND, buf, len);
}

int fs_hook_recv(struct fs_hookset *hs, const void *buf, size_t len)
{
  return dispatch(hs, FS_HOOK_RECV, buf, len);
}

size_t fs_hook_wake_hint(struct fs_hookset *hs)
{
  if (hs == NULL || hs->wake == NULL || __atomic_load_n(&hs->aborted, __ATOMIC_RELAXED))
    return 0;
  return fs_hook_frame_wake_hint(hs->wake);
}

int fs_hook_counts_msgs(const struct fs_hookset *hs)
{
  return hs ? hs->counts : 0;
}

uint64_t fs_hook_dpi_matches(const struct fs_hookset *hs)
{
  uint64_t n = 0;
  for (int i = 0; hs && i < hs->n; i++)
    if (hs->inst[i].kind == K_DPI)
      n += fs_hook_dpi_count(hs->inst[i].state);
  return n;
}

int fs_hook_aborted(const struct fs_hookset *hs)
{
  return hs ? __atomic_load_n(&hs->aborted, __ATOMIC_ACQUIRE) : 0;
}

int fs_hook_spec_check(const char *spec, char *err, size_t errlen)
{
  struct fs_hook_spec sp;
  int rc = fs_hook_spec_parse(spec, &sp, err, errlen);
  for (int i = 0; rc == 0 && i < sp.n; i++) {
    const struct fs_hook_spec_item *it = &sp.item[i];
    if (strchr(it->name, '/')) {
      struct stat st;
      if (stat(it->name, &st) < 0 || !S_ISREG(st.st_mode) || access(it->name, R_OK) < 0) {
        fs_hook_spec_errf(err, errlen, "hook %s: no such readable file", it->name);
        rc = -EINVAL;
      }
    } else if (strcmp(it->name, "frame") == 0) {
      struct fs_hook_frame_conf conf;
      rc = fs_hook_frame_conf_parse(it->args, &conf, err, errlen);
    } else if (strcmp(it->name, "dpi") == 0) {
      struct fs_hook_dpi_conf conf;
      struct fs_hook_dpi_patterns *ps = NULL;
      char path[4096];
      rc = fs_hook_dpi_conf_parse(it->args, &conf, err, errlen);
      if (rc == 0) {
        memcpy(path, conf.path, conf.path_len);
        path[conf.path_len] = '\0';
        rc = fs_hook_dpi_patterns_load(path, &ps, err, errlen);
        fs_hook_dpi_patterns_free(ps);
      }
    } else {
      fs_hook_spec_errf(err, errlen, "unknown hook '%s' (frame, dpi, or a path to a .so)",
                        it->name);
      rc = -EINVAL;
    }
  }
  fs_hook_spec_free(&sp);
  return rc < 0 ? -EINVAL : 0;
}
