/* Pointer classification and pinned staging for GPU buffers (see gpu.h). */
#include <errno.h>
#include <stddef.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/hot.h"
#include "gpu/gpu.h"
#include "gpu/cuda.h"
#include "base/log.h"

#define FS_GPU_MAX_DEVICES 64
#define FS_GPU_POOL_MAX 64

/* ---- is the driver in the process? -------------------------------------- */

int fs_gpu_state FS_HOT;                  /* see gpu.h */
uint64_t fs_gpu_next_tick FS_HOT, fs_gpu_recheck_ticks FS_HOT;
static int64_t fs_gpu_next_probe FS_HOT; /* coarse ms; 0 = probe at the next call */
static uint64_t fs_gpu_tick0 FS_HOT;     /* tick and clock at the first probe: calibration */
static int64_t fs_gpu_ms0 FS_HOT;
static unsigned long long fs_gpu_adds FS_HOT; /* the loader's load count at the last probe; 0 = none yet */
static bool fs_gpu_driver_live FS_HOT;    /* the driver answered a query: it is initialised */
static pthread_once_t fs_gpu_atfork_once FS_HOT = PTHREAD_ONCE_INIT;

static struct fs_gpu_stats fs_gpu_st FS_HOT; /* relaxed atomic counters */
#define FS_GPU_COUNT(field, n) __atomic_add_fetch(&fs_gpu_st.field, (n), __ATOMIC_RELAXED)

static void fs_gpu_pool_child(void);
static void fs_gpu_primary_child(void);

static void fs_gpu_atfork_child(void)
{
  /* CUDA is unusable in the child of a process that initialised it; one that
   * never did may still load and use it itself, so probe afresh. */
  if (__atomic_load_n(&fs_gpu_driver_live, __ATOMIC_RELAXED)) {
    __atomic_store_n(&fs_gpu_state, FS_GPU_ST_OFF, __ATOMIC_RELAXED);
  } else {
    __atomic_store_n(&fs_gpu_state, FS_GPU_ST_ABSENT, __ATOMIC_RELAXED);
    __atomic_store_n(&fs_gpu_next_probe, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&fs_gpu_next_tick, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&fs_gpu_adds, 0, __ATOMIC_RELAXED);
  }
  fs_gpu_pool_child();
  fs_gpu_primary_child();
}

static void fs_gpu_register_atfork(void)
{
  pthread_atfork(NULL, NULL, fs_gpu_atfork_child);
}

static int64_t fs_gpu_now_ms(void)
{
  struct timespec ts;
  int saved = errno; /* it cannot fail here, but the caller's errno stays */
  if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0) {
    errno = saved;
    return 0;
  }
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int fs_gpu_adds_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
  if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds)
    *(unsigned long long *)arg = info->dlpi_adds;
  return 1; /* the count is the same in every entry: the first will do */
}

/* How many objects the dynamic loader has loaded so far (0: unknown). */
static unsigned long long fs_gpu_load_count(void)
{
  unsigned long long adds = 0;
  dl_iterate_phdr(fs_gpu_adds_cb, &adds);
  return adds;
}

/* After a probe won the window starting at now (ms): mark the window's end
 * in ticks too, once the tick rate is known (two probes 100 ms apart or
 * more; until then fs_gpu_surely_host asks the clock, as does every look
 * where there is no tick). */
static void fs_gpu_tick_window(int64_t now)
{
  uint64_t t = fs_gpu_tick(), per = __atomic_load_n(&fs_gpu_recheck_ticks, __ATOMIC_RELAXED);
  if (!t)
    return;
  /* Relaxed atomics: a slow winner of an old window may still be here. */
  uint64_t t0 = __atomic_load_n(&fs_gpu_tick0, __ATOMIC_RELAXED);
  int64_t ms0 = __atomic_load_n(&fs_gpu_ms0, __ATOMIC_RELAXED);
  if (!t0) {
    __atomic_store_n(&fs_gpu_ms0, now, __ATOMIC_RELAXED);
    __atomic_store_n(&fs_gpu_tick0, t, __ATOMIC_RELAXED);
  } else if (!per && now - ms0 >= 20 * FS_GPU_RECHECK_MS && t > t0) {
    per = (t - t0) / (uint64_t)(now - ms0) * FS_GPU_RECHECK_MS;
    __atomic_store_n(&fs_gpu_recheck_ticks, per, __ATOMIC_RELAXED);
  }
  if (per)
    __atomic_store_n(&fs_gpu_next_tick, t + per, __ATOMIC_RELAXED);
}

/* Slow path of fs_gpu_maybe_device: probe the loader, rate-limited.
 * at_fork: from fs_gpu_before_fork, which daemon() and forkpty() reach from
 * inside libc's fork handlers, where pthread_atfork would wait for the lock
 * libc holds: a driver found there is left to the next probe outside. */
static bool fs_gpu_probe(bool at_fork)
{
  /* Before anything else: this runs at every send and receive while no
   * driver is in the process. */
  int64_t now = fs_gpu_now_ms();
  int64_t next = __atomic_load_n(&fs_gpu_next_probe, __ATOMIC_RELAXED);
  if (next != 0 && now < next)
    return false;
  int saved = errno;
  bool present = false;
  /* One thread probes; the others answer "no" until it is done. */
  if (!__atomic_compare_exchange_n(&fs_gpu_next_probe, &next, now + FS_GPU_RECHECK_MS, false,
                                   __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    goto out;
  fs_gpu_tick_window(now);
  /* dlopen(RTLD_NOLOAD) of a name that is not loaded searches the library
   * path (several failed opens: ~1 ms on a network root file system, seen
   * at every send of a busy server).  The driver can only have appeared if
   * the loader loaded something since the last probe, which its load
   * counter tells without a system call. */
  unsigned long long adds = fs_gpu_load_count();
  if (adds != 0 && adds == __atomic_load_n(&fs_gpu_adds, __ATOMIC_RELAXED))
    goto out;
  __atomic_store_n(&fs_gpu_adds, adds, __ATOMIC_RELAXED);
  FS_GPU_COUNT(driver_probes, 1);
  if (fs_cuda_disabled()) {
    __atomic_store_n(&fs_gpu_state, FS_GPU_ST_OFF, __ATOMIC_RELEASE);
  } else if (fs_cuda_in_process()) {
    if (at_fork) {
      fs_gpu_note_efault(); /* the next look outside probes at once */
      goto out;
    }
    pthread_once(&fs_gpu_atfork_once, fs_gpu_register_atfork);
    __atomic_store_n(&fs_gpu_state, FS_GPU_ST_PRESENT, __ATOMIC_RELEASE);
    fs_log(FS_LOG_DEBUG, "gpu: %s is in the process; device pointers are checked",
           fs_cuda_lib_name());
    present = true;
  }
out:
  errno = saved;
  return present;
}

void fs_gpu_before_fork(void)
{
  if (__atomic_load_n(&fs_gpu_state, __ATOMIC_ACQUIRE) == FS_GPU_ST_ABSENT)
    (void)fs_gpu_probe(true);
}

bool fs_gpu_maybe_device(const void *p)
{
  int s = __atomic_load_n(&fs_gpu_state, __ATOMIC_ACQUIRE);
  if (__builtin_expect(s == FS_GPU_ST_PRESENT, 0))
    return p != NULL;
  if (s == FS_GPU_ST_OFF || p == NULL)
    return false;
  return fs_gpu_probe(false);
}

void fs_gpu_note_efault(void)
{
  __atomic_store_n(&fs_gpu_adds, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&fs_gpu_next_tick, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&fs_gpu_next_probe, 0, __ATOMIC_RELAXED);
}

/* ---- pointer attributes ------------------------------------------------- */

/* The driver table if p may be device memory and the driver loads, else NULL. */
static const struct fs_cuda *fs_gpu_driver(const void *p)
{
  if (!fs_gpu_maybe_device(p))
    return NULL;
  return fs_cuda_get();
}

/* Fill kind, memtype, managed, device, ctx, buffer_id.  Any doubt is "host":
 * the kernel then handles the buffer exactly as it would without us. */
static void fs_gpu_attrs(const struct fs_cuda *t, const void *p, struct fs_gpu_ptr *out)
{
  unsigned memtype = 0, managed = 0;
  fs_cu_ctx ctx = NULL;
  int ord = -1;
  unsigned long long id = 0;
  fs_cu_ptr dp = (fs_cu_ptr)(uintptr_t)p;
  int attrs[5] = { FS_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, FS_CU_POINTER_ATTRIBUTE_IS_MANAGED,
                   FS_CU_POINTER_ATTRIBUTE_CONTEXT, FS_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                   FS_CU_POINTER_ATTRIBUTE_BUFFER_ID };
  void *data[5] = { &memtype, &managed, &ctx, &ord, &id };
  fs_cu_result r = t->cuPointerGetAttributes(5, attrs, data, dp);
  if (r == FS_CU_ERROR_NOT_INITIALIZED || r == FS_CU_ERROR_DEINITIALIZED)
    return; /* nobody initialised the driver: no device memory exists */
  if (r != FS_CU_SUCCESS) {
    /* Some driver refused the batch; ask one attribute at a time. */
    memtype = managed = 0;
    if (t->cuPointerGetAttribute(&memtype, FS_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dp) !=
        FS_CU_SUCCESS)
      return; /* not a CUDA pointer */
    if (t->cuPointerGetAttribute(&managed, FS_CU_POINTER_ATTRIBUTE_IS_MANAGED, dp) != FS_CU_SUCCESS)
      managed = 0;
    if (t->cuPointerGetAttribute(&ctx, FS_CU_POINTER_ATTRIBUTE_CONTEXT, dp) != FS_CU_SUCCESS)
      ctx = NULL;
    if (t->cuPointerGetAttribute(&ord, FS_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dp) != FS_CU_SUCCESS)
      ord = -1;
    if (t->cuPointerGetAttribute(&id, FS_CU_POINTER_ATTRIBUTE_BUFFER_ID, dp) != FS_CU_SUCCESS)
      id = 0;
  }
  if (!__atomic_load_n(&fs_gpu_driver_live, __ATOMIC_RELAXED))
    __atomic_store_n(&fs_gpu_driver_live, true, __ATOMIC_RELAXED);
  out->memtype = memtype;
  out->managed = managed != 0;
  out->device = memtype != 0 ? ord : -1;
  out->ctx = ctx;
  out->buffer_id = id;
  if (memtype == FS_CU_MEMORYTYPE_DEVICE && !out->managed)
    out->kind = FS_GPU_DEVICE;
}

static void fs_gpu_ptr_init(struct fs_gpu_ptr *pi)
{
  memset(pi, 0, sizeof *pi);
  pi->kind = FS_GPU_HOST;
  pi->device = -1;
}

int fs_gpu_classify(const void *p, size_t len)
{
  (void)len;
  const struct fs_cuda *t = fs_gpu_driver(p);
  if (t == NULL)
    return FS_GPU_HOST;
  int saved = errno;
  struct fs_gpu_ptr pi;
  fs_gpu_ptr_init(&pi);
  fs_gpu_attrs(t, p, &pi);
  FS_GPU_COUNT(classified, 1);
  if (pi.kind == FS_GPU_DEVICE)
    FS_GPU_COUNT(device_hits, 1);
  errno = saved;
  return pi.kind;
}

/* ---- contexts ----------------------------------------------------------- */

static pthread_mutex_t fs_gpu_primary_lock FS_HOT = PTHREAD_MUTEX_INITIALIZER;
static fs_cu_ctx fs_gpu_primary_ctx[FS_GPU_MAX_DEVICES];

static void fs_gpu_primary_child(void)
{
  pthread_mutex_init(&fs_gpu_primary_lock, NULL);
  memset(fs_gpu_primary_ctx, 0, sizeof fs_gpu_primary_ctx);
}

/* The primary context of a device, retained once and kept. */
static int fs_gpu_primary(const struct fs_cuda *t, int ordinal, fs_cu_ctx *out)
{
  if (ordinal < 0 || ordinal >= FS_GPU_MAX_DEVICES)
    return -ENODEV;
  int err = 0;
  pthread_mutex_lock(&fs_gpu_primary_lock);
  if (fs_gpu_primary_ctx[ordinal] == NULL) {
    fs_cu_device dev;
    fs_cu_ctx c = NULL;
    fs_cu_result r = t->cuDeviceGet(&dev, ordinal);
    if (r == FS_CU_SUCCESS)
      r = t->cuDevicePrimaryCtxRetain(&c, dev);
    if (r != FS_CU_SUCCESS)
      err = fs_cuda_errno(r);
    else
      fs_gpu_primary_ctx[ordinal] = c;
  }
  *out = fs_gpu_primary_ctx[ordinal];
  pthread_mutex_unlock(&fs_gpu_primary_lock);
  return err;
}

/* Make the pointer's context current for this thread (pushing it, so the
 * application's own current context comes back in fs_gpu_leave). */
static int fs_gpu_enter(const struct fs_cuda *t, const struct fs_gpu_ptr *pi, bool *pushed)
{
  *pushed = false;
  fs_cu_ctx cur = NULL, want = pi->ctx;
  if (t->cuCtxGetCurrent(&cur) != FS_CU_SUCCESS)
    cur = NULL;
  if (want == NULL) {
    if (cur != NULL)
      return 0;
    int err = fs_gpu_primary(t, pi->device, &want);
    if (err < 0)
      return err;
  }
  if (want == cur)
    return 0;
  fs_cu_result r = t->cuCtxPushCurrent_v2(want);
  if (r != FS_CU_SUCCESS)
    return fs_cuda_errno(r);
  *pushed = true;
  return 0;
}

static void fs_gpu_leave(const struct fs_cuda *t, bool pushed)
{
  fs_cu_ctx popped;
  if (pushed)
    t->cuCtxPopCurrent_v2(&popped);
}

/* Attributes, and for device memory: context entered, range known and
 * checked.  Returns the kind (the caller leaves when *pushed) or -errno. */
static int fs_gpu_prepare(const void *p, size_t len, struct fs_gpu_ptr *pi,
                          const struct fs_cuda **tp, bool *pushed)
{
  fs_gpu_ptr_init(pi);
  *pushed = false;
  const struct fs_cuda *t = fs_gpu_driver(p);
  *tp = t;
  if (t == NULL)
    return FS_GPU_HOST;
  fs_gpu_attrs(t, p, pi);
  FS_GPU_COUNT(classified, 1);
  if (pi->kind != FS_GPU_DEVICE)
    return FS_GPU_HOST;
  FS_GPU_COUNT(device_hits, 1);
  int err = fs_gpu_enter(t, pi, pushed);
  if (err < 0)
    return err;
  fs_cu_ptr base = 0;
  size_t size = 0;
  fs_cu_result r = t->cuMemGetAddressRange_v2(&base, &size, (fs_cu_ptr)(uintptr_t)p);
  if (r != FS_CU_SUCCESS) {
    err = fs_cuda_errno(r);
    goto fail;
  }
  pi->base = (uintptr_t)base;
  pi->size = size;
  uintptr_t a = (uintptr_t)p;
  if (a < pi->base || len > pi->size - (a - pi->base)) {
    err = -EFAULT; /* runs past the allocation, as the kernel would say */
    goto fail;
  }
  return FS_GPU_DEVICE;
fail:
  fs_gpu_leave(t, *pushed);
  *pushed = false;
  return err;
}

int fs_gpu_query(const void *p, size_t len, struct fs_gpu_ptr *out)
{
  int saved = errno;
  const struct fs_cuda *t;
  bool pushed;
  int k = fs_gpu_prepare(p, len, out, &t, &pushed);
  if (t != NULL)
    fs_gpu_leave(t, pushed);
  errno = saved;
  return k;
}

/* ---- pinned staging pool ------------------------------------------------ */

struct fs_gpu_buf {
  void *p;
  int slot; /* pool slot, or -1 for a malloc'd fallback */
};

static struct {
  pthread_mutex_t lock;
  size_t size;
  int cap, n;
  void *buf[FS_GPU_POOL_MAX];
  bool busy[FS_GPU_POOL_MAX];
} fs_gpu_pool = { .lock = PTHREAD_MUTEX_INITIALIZER };
static pthread_once_t fs_gpu_pool_once FS_HOT = PTHREAD_ONCE_INIT;

static void fs_gpu_pool_child(void)
{
  /* The pinned buffers belong to a driver this child cannot use: forget them. */
  pthread_mutex_init(&fs_gpu_pool.lock, NULL);
  fs_gpu_pool.n = 0;
  memset(fs_gpu_pool.busy, 0, sizeof fs_gpu_pool.busy);
}

static unsigned long long fs_gpu_env_size(const char *name, unsigned long long dflt,
                                          unsigned long long lo, unsigned long long hi)
{
  const char *v = getenv(name);
  if (v == NULL || *v == '\0')
    return dflt;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  switch (*end) {
  case 'k': case 'K': x <<= 10; end++; break;
  case 'm': case 'M': x <<= 20; end++; break;
  case 'g': case 'G': x <<= 30; end++; break;
  default: break;
  }
  if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi) {
    fs_log(FS_LOG_WARN, "gpu: ignoring %s=%s (want %llu..%llu)", name, v, lo, hi);
    return dflt;
  }
  return x;
}

static void fs_gpu_pool_init(void)
{
  int saved = errno;
  fs_gpu_pool.size = (size_t)fs_gpu_env_size("FABSOCK_GPU_STAGING_SIZE", 4ull << 20, 4096, 1ull << 30);
  fs_gpu_pool.cap = (int)fs_gpu_env_size("FABSOCK_GPU_STAGING_BUFS", 4, 1, FS_GPU_POOL_MAX);
  errno = saved;
}

/* Up to want (1 or 2) buffers of fs_gpu_pool.size bytes: free pinned ones,
 * then new pinned ones while under the cap (a context is current: we are
 * inside fs_gpu_enter), else one malloc'd one.  Never waits for another
 * thread's transfer.  Returns how many (>= 1) or -ENOMEM. */
static int fs_gpu_pool_get(const struct fs_cuda *t, int want, struct fs_gpu_buf *out)
{
  pthread_once(&fs_gpu_pool_once, fs_gpu_pool_init);
  int got = 0;
  pthread_mutex_lock(&fs_gpu_pool.lock);
  for (int i = 0; i < fs_gpu_pool.n && got < want; i++)
    if (!fs_gpu_pool.busy[i]) {
      fs_gpu_pool.busy[i] = true;
      out[got++] = (struct fs_gpu_buf){ fs_gpu_pool.buf[i], i };
    }
  while (got < want && fs_gpu_pool.n < fs_gpu_pool.cap) {
    void *p = NULL;
    fs_cu_result r = t->cuMemHostAlloc(&p, fs_gpu_pool.size, FS_CU_MEMHOSTALLOC_PORTABLE);
    if (r != FS_CU_SUCCESS || p == NULL) {
      fs_log(FS_LOG_WARN, "gpu: cuMemHostAlloc(%zu): %s; staging through pageable memory",
             fs_gpu_pool.size, fs_cuda_strerror(r));
      fs_gpu_pool.cap = fs_gpu_pool.n; /* do not retry on every transfer */
      break;
    }
    int i = fs_gpu_pool.n++;
    fs_gpu_pool.buf[i] = p;
    fs_gpu_pool.busy[i] = true;
    out[got++] = (struct fs_gpu_buf){ p, i };
    FS_GPU_COUNT(pinned_buffers, 1);
    FS_GPU_COUNT(pinned_bytes, fs_gpu_pool.size);
  }
  pthread_mutex_unlock(&fs_gpu_pool.lock);
  if (got == 0) {
    /* One pinned buffer without overlap is as fast as a pinned and a pageable
     * one (copies to pageable memory are synchronous); so malloc only when
     * there is no pinned buffer at all. */
    void *p = malloc(fs_gpu_pool.size);
    if (p == NULL)
      return -ENOMEM;
    out[got++] = (struct fs_gpu_buf){ p, -1 };
    FS_GPU_COUNT(unpinned_fallbacks, 1);
  }
  return got;
}

static void fs_gpu_pool_put(struct fs_gpu_buf *b, int n)
{
  pthread_mutex_lock(&fs_gpu_pool.lock);
  for (int i = 0; i < n; i++)
    if (b[i].slot >= 0)
      fs_gpu_pool.busy[b[i].slot] = false;
  pthread_mutex_unlock(&fs_gpu_pool.lock);
  for (int i = 0; i < n; i++)
    if (b[i].slot < 0)
      free(b[i].p);
}

/* ---- copies ------------------------------------------------------------- */

static ssize_t fs_gpu_copy(void *dst, const void *src, size_t n, bool from_device)
{
  if (n == 0)
    return 0;
  int saved = errno;
  const void *dev = from_device ? src : dst;
  struct fs_gpu_ptr pi;
  const struct fs_cuda *t;
  bool pushed;
  ssize_t ret = fs_gpu_prepare(dev, n, &pi, &t, &pushed);
  if (ret == FS_GPU_HOST) {
    memcpy(dst, src, n);
    ret = (ssize_t)n;
  } else if (ret == FS_GPU_DEVICE) {
    fs_cu_result r = from_device ? t->cuMemcpyDtoH_v2(dst, (fs_cu_ptr)(uintptr_t)src, n)
                                 : t->cuMemcpyHtoD_v2((fs_cu_ptr)(uintptr_t)dst, src, n);
    ret = r == FS_CU_SUCCESS ? (ssize_t)n : fs_cuda_errno(r);
    if (r != FS_CU_SUCCESS)
      fs_log(FS_LOG_WARN, "gpu: copy of %zu bytes %s device failed: %s", n,
             from_device ? "from" : "to", fs_cuda_strerror(r));
    fs_gpu_leave(t, pushed);
  }
  errno = saved;
  return ret;
}

ssize_t fs_gpu_copy_from_device(void *host_dst, const void *dev_src, size_t n)
{
  return fs_gpu_copy(host_dst, dev_src, n, true);
}

ssize_t fs_gpu_copy_to_device(void *dev_dst, const void *host_src, size_t n)
{
  return fs_gpu_copy(dev_dst, host_src, n, false);
}

/* ---- staged transfers --------------------------------------------------- */

/* A copy failure inside a staged transfer: log it, return it as -errno. */
static int fs_gpu_fail(fs_cu_result r, const char *what, size_t n)
{
  fs_log(FS_LOG_WARN, "gpu: staging %s of %zu bytes failed: %s", what, n, fs_cuda_strerror(r));
  return fs_cuda_errno(r);
}

/* Double-buffered: copy chunk i+1 into one buffer while the sink takes chunk
 * i from the other; the single per-thread stream means a synchronize waits for
 * exactly the one copy in flight. */
static ssize_t fs_gpu_out(const struct fs_cuda *t, struct fs_gpu_buf *b, int nb, size_t chunk,
                          fs_cu_ptr dev, size_t len, fs_gpu_sink_fn sink, void *ctx)
{
  fs_cu_stream s = FS_CU_STREAM_PER_THREAD;
  size_t total = 0, off, cur_n = len < chunk ? len : chunk;
  int cur = 0, err = 0;
  fs_cu_result r = t->cuMemcpyDtoHAsync_v2(b[0].p, dev, cur_n, s);
  if (r == FS_CU_SUCCESS)
    r = t->cuStreamSynchronize(s);
  if (r != FS_CU_SUCCESS)
    return fs_gpu_fail(r, "copy from device", cur_n);
  off = cur_n;
  for (;;) {
    size_t next_n = len - off < chunk ? len - off : chunk;
    bool ahead = nb == 2 && next_n > 0;
    if (ahead) {
      r = t->cuMemcpyDtoHAsync_v2(b[1 - cur].p, dev + off, next_n, s);
      if (r != FS_CU_SUCCESS) {
        err = fs_gpu_fail(r, "copy from device", next_n);
        ahead = false;
        next_n = 0; /* still hand over the chunk we have */
      }
    }
    ssize_t w = sink(ctx, b[cur].p, cur_n);
    if (w < 0 || (size_t)w < cur_n) {
      if (ahead)
        t->cuStreamSynchronize(s); /* the buffer goes back to the pool */
      if (w > 0)
        total += (size_t)w;
      else if (w < 0 && total == 0)
        err = (int)w;
      break;
    }
    total += cur_n;
    if (next_n == 0)
      break;
    if (ahead) {
      r = t->cuStreamSynchronize(s);
      cur = 1 - cur;
    } else {
      r = t->cuMemcpyDtoHAsync_v2(b[cur].p, dev + off, next_n, s);
      if (r == FS_CU_SUCCESS)
        r = t->cuStreamSynchronize(s);
    }
    if (r != FS_CU_SUCCESS) {
      err = fs_gpu_fail(r, "copy from device", next_n);
      break;
    }
    off += next_n;
    cur_n = next_n;
  }
  return total > 0 ? (ssize_t)total : err;
}

/* The source fills one buffer while the previous one is copied to the device;
 * before a buffer is refilled its copy has been waited for.  After the first
 * fill the source is asked only for what is already there (more). */
static ssize_t fs_gpu_in(const struct fs_cuda *t, struct fs_gpu_buf *b, int nb, size_t chunk,
                         fs_cu_ptr dev, size_t len, fs_gpu_source_fn source, void *ctx)
{
  fs_cu_stream s = FS_CU_STREAM_PER_THREAD;
  size_t total = 0, pending = 0; /* bytes of the copy in flight, not yet in total */
  int cur = 0, err = 0;
  fs_cu_result r;
  while (total + pending < len) {
    size_t want = len - total - pending < chunk ? len - total - pending : chunk;
    ssize_t got = source(ctx, b[cur].p, want, total + pending > 0);
    if (got <= 0) {
      err = (int)got; /* after bytes: -EAGAIN (nothing more yet), end or error, not reported now */
      break;
    }
    if ((size_t)got > want)
      got = (ssize_t)want;
    if (pending > 0) {
      r = t->cuStreamSynchronize(s);
      if (r != FS_CU_SUCCESS) {
        fs_log(FS_LOG_ERROR, "gpu: %zu received bytes lost", pending + (size_t)got);
        err = fs_gpu_fail(r, "copy to device", pending);
        pending = 0;
        goto out;
      }
      total += pending;
      pending = 0;
    }
    r = t->cuMemcpyHtoDAsync_v2(dev + total, b[cur].p, (size_t)got, s);
    if (r == FS_CU_SUCCESS && nb == 1)
      r = t->cuStreamSynchronize(s); /* one buffer: it must be free before the next fill */
    if (r != FS_CU_SUCCESS) {
      fs_log(FS_LOG_ERROR, "gpu: %zd received bytes lost", got);
      err = fs_gpu_fail(r, "copy to device", (size_t)got);
      goto out;
    }
    if (nb == 1)
      total += (size_t)got;
    else
      pending = (size_t)got;
    cur = (cur + 1) % nb;
  }
  if (pending > 0) {
    r = t->cuStreamSynchronize(s);
    if (r != FS_CU_SUCCESS) {
      fs_log(FS_LOG_ERROR, "gpu: %zu received bytes lost", pending);
      err = fs_gpu_fail(r, "copy to device", pending);
    } else {
      total += pending;
    }
  }
out:
  return total > 0 ? (ssize_t)total : err;
}

#define FS_GPU_MIN_PIECE (256u << 10)

static ssize_t fs_gpu_stage(void *dev, size_t len, fs_gpu_sink_fn sink, fs_gpu_source_fn source,
                            void *ctx)
{
  if (len == 0)
    return 0;
  int saved = errno;
  struct fs_gpu_ptr pi;
  const struct fs_cuda *t;
  bool pushed;
  ssize_t ret = fs_gpu_prepare(dev, len, &pi, &t, &pushed);
  if (ret == FS_GPU_HOST) {
    ret = sink ? sink(ctx, dev, len) : source(ctx, dev, len, false);
    errno = saved;
    return ret;
  }
  if (ret == FS_GPU_DEVICE) {
    struct fs_gpu_buf b[2];
    pthread_once(&fs_gpu_pool_once, fs_gpu_pool_init);
    /* Two buffers wherever the copies can overlap: a receive that may arrive
     * in ring-sized pieces; a send longer than one piece, a send of 1 MiB cut
     * in four so that the copy from the device and the sink overlap (pieces of
     * 256 KiB at least: each device copy has a fixed cost). */
    size_t chunk = fs_gpu_pool.size;
    if (sink && len / 4 > FS_GPU_MIN_PIECE && len / 4 < chunk)
      chunk = (len / 4 + 4095) & ~(size_t)4095;
    else if (sink && len > FS_GPU_MIN_PIECE && len < chunk)
      chunk = FS_GPU_MIN_PIECE;
    int nb = fs_gpu_pool_get(t, len > chunk || (source && len > 65536) ? 2 : 1, b);
    if (nb < 0) {
      ret = nb;
    } else {
      /* The caller's errno is restored after the callbacks too: they are
       * internal helpers returning -errno. */
      fs_cu_ptr d = (fs_cu_ptr)(uintptr_t)dev;
      ret = sink ? fs_gpu_out(t, b, nb, chunk, d, len, sink, ctx)
                 : fs_gpu_in(t, b, nb, fs_gpu_pool.size, d, len, source, ctx);
      fs_gpu_pool_put(b, nb);
      if (ret > 0) {
        if (sink)
          FS_GPU_COUNT(staged_out_bytes, (uint64_t)ret);
        else
          FS_GPU_COUNT(staged_in_bytes, (uint64_t)ret);
      }
    }
    fs_gpu_leave(t, pushed);
  }
  errno = saved;
  return ret;
}

ssize_t fs_gpu_stage_out(const void *dev, size_t len, fs_gpu_sink_fn sink, void *ctx)
{
  if (sink == NULL)
    return -EINVAL;
  return fs_gpu_stage((void *)(uintptr_t)dev, len, sink, NULL, ctx);
}

ssize_t fs_gpu_stage_in(void *dev, size_t len, fs_gpu_source_fn source, void *ctx)
{
  if (source == NULL)
    return -EINVAL;
  return fs_gpu_stage(dev, len, NULL, source, ctx);
}

/* ---- registration helpers ----------------------------------------------- */

int fs_gpu_dmabuf_fd(const void *p, size_t len)
{
  int saved = errno;
  struct fs_gpu_ptr pi;
  const struct fs_cuda *t;
  bool pushed;
  int ret = fs_gpu_prepare(p, len, &pi, &t, &pushed);
  if (ret == FS_GPU_HOST) {
    ret = -EINVAL;
  } else if (ret == FS_GPU_DEVICE) {
    if (t->cuMemGetHandleForAddressRange == NULL) {
      ret = -EOPNOTSUPP;
    } else {
      int fd = -1;
      fs_cu_result r = t->cuMemGetHandleForAddressRange(&fd, (fs_cu_ptr)(uintptr_t)p, len,
                                                         FS_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
      ret = r == FS_CU_SUCCESS ? fd : fs_cuda_errno(r);
    }
    fs_gpu_leave(t, pushed);
  }
  errno = saved;
  return ret;
}

int fs_gpu_regcache_query(void *arg, uintptr_t addr, size_t len, struct fs_regcache_range *out)
{
  (void)arg;
  struct fs_gpu_ptr pi;
  int k = fs_gpu_query((const void *)addr, len, &pi);
  if (k < 0)
    return k;
  if (k != FS_GPU_DEVICE)
    return -EINVAL;
  out->base = pi.base;
  out->len = pi.size;
  out->id = pi.buffer_id;
  return 0;
}

void fs_gpu_get_stats(struct fs_gpu_stats *out)
{
  out->classified = __atomic_load_n(&fs_gpu_st.classified, __ATOMIC_RELAXED);
  out->device_hits = __atomic_load_n(&fs_gpu_st.device_hits, __ATOMIC_RELAXED);
  out->staged_out_bytes = __atomic_load_n(&fs_gpu_st.staged_out_bytes, __ATOMIC_RELAXED);
  out->staged_in_bytes = __atomic_load_n(&fs_gpu_st.staged_in_bytes, __ATOMIC_RELAXED);
  out->pinned_buffers = __atomic_load_n(&fs_gpu_st.pinned_buffers, __ATOMIC_RELAXED);
  out->pinned_bytes = __atomic_load_n(&fs_gpu_st.pinned_bytes, __ATOMIC_RELAXED);
  out->unpinned_fallbacks = __atomic_load_n(&fs_gpu_st.unpinned_fallbacks, __ATOMIC_RELAXED);
  out->driver_probes = __atomic_load_n(&fs_gpu_st.driver_probes, __ATOMIC_RELAXED);
}
