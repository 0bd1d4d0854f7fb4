/* The application side of the CUDA driver for the GPU test programs: dlopen
 * it (FABSOCK_CUDA_LIB or libcuda.so.1), initialise it, make device 0's
 * primary context current.  Header-only; TAP helpers too. */
#ifndef FS_TESTS_GPU_CUDRV_H
#define FS_TESTS_GPU_CUDRV_H

#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cuda.h"

static struct cudrv {
  void *h;
  const char *name;
  fs_cu_result (*cuInit)(unsigned);
  fs_cu_result (*cuDeviceGetCount)(int *);
  fs_cu_result (*cuDeviceGet)(fs_cu_device *, int);
  fs_cu_result (*cuDevicePrimaryCtxRetain)(fs_cu_ctx *, fs_cu_device);
  fs_cu_result (*cuCtxSetCurrent)(fs_cu_ctx);
  fs_cu_result (*cuMemAlloc_v2)(fs_cu_ptr *, size_t);
  fs_cu_result (*cuMemFree_v2)(fs_cu_ptr);
  fs_cu_result (*cuMemAllocManaged)(fs_cu_ptr *, size_t, unsigned);
  fs_cu_result (*cuMemHostAlloc)(void **, size_t, unsigned);
  fs_cu_result (*cuMemFreeHost)(void *);
  fs_cu_result (*cuMemcpyHtoD_v2)(fs_cu_ptr, const void *, size_t);
  fs_cu_result (*cuMemcpyDtoH_v2)(void *, fs_cu_ptr, size_t);
  fs_cu_result (*cuPointerGetAttribute)(void *, int, fs_cu_ptr);
  fs_cu_result (*cuPointerGetAttributes)(unsigned, int *, void **, fs_cu_ptr);
  fs_cu_result (*cuGetErrorString)(fs_cu_result, const char **);
  fs_cu_ctx ctx;
} cu;

static const char *cu_err(fs_cu_result r)
{
  const char *s = NULL;
  if (cu.cuGetErrorString == NULL || cu.cuGetErrorString(r, &s) != 0 || s == NULL)
    return "?";
  return s;
}

/* 0, or prints a TAP skip plan and returns 1 (the caller exits 0). */
static int cudrv_open(void)
{
  const char *lib = getenv("FABSOCK_CUDA_LIB");
  cu.name = lib && *lib ? lib : "libcuda.so.1";
  cu.h = dlopen(cu.name, RTLD_NOW | RTLD_LOCAL);
  if (cu.h == NULL) {
    printf("1..0 # SKIP no CUDA driver (%s not found)\n", cu.name);
    return 1;
  }
#define CU_SYM(n) \
  do { \
    void *p_ = dlsym(cu.h, #n); \
    if (p_ == NULL) { \
      printf("1..0 # SKIP %s lacks %s\n", cu.name, #n); \
      return 1; \
    } \
    memcpy(&cu.n, &p_, sizeof p_); \
  } while (0)
  CU_SYM(cuInit);
  CU_SYM(cuDeviceGetCount);
  CU_SYM(cuDeviceGet);
  CU_SYM(cuDevicePrimaryCtxRetain);
  CU_SYM(cuCtxSetCurrent);
  CU_SYM(cuMemAlloc_v2);
  CU_SYM(cuMemFree_v2);
  CU_SYM(cuMemAllocManaged);
  CU_SYM(cuMemHostAlloc);
  CU_SYM(cuMemFreeHost);
  CU_SYM(cuMemcpyHtoD_v2);
  CU_SYM(cuMemcpyDtoH_v2);
  CU_SYM(cuPointerGetAttribute);
  CU_SYM(cuPointerGetAttributes);
  CU_SYM(cuGetErrorString);
#undef CU_SYM
  int n = 0;
  fs_cu_device dev;
  fs_cu_result r = cu.cuInit(0);
  if (r == 0)
    r = cu.cuDeviceGetCount(&n);
  if (r != 0 || n == 0) {
    printf("1..0 # SKIP no CUDA device (%s: %d %s)\n", cu.name, r, r ? cu_err(r) : "0 devices");
    return 1;
  }
  r = cu.cuDeviceGet(&dev, 0);
  if (r == 0)
    r = cu.cuDevicePrimaryCtxRetain(&cu.ctx, dev);
  if (r == 0)
    r = cu.cuCtxSetCurrent(cu.ctx);
  if (r != 0) {
    printf("1..0 # SKIP cannot set up device 0 (%d %s)\n", r, cu_err(r));
    return 1;
  }
  return 0;
}

__attribute__((unused)) static void pattern(unsigned char *p, size_t n, uint64_t seed)
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

__attribute__((unused)) static uint64_t fnv(const unsigned char *p, size_t n)
{
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

static int tap_n;
static int tap_failed;

static void tap(int ok, const char *directive, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), unused));
static void tap(int ok, const char *directive, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  printf("%s %d - ", ok ? "ok" : "not ok", ++tap_n);
  vprintf(fmt, ap);
  if (directive)
    printf(" # %s", directive);
  printf("\n");
  fflush(stdout);
  va_end(ap);
  if (!ok && (directive == NULL || strncmp(directive, "TODO", 4) != 0))
    tap_failed++;
}

#endif
