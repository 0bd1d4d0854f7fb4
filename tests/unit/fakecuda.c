/* A fake CUDA driver for unit tests (see fakecuda.h).  Loaded with
 * FABSOCK_CUDA_LIB=.../fakecuda.so; never part of libfabsock. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "gpu/cuda.h"
#include "tests/unit/fakecuda.h"

#define FK_DEVICES 2
#define FK_ARENA (1ull << 30) /* "device" address space, reserved lazily */
#define FK_ALIGN 512
#define FK_MAX_ALLOCS 4096
#define FK_QUEUE 8
#define FK_STACK 16

typedef fs_cu_result R;
typedef fs_cu_ptr P;

/* Prototypes of what we export (the driver ABI, plus the fakecuda_ extras). */
R cuInit(unsigned flags);
R cuDriverGetVersion(int *v);
R cuGetErrorString(R r, const char **s);
R cuDeviceGet(fs_cu_device *d, int ordinal);
R cuDeviceGetCount(int *n);
R cuDevicePrimaryCtxRetain(fs_cu_ctx *c, fs_cu_device d);
R cuCtxGetCurrent(fs_cu_ctx *c);
R cuCtxSetCurrent(fs_cu_ctx c);
R cuCtxPushCurrent_v2(fs_cu_ctx c);
R cuCtxPopCurrent_v2(fs_cu_ctx *c);
R cuMemAlloc_v2(P *p, size_t n);
R cuMemFree_v2(P p);
R cuMemAllocManaged(P *p, size_t n, unsigned flags);
R cuMemHostAlloc(void **pp, size_t n, unsigned flags);
R cuMemFreeHost(void *p);
R cuMemGetAddressRange_v2(P *base, size_t *size, P p);
R cuPointerGetAttribute(void *data, int attr, P p);
R cuPointerGetAttributes(unsigned n, int *attrs, void **data, P p);
R cuMemcpyDtoH_v2(void *dst, P src, size_t n);
R cuMemcpyHtoD_v2(P dst, const void *src, size_t n);
R cuMemcpyDtoHAsync_v2(void *dst, P src, size_t n, fs_cu_stream s);
R cuMemcpyHtoDAsync_v2(P dst, const void *src, size_t n, fs_cu_stream s);
R cuMemsetD8_v2(P p, unsigned char v, size_t n);
R cuStreamSynchronize(fs_cu_stream s);
R cuMemGetHandleForAddressRange(void *h, P p, size_t n, int type, unsigned long long flags);
void fakecuda_stats(struct fakecuda_stats *out);
void *fakecuda_shadow(unsigned long long p, size_t n);
void fakecuda_fail_copy(int after, int code, enum fakecuda_fail when);
int fakecuda_alloc_noctx(unsigned long long *p, size_t n, int dev);
void fakecuda_hostalloc_fail(int on);

enum { FK_DEVICE = 1, FK_PINNED, FK_MANAGED };

struct fk_ctx {
  int device;
};

struct fk_alloc {
  uintptr_t base;
  size_t size;
  int kind;
  int device;
  struct fk_ctx *ctx; /* reported context; NULL for "VMM" memory */
  unsigned long long id;
};

static pthread_mutex_t fk_lock = PTHREAD_MUTEX_INITIALIZER;
static bool fk_inited;
static char *fk_dev_base;    /* PROT_NONE: what the application sees */
static char *fk_shadow_base; /* read/write: what the fake touches */
static struct fk_alloc fk_allocs[FK_MAX_ALLOCS];
static int fk_nallocs;
static unsigned long long fk_next_id = 100;
static struct fk_ctx fk_primary[FK_DEVICES] = { { 0 }, { 1 } };
static struct fakecuda_stats fk_st;
static int fk_fail_after = -1, fk_fail_code;
static enum fakecuda_fail fk_fail_when;
static int fk_hostalloc_fails;

static __thread struct fk_ctx *fk_stack[FK_STACK];
static __thread int fk_depth;

struct fk_op {
  void *dst;
  const void *src;
  size_t n;
  R fail; /* an injected failure reported at synchronisation */
};
static __thread struct fk_op fk_queue[FK_QUEUE];
static __thread int fk_queued;

#define FK_STAT(f) __atomic_add_fetch(&fk_st.f, 1, __ATOMIC_RELAXED)

static struct fk_ctx *fk_current(void)
{
  return fk_depth > 0 ? fk_stack[fk_depth - 1] : NULL;
}

/* The allocation holding [p, p+n) (n may be 0), or NULL.  Lock held. */
static struct fk_alloc *fk_find(uintptr_t p, size_t n)
{
  for (int i = 0; i < fk_nallocs; i++) {
    struct fk_alloc *a = &fk_allocs[i];
    if (p >= a->base && p - a->base < a->size && n <= a->size - (p - a->base))
      return a;
  }
  return NULL;
}

/* Host address through which the fake touches p. */
static void *fk_host_view(const struct fk_alloc *a, uintptr_t p)
{
  if (a->kind == FK_DEVICE)
    return fk_shadow_base + (p - (uintptr_t)fk_dev_base);
  return (void *)p;
}

static R fk_add(uintptr_t base, size_t size, int kind, int device, struct fk_ctx *ctx)
{
  if (fk_nallocs == FK_MAX_ALLOCS)
    return FS_CU_ERROR_OUT_OF_MEMORY;
  fk_allocs[fk_nallocs++] =
      (struct fk_alloc){ base, size, kind, device, ctx, __atomic_fetch_add(&fk_next_id, 1, __ATOMIC_RELAXED) };
  return FS_CU_SUCCESS;
}

static void fk_remove(struct fk_alloc *a)
{
  *a = fk_allocs[--fk_nallocs];
}

R cuInit(unsigned flags)
{
  (void)flags;
  pthread_mutex_lock(&fk_lock);
  R r = FS_CU_SUCCESS;
  if (!fk_inited) {
    void *d = mmap(NULL, FK_ARENA, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void *s = mmap(NULL, FK_ARENA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (d == MAP_FAILED || s == MAP_FAILED) {
      r = FS_CU_ERROR_OUT_OF_MEMORY;
    } else {
      fk_dev_base = d;
      fk_shadow_base = s;
      fk_inited = true;
    }
  }
  pthread_mutex_unlock(&fk_lock);
  return r;
}

#define FK_NEED_INIT() \
  do { \
    if (!__atomic_load_n(&fk_inited, __ATOMIC_ACQUIRE)) \
      return FS_CU_ERROR_NOT_INITIALIZED; \
  } while (0)

R cuDriverGetVersion(int *v)
{
  *v = 12000;
  return FS_CU_SUCCESS;
}

R cuGetErrorString(R r, const char **s)
{
  switch (r) {
  case FS_CU_SUCCESS: *s = "no error"; break;
  case FS_CU_ERROR_INVALID_VALUE: *s = "invalid argument"; break;
  case FS_CU_ERROR_OUT_OF_MEMORY: *s = "out of memory"; break;
  case FS_CU_ERROR_NOT_INITIALIZED: *s = "initialization error"; break;
  case FS_CU_ERROR_INVALID_CONTEXT: *s = "invalid device context"; break;
  case FS_CU_ERROR_ILLEGAL_ADDRESS: *s = "an illegal memory access was encountered"; break;
  default: *s = "unknown error (fake)"; break;
  }
  return FS_CU_SUCCESS;
}

R cuDeviceGet(fs_cu_device *d, int ordinal)
{
  FK_NEED_INIT();
  if (ordinal < 0 || ordinal >= FK_DEVICES)
    return FS_CU_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return FS_CU_SUCCESS;
}

R cuDeviceGetCount(int *n)
{
  FK_NEED_INIT();
  *n = FK_DEVICES;
  return FS_CU_SUCCESS;
}

R cuDevicePrimaryCtxRetain(fs_cu_ctx *c, fs_cu_device d)
{
  FK_NEED_INIT();
  if (d < 0 || d >= FK_DEVICES)
    return FS_CU_ERROR_INVALID_DEVICE;
  FK_STAT(primary_retains);
  *c = (fs_cu_ctx)&fk_primary[d];
  return FS_CU_SUCCESS;
}

R cuCtxGetCurrent(fs_cu_ctx *c)
{
  FK_NEED_INIT();
  *c = (fs_cu_ctx)fk_current();
  return FS_CU_SUCCESS;
}

R cuCtxSetCurrent(fs_cu_ctx c)
{
  FK_NEED_INIT();
  if (c == NULL) {
    if (fk_depth > 0)
      fk_depth--;
    return FS_CU_SUCCESS;
  }
  if (fk_depth == 0)
    fk_depth = 1;
  fk_stack[fk_depth - 1] = (struct fk_ctx *)c;
  return FS_CU_SUCCESS;
}

R cuCtxPushCurrent_v2(fs_cu_ctx c)
{
  FK_NEED_INIT();
  if (c == NULL || fk_depth == FK_STACK)
    return FS_CU_ERROR_INVALID_VALUE;
  FK_STAT(ctx_pushes);
  fk_stack[fk_depth++] = (struct fk_ctx *)c;
  return FS_CU_SUCCESS;
}

R cuCtxPopCurrent_v2(fs_cu_ctx *c)
{
  FK_NEED_INIT();
  if (fk_depth == 0)
    return FS_CU_ERROR_INVALID_CONTEXT;
  FK_STAT(ctx_pops);
  struct fk_ctx *top = fk_stack[--fk_depth];
  if (c != NULL)
    *c = (fs_cu_ctx)top;
  return FS_CU_SUCCESS;
}

/* First fit in the arena, so that a freed block is handed out again at the
 * same address (what the tests of buffer-id reuse need). */
static R fk_alloc_device(P *p, size_t n, int dev, struct fk_ctx *ctx)
{
  size_t size = (n + FK_ALIGN - 1) & ~(size_t)(FK_ALIGN - 1);
  if (n == 0 || size > FK_ARENA)
    return FS_CU_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&fk_lock);
  uintptr_t lo = (uintptr_t)fk_dev_base, cand = lo;
  for (bool moved = true; moved;) {
    moved = false;
    for (int i = 0; i < fk_nallocs; i++) {
      struct fk_alloc *a = &fk_allocs[i];
      if (a->kind == FK_DEVICE && a->base < cand + size && cand < a->base + a->size) {
        cand = a->base + a->size;
        moved = true;
      }
    }
  }
  R r = FS_CU_ERROR_OUT_OF_MEMORY;
  if (cand + size <= lo + FK_ARENA) {
    r = fk_add(cand, size, FK_DEVICE, dev, ctx);
    if (r == FS_CU_SUCCESS)
      *p = cand;
  }
  pthread_mutex_unlock(&fk_lock);
  return r;
}

R cuMemAlloc_v2(P *p, size_t n)
{
  FK_NEED_INIT();
  struct fk_ctx *c = fk_current();
  if (c == NULL)
    return FS_CU_ERROR_INVALID_CONTEXT;
  return fk_alloc_device(p, n, c->device, c);
}

int fakecuda_alloc_noctx(unsigned long long *p, size_t n, int dev)
{
  FK_NEED_INIT();
  return fk_alloc_device(p, n, dev, NULL);
}

static R fk_free(uintptr_t p, int kind)
{
  FK_NEED_INIT();
  pthread_mutex_lock(&fk_lock);
  struct fk_alloc *a = fk_find(p, 0);
  R r = FS_CU_ERROR_INVALID_VALUE;
  if (a != NULL && a->base == p && a->kind == kind) {
    if (kind == FK_DEVICE) /* fresh memory reads as zeros, like a new mapping */
      memset(fk_shadow_base + (p - (uintptr_t)fk_dev_base), 0, a->size);
    else
      free((void *)p);
    fk_remove(a);
    r = FS_CU_SUCCESS;
  }
  pthread_mutex_unlock(&fk_lock);
  return r;
}

R cuMemFree_v2(P p)
{
  return fk_free((uintptr_t)p, FK_DEVICE);
}

static R fk_alloc_host(void **pp, size_t n, int kind)
{
  struct fk_ctx *c = fk_current();
  if (c == NULL)
    return FS_CU_ERROR_INVALID_CONTEXT;
  void *p = NULL;
  if (n == 0 || posix_memalign(&p, 4096, n) != 0)
    return FS_CU_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&fk_lock);
  R r = fk_add((uintptr_t)p, n, kind, c->device, c);
  pthread_mutex_unlock(&fk_lock);
  if (r != FS_CU_SUCCESS) {
    free(p);
    return r;
  }
  *pp = p;
  return FS_CU_SUCCESS;
}

R cuMemAllocManaged(P *p, size_t n, unsigned flags)
{
  (void)flags;
  FK_NEED_INIT();
  void *h;
  R r = fk_alloc_host(&h, n, FK_MANAGED);
  if (r == FS_CU_SUCCESS)
    *p = (uintptr_t)h;
  return r;
}

R cuMemHostAlloc(void **pp, size_t n, unsigned flags)
{
  (void)flags;
  FK_NEED_INIT();
  if (__atomic_load_n(&fk_hostalloc_fails, __ATOMIC_RELAXED))
    return FS_CU_ERROR_OUT_OF_MEMORY;
  R r = fk_alloc_host(pp, n, FK_PINNED);
  if (r == FS_CU_SUCCESS) {
    FK_STAT(host_allocs);
    FK_STAT(host_allocs_live);
  }
  return r;
}

R cuMemFreeHost(void *p)
{
  R r = fk_free((uintptr_t)p, FK_PINNED);
  if (r == FS_CU_SUCCESS)
    __atomic_sub_fetch(&fk_st.host_allocs_live, 1, __ATOMIC_RELAXED);
  return r;
}

R cuMemGetAddressRange_v2(P *base, size_t *size, P p)
{
  FK_NEED_INIT();
  if (fk_current() == NULL)
    return FS_CU_ERROR_INVALID_CONTEXT;
  pthread_mutex_lock(&fk_lock);
  struct fk_alloc *a = fk_find((uintptr_t)p, 0);
  R r = FS_CU_ERROR_INVALID_VALUE;
  if (a != NULL) {
    if (base)
      *base = a->base;
    if (size)
      *size = a->size;
    r = FS_CU_SUCCESS;
  }
  pthread_mutex_unlock(&fk_lock);
  return r;
}

/* One attribute of allocation a (NULL: not a CUDA pointer, defaults). */
static R fk_attr(const struct fk_alloc *a, int attr, void *data)
{
  switch (attr) {
  case FS_CU_POINTER_ATTRIBUTE_CONTEXT:
    *(fs_cu_ctx *)data = a ? (fs_cu_ctx)a->ctx : NULL;
    return FS_CU_SUCCESS;
  case FS_CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    *(unsigned *)data = !a ? 0 : a->kind == FK_PINNED ? FS_CU_MEMORYTYPE_HOST : FS_CU_MEMORYTYPE_DEVICE;
    return FS_CU_SUCCESS;
  case FS_CU_POINTER_ATTRIBUTE_BUFFER_ID:
    *(unsigned long long *)data = a ? a->id : 0;
    return FS_CU_SUCCESS;
  case FS_CU_POINTER_ATTRIBUTE_IS_MANAGED:
    *(bool *)data = a && a->kind == FK_MANAGED; /* the driver writes a bool */
    return FS_CU_SUCCESS;
  case FS_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    *(int *)data = a ? a->device : -2;
    return FS_CU_SUCCESS;
  default:
    return FS_CU_ERROR_INVALID_VALUE;
  }
}

R cuPointerGetAttribute(void *data, int attr, P p)
{
  FK_NEED_INIT();
  FK_STAT(pointer_queries);
  pthread_mutex_lock(&fk_lock);
  struct fk_alloc *a = fk_find((uintptr_t)p, 0);
  R r = a ? fk_attr(a, attr, data) : FS_CU_ERROR_INVALID_VALUE;
  pthread_mutex_unlock(&fk_lock);
  return r;
}

R cuPointerGetAttributes(unsigned n, int *attrs, void **data, P p)
{
  FK_NEED_INIT();
  FK_STAT(pointer_queries);
  pthread_mutex_lock(&fk_lock);
  struct fk_alloc *a = fk_find((uintptr_t)p, 0);
  R r = FS_CU_SUCCESS;
  for (unsigned i = 0; i < n && r == FS_CU_SUCCESS; i++)
    r = fk_attr(a, attrs[i], data[i]);
  pthread_mutex_unlock(&fk_lock);
  return r;
}

/* Validate one copy and return the host views of both sides.  Strict: the
 * current context must be the allocation's (or, for memory without one, on
 * its device). */
static R fk_check(uintptr_t devp, size_t n, void **view)
{
  struct fk_ctx *c = fk_current();
  if (c == NULL)
    return FS_CU_ERROR_INVALID_CONTEXT;
  pthread_mutex_lock(&fk_lock);
  struct fk_alloc *a = fk_find(devp, n);
  R r = FS_CU_ERROR_INVALID_VALUE;
  if (a != NULL && a->kind != FK_PINNED) {
    if (a->ctx != NULL ? a->ctx != c : a->device != c->device) {
      r = FS_CU_ERROR_INVALID_CONTEXT;
    } else {
      *view = fk_host_view(a, devp);
      r = FS_CU_SUCCESS;
    }
  }
  pthread_mutex_unlock(&fk_lock);
  return r;
}

/* An injected failure for this copy, if one is due: its code, and when it
 * shows (*when). */
static R fk_injected(enum fakecuda_fail *when)
{
  R r = FS_CU_SUCCESS;
  pthread_mutex_lock(&fk_lock);
  if (fk_fail_code != 0 && fk_fail_after-- == 0) {
    r = fk_fail_code;
    *when = fk_fail_when;
    fk_fail_code = 0;
  }
  pthread_mutex_unlock(&fk_lock);
  return r;
}

static R fk_drain(void)
{
  R r = FS_CU_SUCCESS;
  for (int i = 0; i < fk_queued; i++) {
    if (fk_queue[i].fail != FS_CU_SUCCESS) {
      r = fk_queue[i].fail; /* this copy (and the failure) is reported here */
      continue;
    }
    memcpy(fk_queue[i].dst, fk_queue[i].src, fk_queue[i].n);
  }
  fk_queued = 0;
  return r;
}

static R fk_copy(void *dst, const void *src, size_t n, bool async)
{
  enum fakecuda_fail when = FAKECUDA_FAIL_ISSUE;
  R fail = fk_injected(&when);
  if (fail != FS_CU_SUCCESS && (!async || when == FAKECUDA_FAIL_ISSUE))
    return fail;
  if (async) {
    FK_STAT(async_copies);
    if (fk_queued == FK_QUEUE)
      fk_drain();
    fk_queue[fk_queued++] = (struct fk_op){ dst, src, n, fail };
    uint64_t depth = (uint64_t)fk_queued, seen;
    while ((seen = __atomic_load_n(&fk_st.max_queued, __ATOMIC_RELAXED)) < depth &&
           !__atomic_compare_exchange_n(&fk_st.max_queued, &seen, depth, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
      ;
    return FS_CU_SUCCESS;
  }
  FK_STAT(sync_copies);
  R r = fk_drain(); /* ordered after earlier work of this thread */
  memcpy(dst, src, n);
  return r;
}

R cuMemcpyDtoH_v2(void *dst, P src, size_t n)
{
  FK_NEED_INIT();
  void *v;
  R r = fk_check((uintptr_t)src, n, &v);
  return r != FS_CU_SUCCESS ? r : fk_copy(dst, v, n, false);
}

R cuMemcpyHtoD_v2(P dst, const void *src, size_t n)
{
  FK_NEED_INIT();
  void *v;
  R r = fk_check((uintptr_t)dst, n, &v);
  return r != FS_CU_SUCCESS ? r : fk_copy(v, src, n, false);
}

R cuMemcpyDtoHAsync_v2(void *dst, P src, size_t n, fs_cu_stream s)
{
  (void)s; /* every stream is this thread's queue */
  FK_NEED_INIT();
  void *v;
  R r = fk_check((uintptr_t)src, n, &v);
  return r != FS_CU_SUCCESS ? r : fk_copy(dst, v, n, true);
}

R cuMemcpyHtoDAsync_v2(P dst, const void *src, size_t n, fs_cu_stream s)
{
  (void)s;
  FK_NEED_INIT();
  void *v;
  R r = fk_check((uintptr_t)dst, n, &v);
  return r != FS_CU_SUCCESS ? r : fk_copy(v, src, n, true);
}

R cuMemsetD8_v2(P p, unsigned char val, size_t n)
{
  FK_NEED_INIT();
  void *v;
  R r = fk_check((uintptr_t)p, n, &v);
  if (r == FS_CU_SUCCESS) {
    fk_drain();
    memset(v, val, n);
  }
  return r;
}

R cuStreamSynchronize(fs_cu_stream s)
{
  (void)s;
  FK_NEED_INIT();
  if (fk_current() == NULL)
    return FS_CU_ERROR_INVALID_CONTEXT;
  FK_STAT(stream_syncs);
  return fk_drain();
}

R cuMemGetHandleForAddressRange(void *h, P p, size_t n, int type, unsigned long long flags)
{
  (void)h, (void)p, (void)n, (void)type, (void)flags;
  FK_NEED_INIT();
  return FS_CU_ERROR_NOT_SUPPORTED;
}

void fakecuda_stats(struct fakecuda_stats *out)
{
  pthread_mutex_lock(&fk_lock);
  *out = fk_st;
  pthread_mutex_unlock(&fk_lock);
}

void *fakecuda_shadow(unsigned long long p, size_t n)
{
  pthread_mutex_lock(&fk_lock);
  struct fk_alloc *a = fk_inited ? fk_find((uintptr_t)p, n) : NULL;
  void *v = a && a->kind == FK_DEVICE ? fk_host_view(a, (uintptr_t)p) : NULL;
  pthread_mutex_unlock(&fk_lock);
  return v;
}

void fakecuda_fail_copy(int after, int code, enum fakecuda_fail when)
{
  pthread_mutex_lock(&fk_lock);
  fk_fail_after = code ? after : -1;
  fk_fail_code = code;
  fk_fail_when = when;
  pthread_mutex_unlock(&fk_lock);
}

void fakecuda_hostalloc_fail(int on)
{
  __atomic_store_n(&fk_hostalloc_fails, on, __ATOMIC_RELAXED);
}
