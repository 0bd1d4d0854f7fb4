/* gpu/ over the real CUDA driver, for a machine with a GPU (TAP).
 *
 * What the unit tests check against the fake driver, checked against the
 * real one, plus the driver behaviours gpu/ relies on: pointer attributes of
 * host, pinned, managed and device memory; BUFFER_ID changing when memory is
 * freed and allocated again; a kernel call on device memory failing with
 * EFAULT; dma-buf export.  Links libfscore directly (no LD_PRELOAD).
 * Without a driver or a device: "1..0 # SKIP ...", exit 0. */
#include <errno.h>
#include <unistd.h>

#include "tests/gpu/cudrv.h"
#include "gpu/gpu.h"
#include "gpu/regcache.h"

struct sink {
  unsigned char *dst;
  size_t got, limit;
};

static ssize_t sink_fn(void *c, const void *host, size_t n)
{
  struct sink *s = c;
  if (s->limit && s->got + n > s->limit)
    n = s->limit - s->got;
  memcpy(s->dst + s->got, host, n);
  s->got += n;
  return (ssize_t)n;
}

struct source {
  const unsigned char *src;
  size_t off, len;
};

static ssize_t source_fn(void *c, void *host, size_t n, bool more)
{
  struct source *s = c;
  (void)more; /* everything is always there */
  if (n > s->len - s->off)
    n = s->len - s->off;
  memcpy(host, s->src + s->off, n);
  s->off += n;
  return (ssize_t)n;
}

static int regs, deregs;
static int t_reg(void *a, const struct fs_regcache_range *r, void **h)
{
  (void)a, (void)r;
  regs++;
  *h = NULL;
  return 0;
}
static void t_dereg(void *a, const struct fs_regcache_range *r, void *h)
{
  (void)a, (void)r, (void)h;
  deregs++;
}

int main(void)
{
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (cudrv_open() != 0)
    return 0;
  /* gpu/ must find the same driver the application loaded */
  if (getenv("FABSOCK_CUDA_LIB") == NULL)
    setenv("FABSOCK_CUDA_LIB", cu.name, 1);
  printf("1..15\n");

  fs_gpu_note_efault();
  char probe;
  tap(fs_gpu_maybe_device(&probe), NULL, "maybe_device once the driver is loaded");

  size_t n = 64u << 20;
  unsigned char *h1 = malloc(n), *h2 = malloc(n);
  fs_cu_ptr d = 0, m = 0;
  void *pinned = NULL;
  fs_cu_result r = cu.cuMemAlloc_v2(&d, n);
  if (r != 0 || !h1 || !h2) {
    printf("Bail out! cuMemAlloc(%zu): %d %s\n", n, r, cu_err(r));
    return 1;
  }
  void *dp = (void *)(uintptr_t)d;
  tap(fs_gpu_classify(dp, n) == FS_GPU_DEVICE, NULL, "device memory is DEVICE");
  tap(fs_gpu_classify(h1, n) == FS_GPU_HOST, NULL, "malloc memory is HOST");
  r = cu.cuMemHostAlloc(&pinned, 4096, 0);
  tap(r == 0 && fs_gpu_classify(pinned, 4096) == FS_GPU_HOST, NULL, "pinned memory is HOST (%d)", r);
  struct fs_gpu_ptr pi;
  r = cu.cuMemAllocManaged(&m, 4096, 1);
  int k = r == 0 ? fs_gpu_query((void *)(uintptr_t)m, 4096, &pi) : -1;
  tap(r == 0 && k == FS_GPU_HOST && pi.managed, NULL,
      "managed memory is HOST, managed (%d, kind %d, memtype %u)", r, k, r == 0 ? pi.memtype : 0);

  k = fs_gpu_query((char *)dp + 4096, 100, &pi);
  printf("# device: base %#lx size %zu id %llu ordinal %d ctx %p\n", (unsigned long)pi.base, pi.size,
         (unsigned long long)pi.buffer_id, pi.device, pi.ctx);
  tap(k == FS_GPU_DEVICE && pi.base == (uintptr_t)d && pi.size >= n && pi.buffer_id != 0 &&
          pi.device == 0 && pi.ctx == (void *)cu.ctx,
      NULL, "query: range, buffer id, ordinal, context");

  /* the kernel cannot touch device memory: the premise of the EFAULT path */
  int fds[2];
  if (pipe(fds) == 0) {
    ssize_t w = write(fds[1], dp, 16);
    int e = errno;
    tap(1, NULL, "kernel write() of device memory: %s", w < 0 ? strerror(e) : "succeeded (coherent platform?)");
    close(fds[0]);
    close(fds[1]);
  } else {
    tap(0, NULL, "pipe");
  }

  /* staged round trips */
  static const size_t sizes[] = { 1, 4097, (4u << 20) - 1, (4u << 20) + 1, (12u << 20) + 7, 64u << 20 };
  int bad = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t s = sizes[i];
    pattern(h1, s, s);
    struct source so = { h1, 0, s };
    ssize_t a = fs_gpu_stage_in(dp, s, source_fn, &so);
    memset(h2, 0, s);
    struct sink si = { h2, 0, 0 };
    ssize_t b = fs_gpu_stage_out(dp, s, sink_fn, &si);
    memset(h2 + s / 2, 0, s - s / 2);
    ssize_t c = fs_gpu_copy_from_device(h2 + s / 2, (char *)dp + s / 2, s - s / 2);
    bool ok = a == (ssize_t)s && b == (ssize_t)s && c == (ssize_t)(s - s / 2) && fnv(h1, s) == fnv(h2, s);
    if (!ok) {
      printf("# size %zu: in %zd out %zd copy %zd\n", s, a, b, c);
      bad++;
    }
  }
  tap(bad == 0, NULL, "staging round trips 1 B .. 64 MiB with checksums");

  pattern(h1, n, 9);
  cu.cuMemcpyHtoD_v2(d, h1, n);
  struct sink part = { h2, 0, (4u << 20) + 17 };
  ssize_t p = fs_gpu_stage_out(dp, n, sink_fn, &part);
  tap(p == (4 << 20) + 17 && memcmp(h1, h2, (size_t)p) == 0, NULL, "short sink: %zd", p);

  int fd = fs_gpu_dmabuf_fd(dp, 2u << 20);
  tap(fd >= 0 || fd == -EOPNOTSUPP, NULL, "dma-buf export: %s", fd >= 0 ? "fd" : strerror(-fd));
  if (fd >= 0)
    close(fd);

  /* free and allocate again: a new buffer id */
  struct fs_regcache_ops ops = { fs_gpu_regcache_query, t_reg, t_dereg, NULL };
  struct fs_regcache *rc = fs_regcache_create(&ops, 8, 0);
  const struct fs_regcache_entry *e;
  int g1 = fs_regcache_get(rc, dp, 4096, &e);
  if (g1 == 0)
    fs_regcache_put(rc, e);
  int g2 = fs_regcache_get(rc, (char *)dp + 8192, 4096, &e);
  if (g2 == 0)
    fs_regcache_put(rc, e);
  tap(g1 == 0 && g2 == 0 && regs == 1, NULL, "regcache hit on the same allocation");
  unsigned long long id1 = pi.buffer_id;
  cu.cuMemFree_v2(d);
  fs_cu_ptr d2 = 0;
  cu.cuMemAlloc_v2(&d2, n);
  fs_gpu_query((void *)(uintptr_t)d2, 1, &pi);
  printf("# realloc: %s address, id %llu -> %llu\n", d2 == d ? "same" : "another", id1,
         (unsigned long long)pi.buffer_id);
  tap(pi.buffer_id != id1, NULL, "buffer id changes after free + alloc");
  int g3 = fs_regcache_get(rc, (void *)(uintptr_t)d2, 4096, &e);
  if (g3 == 0)
    fs_regcache_put(rc, e);
  tap(g3 == 0 && regs == 2 && (d2 != d || deregs == 1), NULL, "regcache re-registers reused memory");
  fs_regcache_destroy(rc);
  tap(regs == deregs, NULL, "every registration deregistered once (%d/%d)", regs, deregs);

  struct fs_gpu_stats st;
  fs_gpu_get_stats(&st);
  printf("# stats: classified %llu device %llu pinned %llu x %llu B, fallbacks %llu\n",
         (unsigned long long)st.classified, (unsigned long long)st.device_hits,
         (unsigned long long)st.pinned_buffers,
         (unsigned long long)(st.pinned_buffers ? st.pinned_bytes / st.pinned_buffers : 0),
         (unsigned long long)st.unpinned_fallbacks);
  tap(st.unpinned_fallbacks == 0 && st.pinned_buffers >= 1 && st.pinned_buffers <= 4, NULL,
      "staging pool: pinned, bounded");
  cu.cuMemFree_v2(d2);
  return tap_failed ? 1 : 0;
}
