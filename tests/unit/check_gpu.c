/* Unit tests of gpu/ (cuda.c, gpu.c) over the fake driver (fakecuda.c).
 *
 * Each test runs in its own forked process (Check's fork mode, forced below),
 * so each starts with the driver neither loaded nor probed.  "The
 * application" loading CUDA is simulated by dlopen()ing the fake ourselves. */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpu/cuda.h"
#include "gpu/gpu.h"
#include "gpu/regcache.h"
#include "tests/unit/fakecuda.h"
#include "tests/unit/check_run.h"

typedef fs_cu_result R;
typedef fs_cu_ptr P;

static char fake_path[PATH_MAX];

static struct {
  void *h;
  R (*cuInit)(unsigned);
  R (*cuDevicePrimaryCtxRetain)(fs_cu_ctx *, fs_cu_device);
  R (*cuCtxSetCurrent)(fs_cu_ctx);
  R (*cuCtxGetCurrent)(fs_cu_ctx *);
  R (*cuMemAlloc_v2)(P *, size_t);
  R (*cuMemFree_v2)(P);
  R (*cuMemAllocManaged)(P *, size_t, unsigned);
  R (*cuMemHostAlloc)(void **, size_t, unsigned);
  R (*cuMemFreeHost)(void *);
  fakecuda_stats_fn stats;
  fakecuda_shadow_fn shadow;
  fakecuda_fail_copy_fn fail_copy;
  fakecuda_alloc_noctx_fn alloc_noctx;
  fakecuda_hostalloc_fail_fn hostalloc_fail;
  fs_cu_ctx ctx[2];
} app;

#define SYM(name, field) \
  do { \
    void *p_ = dlsym(app.h, name); \
    ck_assert_msg(p_ != NULL, "fake lacks %s", name); \
    memcpy(&app.field, &p_, sizeof p_); \
  } while (0)

/* The application loads (and, if init, initialises) the driver; device 0's
 * primary context becomes current. */
static void app_load(bool init)
{
  app.h = dlopen(fake_path, RTLD_NOW | RTLD_LOCAL);
  ck_assert_msg(app.h != NULL, "dlopen %s: %s", fake_path, dlerror());
  SYM("cuInit", cuInit);
  SYM("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain);
  SYM("cuCtxSetCurrent", cuCtxSetCurrent);
  SYM("cuCtxGetCurrent", cuCtxGetCurrent);
  SYM("cuMemAlloc_v2", cuMemAlloc_v2);
  SYM("cuMemFree_v2", cuMemFree_v2);
  SYM("cuMemAllocManaged", cuMemAllocManaged);
  SYM("cuMemHostAlloc", cuMemHostAlloc);
  SYM("cuMemFreeHost", cuMemFreeHost);
  SYM("fakecuda_stats", stats);
  SYM("fakecuda_shadow", shadow);
  SYM("fakecuda_fail_copy", fail_copy);
  SYM("fakecuda_alloc_noctx", alloc_noctx);
  SYM("fakecuda_hostalloc_fail", hostalloc_fail);
  if (!init)
    return;
  ck_assert_int_eq(app.cuInit(0), 0);
  ck_assert_int_eq(app.cuDevicePrimaryCtxRetain(&app.ctx[0], 0), 0);
  ck_assert_int_eq(app.cuDevicePrimaryCtxRetain(&app.ctx[1], 1), 0);
  ck_assert_int_eq(app.cuCtxSetCurrent(app.ctx[0]), 0);
}

/* Use the fake, loaded and initialised, and make sure libfabsock sees it. */
static void use_fake(void)
{
  setenv("FABSOCK_CUDA_LIB", fake_path, 1);
  app_load(true);
  fs_gpu_note_efault();
  char probe;
  ck_assert(fs_gpu_maybe_device(&probe));
}

static P dev_alloc(size_t n)
{
  P p = 0;
  ck_assert_int_eq(app.cuMemAlloc_v2(&p, n), 0);
  return p;
}

static unsigned char *shadow(P p, size_t n)
{
  unsigned char *v = app.shadow(p, n);
  ck_assert_ptr_nonnull(v);
  return v;
}

static bool maps_has(const char *needle)
{
  FILE *f = fopen("/proc/self/maps", "r");
  ck_assert_ptr_nonnull(f);
  char line[4096];
  bool found = false;
  while (fgets(line, sizeof line, f) != NULL)
    if (strstr(line, needle) != NULL)
      found = true;
  fclose(f);
  return found;
}

static void fill(unsigned char *p, size_t n, uint64_t seed)
{
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    memcpy(p + i, &x, 8);
  }
  for (; i < n; i++)
    p[i] = (unsigned char)(i * 131 + seed);
}

static uint64_t checksum(const unsigned char *p, size_t n)
{
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

/* ---- sinks and sources -------------------------------------------------- */

struct sink {
  unsigned char *dst;
  size_t got, limit, max_n;
  int calls, fail_at;
  ssize_t fail_err;
};

static ssize_t sink_fn(void *c, const void *host, size_t n)
{
  struct sink *s = c;
  s->calls++;
  if (n > s->max_n)
    s->max_n = n;
  if (s->fail_at != 0 && s->calls == s->fail_at)
    return s->fail_err;
  size_t take = n;
  if (s->limit != 0 && s->got + take > s->limit)
    take = s->limit - s->got;
  memcpy(s->dst + s->got, host, take);
  s->got += take;
  errno = EBADMSG; /* a sink may clobber errno; the caller must not see it */
  return (ssize_t)take;
}

struct source {
  const unsigned char *src;
  size_t len, off, short_n, max_n;
  int calls, fail_at, short_at;
  int more_calls;  /* calls that may not block */
  bool dry;        /* after the short read nothing more has arrived (-EAGAIN) */
  bool blocked_late; /* a call after the first was allowed to block */
  ssize_t fail_err;
};

static ssize_t source_fn(void *c, void *host, size_t n, bool more)
{
  struct source *s = c;
  s->calls++;
  s->more_calls += more;
  if (s->calls > 1 && !more)
    s->blocked_late = true;
  if (more && s->dry && s->short_at != 0 && s->calls > s->short_at)
    return -EAGAIN;
  if (n > s->max_n)
    s->max_n = n;
  if (s->fail_at != 0 && s->calls == s->fail_at)
    return s->fail_err;
  size_t give = n;
  if (s->short_at != 0 && s->calls == s->short_at && s->short_n < give)
    give = s->short_n;
  if (give > s->len - s->off)
    give = s->len - s->off;
  memcpy(host, s->src + s->off, give);
  s->off += give;
  return (ssize_t)give;
}

/* ---- no driver ---------------------------------------------------------- */

START_TEST(test_no_driver)
{
  unsetenv("FABSOCK_CUDA_LIB");
  unsetenv("FABSOCK_CUDA");
  char buf[64] = "hello", out[64];
  errno = EXDEV;
  ck_assert(!fs_gpu_maybe_device(buf));
  ck_assert_int_eq(fs_gpu_classify(buf, sizeof buf), FS_GPU_HOST);
  fs_gpu_note_efault();
  ck_assert(!fs_gpu_maybe_device(buf));
  ck_assert_int_eq(fs_gpu_copy_from_device(out, buf, sizeof buf), (ssize_t)sizeof buf);
  ck_assert_str_eq(out, "hello");
  struct sink s = { .dst = (unsigned char *)out };
  ck_assert_int_eq(fs_gpu_stage_out(buf, 6, sink_fn, &s), 6); /* passthrough */
  ck_assert_int_eq(s.calls, 1);
  ck_assert_int_eq(fs_gpu_dmabuf_fd(buf, sizeof buf), -EINVAL);
  ck_assert_int_eq(errno, EXDEV);
  ck_assert(!maps_has("libcuda"));
}
END_TEST

START_TEST(test_fake_not_loaded_is_not_loaded)
{
  /* The driver exists on disk but the application never loaded it: libfabsock
   * must not map it either. */
  setenv("FABSOCK_CUDA_LIB", fake_path, 1);
  char buf[16];
  for (int i = 0; i < 3; i++) {
    fs_gpu_note_efault();
    ck_assert(!fs_gpu_maybe_device(buf));
    ck_assert_int_eq(fs_gpu_classify(buf, sizeof buf), FS_GPU_HOST);
  }
  ck_assert(!maps_has("fakecuda"));
  ck_assert_ptr_null(fs_cuda_loaded());
}
END_TEST

START_TEST(test_disabled)
{
  setenv("FABSOCK_CUDA_LIB", fake_path, 1);
  setenv("FABSOCK_CUDA", "0", 1);
  app_load(true);
  P d = dev_alloc(4096);
  fs_gpu_note_efault();
  ck_assert(!fs_gpu_maybe_device((void *)d));
  ck_assert_int_eq(fs_gpu_classify((void *)d, 4096), FS_GPU_HOST);
  ck_assert_ptr_null(fs_cuda_get());
  struct fakecuda_stats st;
  app.stats(&st);
  ck_assert_uint_eq(st.pointer_queries, 0);
}
END_TEST

START_TEST(test_detect_after_load)
{
  setenv("FABSOCK_CUDA_LIB", fake_path, 1);
  char buf[16];
  ck_assert(!fs_gpu_maybe_device(buf)); /* probed: absent */
  app_load(true);
  /* Within the rate-limit window the cached "absent" may stand; after it, or
   * after an EFAULT, the driver is seen. */
  struct timespec ts = { 0, 30 * 1000 * 1000 };
  nanosleep(&ts, NULL);
  ck_assert(fs_gpu_maybe_device(buf));
  ck_assert(!fs_gpu_maybe_device(NULL));
}
END_TEST

/* Before a fork (fs_gpu_before_fork, engine/sockfork.c): the "absent"
 * answer is made in the parent for its child, and a driver found there is
 * not taken (that path registers a fork handler, which daemon() and
 * forkpty() would reach from inside libc's: a deadlock); the next look
 * outside sees it at once. */
START_TEST(test_before_fork)
{
  setenv("FABSOCK_CUDA_LIB", fake_path, 1);
  char buf[16];
  struct fs_gpu_stats st;
  fs_gpu_before_fork();
  fs_gpu_get_stats(&st);
  uint64_t probes = st.driver_probes;
  ck_assert_uint_ge(probes, 1);
  ck_assert(!fs_gpu_maybe_device(buf)); /* the answer made before the fork stands */
  fs_gpu_get_stats(&st);
  ck_assert_uint_eq(st.driver_probes, probes);
  app_load(true);
  struct timespec ts = { 0, 10 * 1000 * 1000 };
  nanosleep(&ts, NULL); /* past the rate limit */
  fs_gpu_before_fork();
  ck_assert_int_eq(__atomic_load_n(&fs_gpu_state, __ATOMIC_RELAXED), FS_GPU_ST_ABSENT);
  ck_assert(fs_gpu_maybe_device(buf)); /* no wait for the window: found at once */
  ck_assert_int_eq(__atomic_load_n(&fs_gpu_state, __ATOMIC_RELAXED), FS_GPU_ST_PRESENT);
}
END_TEST

/* The driver is looked for (a NOLOAD dlopen: file system calls) only when
 * the loader has loaded something since the last look. */
START_TEST(test_probe_only_after_load)
{
  setenv("FABSOCK_CUDA_LIB", fake_path, 1);
  char buf[16];
  struct fs_gpu_stats st;
  struct timespec ts = { 0, 10 * 1000 * 1000 };
  ck_assert(!fs_gpu_maybe_device(buf));
  fs_gpu_get_stats(&st);
  uint64_t probes = st.driver_probes;
  ck_assert_uint_ge(probes, 1);
  for (int i = 0; i < 3; i++) {
    nanosleep(&ts, NULL); /* past the rate limit each time */
    ck_assert(!fs_gpu_maybe_device(buf));
  }
  fs_gpu_get_stats(&st);
  ck_assert_uint_eq(st.driver_probes, probes);
  app_load(true);
  nanosleep(&ts, NULL);
  ck_assert(fs_gpu_maybe_device(buf));
  fs_gpu_get_stats(&st);
  ck_assert_uint_eq(st.driver_probes, probes + 1);
}
END_TEST

/* Between probes the rate limit runs on the tick, so the data path's check
 * makes no call: once the probes have calibrated it, a look right after a
 * probe is answered inline; after the window, or after an EFAULT, not. */
START_TEST(test_tick_window)
{
  char buf[16];
  if (fs_gpu_tick() == 0)
    return; /* no cheap tick on this CPU: every look asks the clock */
  struct timespec ts = { 0, 10 * 1000 * 1000 };
  ck_assert(!fs_gpu_maybe_device(buf));
  ck_assert(!fs_gpu_surely_host()); /* not calibrated yet */
  for (int i = 0; i < 15 && __atomic_load_n(&fs_gpu_recheck_ticks, __ATOMIC_RELAXED) == 0; i++) {
    nanosleep(&ts, NULL); /* past the window: the next look probes */
    ck_assert(!fs_gpu_maybe_device(buf));
  }
  ck_assert_uint_gt(fs_gpu_recheck_ticks, 0);
  /* Right after a probe (a preempted test may miss the 5 ms once or twice). */
  bool inline_answer = false;
  for (int i = 0; i < 5 && !inline_answer; i++) {
    nanosleep(&ts, NULL);
    ck_assert(!fs_gpu_maybe_device(buf));
    inline_answer = fs_gpu_surely_host();
  }
  ck_assert(inline_answer);
  fs_gpu_note_efault();
  ck_assert(!fs_gpu_surely_host());
  nanosleep(&ts, NULL);
  ck_assert(!fs_gpu_maybe_device(buf));
  nanosleep(&ts, NULL);
  ck_assert(!fs_gpu_surely_host()); /* the window is over */
}
END_TEST

START_TEST(test_detect_on_efault)
{
  setenv("FABSOCK_CUDA_LIB", fake_path, 1);
  char buf[16];
  ck_assert(!fs_gpu_maybe_device(buf));
  app_load(true);
  fs_gpu_note_efault();
  ck_assert(fs_gpu_maybe_device(buf));
  P d = dev_alloc(100);
  ck_assert_int_eq(fs_gpu_classify((void *)d, 100), FS_GPU_DEVICE);
}
END_TEST

START_TEST(test_not_initialized)
{
  setenv("FABSOCK_CUDA_LIB", fake_path, 1);
  app_load(false);
  char buf[16];
  fs_gpu_note_efault();
  ck_assert(fs_gpu_maybe_device(buf));
  errno = EXDEV;
  ck_assert_int_eq(fs_gpu_classify(buf, sizeof buf), FS_GPU_HOST);
  ck_assert_int_eq(errno, EXDEV);
}
END_TEST

START_TEST(test_incomplete_driver)
{
  /* A library that is loaded but is no CUDA driver: "no CUDA", remembered. */
  setenv("FABSOCK_CUDA_LIB", "libc.so.6", 1);
  char buf[16] = "x", out[16];
  fs_gpu_note_efault();
  ck_assert(fs_gpu_maybe_device(buf)); /* it is in the process... */
  ck_assert_int_eq(fs_gpu_classify(buf, sizeof buf), FS_GPU_HOST); /* ...but useless */
  ck_assert_ptr_null(fs_cuda_get());
  ck_assert_int_eq(fs_gpu_copy_from_device(out, buf, 2), 2);
}
END_TEST

/* ---- classification ----------------------------------------------------- */

START_TEST(test_classify)
{
  use_fake();
  P d = dev_alloc(10000);
  P m = 0;
  void *pinned = NULL;
  ck_assert_int_eq(app.cuMemAllocManaged(&m, 4096, 1), 0);
  ck_assert_int_eq(app.cuMemHostAlloc(&pinned, 4096, 0), 0);
  char *heap = malloc(100), stack[100];

  errno = EXDEV;
  ck_assert_int_eq(fs_gpu_classify((void *)d, 10000), FS_GPU_DEVICE);
  ck_assert_int_eq(fs_gpu_classify((void *)(d + 9999), 1), FS_GPU_DEVICE);
  ck_assert_int_eq(fs_gpu_classify((void *)m, 4096), FS_GPU_HOST);
  ck_assert_int_eq(fs_gpu_classify(pinned, 4096), FS_GPU_HOST);
  ck_assert_int_eq(fs_gpu_classify(heap, 100), FS_GPU_HOST);
  ck_assert_int_eq(fs_gpu_classify(stack, 100), FS_GPU_HOST);
  ck_assert_int_eq(errno, EXDEV);

  struct fs_gpu_ptr pi;
  ck_assert_int_eq(fs_gpu_query((void *)(d + 10), 100, &pi), FS_GPU_DEVICE);
  ck_assert_uint_eq(pi.memtype, FS_CU_MEMORYTYPE_DEVICE);
  ck_assert(!pi.managed);
  ck_assert_int_eq(pi.device, 0);
  ck_assert_ptr_eq(pi.ctx, app.ctx[0]);
  ck_assert_uint_eq(pi.base, d);
  ck_assert_uint_ge(pi.size, 10000);
  ck_assert_uint_ne(pi.buffer_id, 0);
  /* Running past the allocation is what the kernel calls EFAULT. */
  ck_assert_int_eq(fs_gpu_query((void *)(d + 10), pi.size, &pi), -EFAULT);

  ck_assert_int_eq(fs_gpu_query((void *)m, 4096, &pi), FS_GPU_HOST);
  ck_assert(pi.managed);
  ck_assert_int_eq(fs_gpu_query(pinned, 4096, &pi), FS_GPU_HOST);
  ck_assert_uint_eq(pi.memtype, FS_CU_MEMORYTYPE_HOST);
  ck_assert_int_eq(fs_gpu_query(heap, 100, &pi), FS_GPU_HOST);
  ck_assert_uint_eq(pi.memtype, 0);
  ck_assert_int_eq(pi.device, -1);

  struct fs_gpu_stats gs;
  fs_gpu_get_stats(&gs);
  ck_assert_uint_ge(gs.classified, 6);
  ck_assert_uint_ge(gs.device_hits, 2);
  ck_assert_int_eq(fs_gpu_dmabuf_fd((void *)d, 4096), -EOPNOTSUPP);
  ck_assert_int_eq(fs_gpu_dmabuf_fd(heap, 100), -EINVAL);
  free(heap);
}
END_TEST

START_TEST(test_device_memory_faults)
{
  /* The fake's device memory behaves like the real thing for the kernel. */
  use_fake();
  P d = dev_alloc(4096);
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  ck_assert_int_eq(write(fds[1], (void *)d, 16), -1);
  ck_assert_int_eq(errno, EFAULT);
  close(fds[0]);
  close(fds[1]);
}
END_TEST

/* ---- staging round trips ------------------------------------------------ */

static const size_t sizes[] = { 1, 2, 511, 4096, 4097, 65535, 65536, 65537, 1 << 20,
                                (4 << 20) - 1, 4 << 20, (4 << 20) + 1, (12 << 20) + 7, 64 << 20 };

/* Configurations, by loop index: default (2 x 4 MiB double-buffered), small
 * chunks, a single pinned buffer, and no pinned memory at all. */
static void staging_config(int i)
{
  if (i == 1)
    setenv("FABSOCK_GPU_STAGING_SIZE", "64K", 1);
  if (i == 2) {
    setenv("FABSOCK_GPU_STAGING_SIZE", "256k", 1);
    setenv("FABSOCK_GPU_STAGING_BUFS", "1", 1);
  }
  use_fake();
  if (i == 3) {
    setenv("FABSOCK_GPU_STAGING_SIZE", "1M", 1);
    app.hostalloc_fail(1);
  }
}

/* The piece a send of n bytes is cut in (gpu.h): the staging size, or a
 * quarter of n (256 KiB at least, 4 KiB aligned) when that is smaller. */
static size_t out_piece(size_t n, size_t chunk)
{
  size_t min = 256 << 10;
  if (n / 4 > min && n / 4 < chunk)
    return (n / 4 + 4095) & ~(size_t)4095;
  if (n > min && n < chunk)
    return min;
  return chunk;
}

START_TEST(test_roundtrip)
{
  staging_config(_i);
  size_t chunk = _i == 1 ? 64 << 10 : _i == 2 ? 256 << 10 : _i == 3 ? 1 << 20 : 4 << 20;
  size_t max = 64 << 20;
  unsigned char *src = malloc(max), *dst = malloc(max);
  ck_assert(src && dst);
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t n = sizes[k];
    fill(src, n, n);
    P d = dev_alloc(n);

    /* in: host -> source -> staging -> device */
    struct source so = { .src = src, .len = n };
    errno = EXDEV;
    ck_assert_int_eq(fs_gpu_stage_in((void *)d, n, source_fn, &so), (ssize_t)n);
    ck_assert_int_eq(errno, EXDEV);
    ck_assert_uint_le(so.max_n, chunk);
    ck_assert_msg(memcmp(shadow(d, n), src, n) == 0, "stage_in size %zu config %d", n, _i);

    /* out: device -> staging -> sink -> host */
    memset(dst, 0, n);
    struct sink si = { .dst = dst };
    ck_assert_int_eq(fs_gpu_stage_out((void *)d, n, sink_fn, &si), (ssize_t)n);
    ck_assert_int_eq(errno, EXDEV);
    ck_assert_uint_eq(si.got, n);
    size_t piece = out_piece(n, chunk);
    ck_assert_uint_le(si.max_n, piece);
    ck_assert_int_eq(si.calls, (int)((n + piece - 1) / piece));
    ck_assert_msg(checksum(dst, n) == checksum(src, n), "stage_out size %zu config %d", n, _i);
    ck_assert(memcmp(dst, src, n) == 0);

    /* plain synchronous copies */
    memset(dst, 0, n);
    ck_assert_int_eq(fs_gpu_copy_from_device(dst, (void *)d, n), (ssize_t)n);
    ck_assert(memcmp(dst, src, n) == 0);
    fill(src, n, n + 1);
    ck_assert_int_eq(fs_gpu_copy_to_device((void *)d, src, n), (ssize_t)n);
    ck_assert(memcmp(shadow(d, n), src, n) == 0);
    ck_assert_int_eq(app.cuMemFree_v2(d), 0);
  }
  struct fakecuda_stats st;
  app.stats(&st);
  struct fs_gpu_stats gs;
  fs_gpu_get_stats(&gs);
  if (_i == 0 || _i == 1)
    ck_assert_uint_eq(st.host_allocs, 2); /* double-buffered, reused */
  if (_i == 2)
    ck_assert_uint_eq(st.host_allocs, 1);
  if (_i == 3) {
    ck_assert_uint_eq(st.host_allocs, 0);
    ck_assert_uint_gt(gs.unpinned_fallbacks, 0);
  }
  ck_assert_uint_eq(gs.pinned_buffers, st.host_allocs);
  ck_assert_uint_eq(st.ctx_pushes, st.ctx_pops);
  free(src);
  free(dst);
}
END_TEST

/* ---- partial transfers -------------------------------------------------- */

#define CHUNK (64 << 10)

static P staged_device(unsigned char *pattern, size_t n)
{
  setenv("FABSOCK_GPU_STAGING_SIZE", "64K", 1);
  use_fake();
  P d = dev_alloc(n);
  fill(pattern, n, 7);
  memcpy(shadow(d, n), pattern, n);
  return d;
}

START_TEST(test_sink_short)
{
  size_t n = 5 * CHUNK;
  unsigned char *pat = malloc(n), *dst = calloc(1, n);
  P d = staged_device(pat, n);
  struct sink s = { .dst = dst, .limit = CHUNK + 1000 };
  ck_assert_int_eq(fs_gpu_stage_out((void *)d, n, sink_fn, &s), CHUNK + 1000);
  ck_assert_int_eq(s.calls, 2); /* stopped at the short write */
  ck_assert(memcmp(dst, pat, CHUNK + 1000) == 0);
  /* resuming where it stopped delivers the rest */
  struct sink s2 = { .dst = dst + CHUNK + 1000 };
  ck_assert_int_eq(fs_gpu_stage_out((void *)(d + CHUNK + 1000), n - CHUNK - 1000, sink_fn, &s2),
                   (ssize_t)(n - CHUNK - 1000));
  ck_assert(memcmp(dst, pat, n) == 0);
  free(pat);
  free(dst);
}
END_TEST

START_TEST(test_sink_errors)
{
  size_t n = 5 * CHUNK;
  unsigned char *pat = malloc(n), *dst = calloc(1, n);
  P d = staged_device(pat, n);
  /* an error after progress: the progress */
  struct sink s = { .dst = dst, .fail_at = 3, .fail_err = -EAGAIN };
  ck_assert_int_eq(fs_gpu_stage_out((void *)d, n, sink_fn, &s), 2 * CHUNK);
  ck_assert(memcmp(dst, pat, 2 * CHUNK) == 0);
  /* an error first: the error */
  struct sink e = { .dst = dst, .fail_at = 1, .fail_err = -EPIPE };
  ck_assert_int_eq(fs_gpu_stage_out((void *)d, n, sink_fn, &e), -EPIPE);
  /* a sink taking nothing: 0 */
  struct sink z = { .dst = dst, .limit = 0, .fail_at = 1, .fail_err = 0 };
  ck_assert_int_eq(fs_gpu_stage_out((void *)d, n, sink_fn, &z), 0);
  ck_assert_int_eq(fs_gpu_stage_out((void *)d, 0, sink_fn, &z), 0);
  ck_assert_int_eq(fs_gpu_stage_out((void *)d, n, NULL, &z), -EINVAL);
  /* past the allocation */
  ck_assert_int_eq(fs_gpu_stage_out((void *)(d + 1), n, sink_fn, &s), -EFAULT);
  free(pat);
  free(dst);
}
END_TEST

START_TEST(test_source_short)
{
  size_t n = 5 * CHUNK;
  unsigned char *pat = malloc(n), *src = malloc(n);
  P d = staged_device(pat, n);
  memset(shadow(d, n), 0, n);
  fill(src, n, 99);
  /* a short read, then nothing more has arrived: what arrived */
  struct source so = { .src = src, .len = n, .short_at = 2, .short_n = 123, .dry = true };
  ck_assert_int_eq(fs_gpu_stage_in((void *)d, n, source_fn, &so), CHUNK + 123);
  ck_assert_int_eq(so.calls, 3);
  ck_assert_int_eq(so.more_calls, 2); /* only the first call may block */
  unsigned char *v = shadow(d, n);
  ck_assert(memcmp(v, src, CHUNK + 123) == 0);
  size_t past = 0;
  for (size_t i = CHUNK + 123; i < n; i++)
    past += v[i] != 0;
  ck_assert_msg(past == 0, "%zu bytes written past the short read", past);
  /* a short read with more already waiting does not end the call: one
   * device copy per ring-sized piece would halve the throughput */
  memset(shadow(d, n), 0, n);
  struct source more = { .src = src, .len = n, .short_at = 2, .short_n = 123 };
  ck_assert_int_eq(fs_gpu_stage_in((void *)d, n, source_fn, &more), (ssize_t)n);
  ck_assert(memcmp(shadow(d, n), src, n) == 0);
  ck_assert(!more.blocked_late);
  ck_assert_int_eq(more.more_calls, more.calls - 1);
  /* the end of the data (0) and errors */
  struct source end = { .src = src, .len = 0 };
  ck_assert_int_eq(fs_gpu_stage_in((void *)d, n, source_fn, &end), 0);
  struct source e1 = { .src = src, .len = n, .fail_at = 1, .fail_err = -ECONNRESET };
  ck_assert_int_eq(fs_gpu_stage_in((void *)d, n, source_fn, &e1), -ECONNRESET);
  struct source e3 = { .src = src, .len = n, .fail_at = 4, .fail_err = -EAGAIN };
  ck_assert_int_eq(fs_gpu_stage_in((void *)d, n, source_fn, &e3), 3 * CHUNK);
  ck_assert(memcmp(shadow(d, 3 * CHUNK), src, 3 * CHUNK) == 0);
  free(pat);
  free(src);
}
END_TEST

START_TEST(test_copy_failures)
{
  size_t n = 5 * CHUNK;
  unsigned char *pat = malloc(n), *dst = calloc(1, n);
  P d = staged_device(pat, n);
  /* the 2nd device->host copy fails when synchronised: the sink got chunk 1 */
  app.fail_copy(1, FS_CU_ERROR_ILLEGAL_ADDRESS, FAKECUDA_FAIL_SYNC);
  struct sink s = { .dst = dst };
  ck_assert_int_eq(fs_gpu_stage_out((void *)d, n, sink_fn, &s), CHUNK);
  ck_assert_int_eq(s.calls, 1);
  ck_assert(memcmp(dst, pat, CHUNK) == 0);
  /* the first one fails when issued: nothing, an errno */
  app.fail_copy(0, FS_CU_ERROR_ILLEGAL_ADDRESS, FAKECUDA_FAIL_ISSUE);
  struct sink s2 = { .dst = dst };
  ck_assert_int_eq(fs_gpu_stage_out((void *)d, n, sink_fn, &s2), -EFAULT);
  ck_assert_int_eq(s2.calls, 0);
  /* 3rd fails when issued: two chunks made it */
  app.fail_copy(2, 999, FAKECUDA_FAIL_ISSUE);
  struct sink s3 = { .dst = dst };
  ck_assert_int_eq(fs_gpu_stage_out((void *)d, n, sink_fn, &s3), 2 * CHUNK);
  /* host -> device: the 2nd copy fails at sync; the first chunk is in place */
  app.fail_copy(1, 999, FAKECUDA_FAIL_SYNC);
  struct source so = { .src = pat, .len = n };
  ck_assert_int_eq(fs_gpu_stage_in((void *)d, n, source_fn, &so), CHUNK);
  app.fail_copy(0, 999, FAKECUDA_FAIL_ISSUE);
  struct source so2 = { .src = pat, .len = n };
  ck_assert_int_eq(fs_gpu_stage_in((void *)d, n, source_fn, &so2), -EIO);
  app.fail_copy(0, FS_CU_ERROR_OUT_OF_MEMORY, FAKECUDA_FAIL_ISSUE);
  ck_assert_int_eq(fs_gpu_copy_from_device(dst, (void *)d, 10), -ENOMEM);
  struct fakecuda_stats st;
  app.stats(&st);
  ck_assert_uint_eq(st.ctx_pushes, st.ctx_pops);
  free(pat);
  free(dst);
}
END_TEST

/* ---- contexts ----------------------------------------------------------- */

START_TEST(test_contexts)
{
  size_t n = 3 * CHUNK + 5;
  unsigned char *pat = malloc(n), *dst = malloc(n);
  setenv("FABSOCK_GPU_STAGING_SIZE", "64K", 1);
  use_fake();
  fill(pat, n, 3);
  /* memory of device 1, while the application's current context is device 0's */
  ck_assert_int_eq(app.cuCtxSetCurrent(app.ctx[1]), 0);
  P d1 = dev_alloc(n);
  ck_assert_int_eq(app.cuCtxSetCurrent(app.ctx[0]), 0);
  memcpy(shadow(d1, n), pat, n);
  struct sink s = { .dst = dst };
  ck_assert_int_eq(fs_gpu_stage_out((void *)d1, n, sink_fn, &s), (ssize_t)n);
  ck_assert(memcmp(dst, pat, n) == 0);
  fs_cu_ctx cur = NULL;
  app.cuCtxGetCurrent(&cur);
  ck_assert_ptr_eq(cur, app.ctx[0]); /* the application's context is back */

  /* no current context at all */
  ck_assert_int_eq(app.cuCtxSetCurrent(NULL), 0);
  struct source so = { .src = pat, .len = n };
  memset(shadow(d1, n), 0, n);
  ck_assert_int_eq(fs_gpu_stage_in((void *)d1, n, source_fn, &so), (ssize_t)n);
  ck_assert(memcmp(shadow(d1, n), pat, n) == 0);
  app.cuCtxGetCurrent(&cur);
  ck_assert_ptr_null(cur);

  /* memory reporting no context (VMM-style) on device 1, no current context:
   * device 1's primary context is used */
  P v = 0;
  ck_assert_int_eq(app.alloc_noctx(&v, n, 1), 0);
  memcpy(shadow(v, n), pat, n);
  memset(dst, 0, n);
  ck_assert_int_eq(fs_gpu_copy_from_device(dst, (void *)v, n), (ssize_t)n);
  ck_assert(memcmp(dst, pat, n) == 0);
  app.cuCtxGetCurrent(&cur);
  ck_assert_ptr_null(cur);

  /* ... and with a current context, that one */
  ck_assert_int_eq(app.cuCtxSetCurrent(app.ctx[1]), 0);
  memset(dst, 0, n);
  struct sink s2 = { .dst = dst };
  ck_assert_int_eq(fs_gpu_stage_out((void *)v, n, sink_fn, &s2), (ssize_t)n);
  ck_assert(memcmp(dst, pat, n) == 0);

  struct fakecuda_stats st;
  app.stats(&st);
  ck_assert_uint_eq(st.ctx_pushes, st.ctx_pops);
  ck_assert_uint_gt(st.ctx_pushes, 0);
  free(pat);
  free(dst);
}
END_TEST

/* ---- concurrency and the pool bound ------------------------------------- */

#define THREADS 8
#define TN ((9u << 20) + 11)

static void *worker(void *arg)
{
  uintptr_t k = (uintptr_t)arg;
  unsigned char *src = malloc(TN), *dst = malloc(TN);
  P d = 0;
  fs_cu_ctx c = app.ctx[k % 2];
  app.cuCtxSetCurrent(c);
  if (app.cuMemAlloc_v2(&d, TN) != 0)
    return (void *)1;
  uintptr_t bad = 0;
  for (int round = 0; round < 4 && !bad; round++) {
    fill(src, TN, k * 100 + (uintptr_t)round);
    struct source so = { .src = src, .len = TN };
    struct sink si = { .dst = dst };
    if (fs_gpu_stage_in((void *)d, TN, source_fn, &so) != (ssize_t)TN ||
        fs_gpu_stage_out((void *)d, TN, sink_fn, &si) != (ssize_t)TN || memcmp(src, dst, TN) != 0)
      bad = 2;
  }
  app.cuMemFree_v2(d);
  free(src);
  free(dst);
  return (void *)bad;
}

START_TEST(test_threads_pool_bound)
{
  use_fake();
  pthread_t t[THREADS];
  for (uintptr_t i = 0; i < THREADS; i++)
    ck_assert_int_eq(pthread_create(&t[i], NULL, worker, (void *)i), 0);
  for (int i = 0; i < THREADS; i++) {
    void *r;
    pthread_join(t[i], &r);
    ck_assert_msg(r == NULL, "thread %d failed (%p)", i, r);
  }
  struct fakecuda_stats st;
  app.stats(&st);
  ck_assert_uint_le(st.host_allocs, 4);
  ck_assert_uint_ge(st.host_allocs, 2);
  struct fs_gpu_stats gs;
  fs_gpu_get_stats(&gs);
  ck_assert_uint_eq(gs.pinned_bytes, st.host_allocs * (4u << 20));
  ck_assert_uint_eq(gs.staged_in_bytes, (uint64_t)THREADS * 4 * TN);
  ck_assert_uint_eq(gs.staged_out_bytes, (uint64_t)THREADS * 4 * TN);
}
END_TEST

/* ---- buffer ids and the registration cache ------------------------------ */

static int regs, deregs;
static int t_reg(void *arg, const struct fs_regcache_range *r, void **h)
{
  (void)arg;
  regs++;
  *h = (void *)(uintptr_t)r->id;
  return 0;
}
static void t_dereg(void *arg, const struct fs_regcache_range *r, void *h)
{
  (void)arg;
  ck_assert_uint_eq((uintptr_t)h, r->id);
  deregs++;
}

START_TEST(test_buffer_id_reuse)
{
  use_fake();
  P a = dev_alloc(1 << 20);
  struct fs_gpu_ptr p1, p2;
  ck_assert_int_eq(fs_gpu_query((void *)a, 1, &p1), FS_GPU_DEVICE);

  struct fs_regcache_ops ops = { fs_gpu_regcache_query, t_reg, t_dereg, NULL };
  struct fs_regcache *rc = fs_regcache_create(&ops, 16, 0);
  const struct fs_regcache_entry *e;
  ck_assert_int_eq(fs_regcache_get(rc, (void *)(a + 100), 1000, &e), 0);
  ck_assert_uint_eq(e->range.base, a);
  ck_assert_uint_eq(e->range.id, p1.buffer_id);
  fs_regcache_put(rc, e);
  ck_assert_int_eq(fs_regcache_get(rc, (void *)a, 1 << 20, &e), 0);
  fs_regcache_put(rc, e);
  ck_assert_int_eq(regs, 1);

  /* free and allocate again: same address, new buffer id */
  ck_assert_int_eq(app.cuMemFree_v2(a), 0);
  P b = dev_alloc(1 << 20);
  ck_assert_uint_eq(b, a);
  ck_assert_int_eq(fs_gpu_query((void *)b, 1, &p2), FS_GPU_DEVICE);
  ck_assert_uint_ne(p2.buffer_id, p1.buffer_id);
  ck_assert_int_eq(fs_regcache_get(rc, (void *)b, 4096, &e), 0);
  ck_assert_uint_eq(e->range.id, p2.buffer_id);
  ck_assert_int_eq(regs, 2);
  ck_assert_int_eq(deregs, 1);
  fs_regcache_put(rc, e);

  char host[64];
  ck_assert_int_eq(fs_regcache_get(rc, host, sizeof host, &e), -EINVAL);
  ck_assert_int_eq(fs_regcache_get(rc, (void *)b, (1 << 20) + 1, &e), -EFAULT);
  fs_regcache_destroy(rc);
  ck_assert_int_eq(deregs, 2);
}
END_TEST

/* ---- fork --------------------------------------------------------------- */

START_TEST(test_fork_child_is_host_only)
{
  use_fake();
  P d = dev_alloc(4096);
  ck_assert_int_eq(fs_gpu_classify((void *)d, 1), FS_GPU_DEVICE);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    /* CUDA cannot be used in this child: everything is host memory. */
    int ok = !fs_gpu_maybe_device((void *)d) && fs_gpu_classify((void *)d, 1) == FS_GPU_HOST;
    _exit(ok ? 0 : 1);
  }
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  ck_assert_int_eq(fs_gpu_classify((void *)d, 1), FS_GPU_DEVICE);
}
END_TEST

int main(void)
{
  const char *top = getenv("top_builddir");
  bool fake = false;
  if (top != NULL) {
    snprintf(fake_path, sizeof fake_path, "%s/tests/unit/.libs/fakecuda.so", top);
    fake = access(fake_path, R_OK) == 0;
  }
  Suite *s = suite_create("gpu");
  TCase *tc = tcase_create("nodriver");
  tcase_add_test(tc, test_no_driver);
  suite_add_tcase(s, tc);
  if (fake) {
    tc = tcase_create("fake");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_fake_not_loaded_is_not_loaded);
    tcase_add_test(tc, test_disabled);
    tcase_add_test(tc, test_detect_after_load);
    tcase_add_test(tc, test_probe_only_after_load);
    tcase_add_test(tc, test_before_fork);
    tcase_add_test(tc, test_detect_on_efault);
    tcase_add_test(tc, test_tick_window);
    tcase_add_test(tc, test_not_initialized);
    tcase_add_test(tc, test_incomplete_driver);
    tcase_add_test(tc, test_classify);
    tcase_add_test(tc, test_device_memory_faults);
    tcase_add_loop_test(tc, test_roundtrip, 0, 4);
    tcase_add_test(tc, test_sink_short);
    tcase_add_test(tc, test_sink_errors);
    tcase_add_test(tc, test_source_short);
    tcase_add_test(tc, test_copy_failures);
    tcase_add_test(tc, test_contexts);
    tcase_add_test(tc, test_threads_pool_bound);
    tcase_add_test(tc, test_buffer_id_reuse);
    tcase_add_test(tc, test_fork_child_is_host_only);
    suite_add_tcase(s, tc);
  } else {
    printf("# SKIP fake-driver tests: %s not found (top_builddir=%s)\n",
           top ? fake_path : "fakecuda.so", top ? top : "unset");
    fflush(stdout);
  }
  return run_suite(s, true); /* each test starts with nothing loaded */
}
