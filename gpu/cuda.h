/* The CUDA driver, dlopen()ed at first need (never at library load).
 *
 * libfabsock needs no CUDA header: the few driver types, constants and entry
 * points it uses are declared here with the values of the driver ABI (checked
 * against cuda.h 13.0; they are stable since CUDA 4/9.2).  Entry points are
 * looked up by the versioned names the driver exports (cuMemcpyDtoH_v2, ...),
 * so the table does not depend on a header's #define remapping.
 *
 * Loading: fs_cuda_get() dlopen()s the driver once (pthread_once) with
 * RTLD_NOW|RTLD_LOCAL and resolves every required symbol; any failure is
 * remembered as "no CUDA" and never retried.  fs_cuda_in_process() only asks
 * the dynamic loader whether the driver is already mapped (RTLD_NOLOAD), so it
 * never maps anything.  gpu/gpu.c calls fs_cuda_get() only after
 * fs_cuda_in_process() said yes: a process that never loaded CUDA itself never
 * gets it mapped by us.
 *
 * Environment: FABSOCK_CUDA=0 disables everything (the driver is never asked);
 * FABSOCK_CUDA_LIB=PATH loads PATH instead of libcuda.so.1 (a test seam: the
 * unit tests point it at a fake driver, tests/unit/fakecuda.c). */
#ifndef FS_GPU_CUDA_H
#define FS_GPU_CUDA_H

#include <stdbool.h>
#include <stddef.h>

typedef int fs_cu_result;                    /* CUresult */
typedef unsigned long long fs_cu_ptr;        /* CUdeviceptr (64 bit on every UVA platform) */
typedef int fs_cu_device;                    /* CUdevice */
typedef struct fs_cu_ctx_st *fs_cu_ctx;      /* CUcontext */
typedef struct fs_cu_stream_st *fs_cu_stream; /* CUstream */

/* CUresult values we act on. */
enum {
  FS_CU_SUCCESS = 0,
  FS_CU_ERROR_INVALID_VALUE = 1,
  FS_CU_ERROR_OUT_OF_MEMORY = 2,
  FS_CU_ERROR_NOT_INITIALIZED = 3,
  FS_CU_ERROR_DEINITIALIZED = 4,
  FS_CU_ERROR_STUB_LIBRARY = 34,
  FS_CU_ERROR_NO_DEVICE = 100,
  FS_CU_ERROR_INVALID_DEVICE = 101,
  FS_CU_ERROR_INVALID_CONTEXT = 201,
  FS_CU_ERROR_INVALID_HANDLE = 400,
  FS_CU_ERROR_ILLEGAL_ADDRESS = 700,
  FS_CU_ERROR_NOT_SUPPORTED = 801,
};

/* CUpointer_attribute.  Note BUFFER_ID is 7 (15 is IS_GPU_DIRECT_RDMA_CAPABLE). */
enum {
  FS_CU_POINTER_ATTRIBUTE_CONTEXT = 1,        /* CUcontext */
  FS_CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,    /* unsigned int, CUmemorytype */
  FS_CU_POINTER_ATTRIBUTE_BUFFER_ID = 7,      /* unsigned long long, never reused */
  FS_CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,     /* boolean (we read it into a zeroed unsigned) */
  FS_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9, /* int */
};

/* CUmemorytype */
enum { FS_CU_MEMORYTYPE_HOST = 1, FS_CU_MEMORYTYPE_DEVICE = 2, FS_CU_MEMORYTYPE_ARRAY = 3,
       FS_CU_MEMORYTYPE_UNIFIED = 4 };

#define FS_CU_MEMHOSTALLOC_PORTABLE 0x01u        /* usable from every context */
#define FS_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 1 /* CUmemRangeHandleType */
/* The implicit per-thread default stream: valid in any context, ordered after
 * legacy default-stream work, private to the calling thread. */
#define FS_CU_STREAM_PER_THREAD ((fs_cu_stream)0x2)

struct fs_cuda {
  /* required */
  fs_cu_result (*cuInit)(unsigned flags);
  fs_cu_result (*cuPointerGetAttribute)(void *data, int attr, fs_cu_ptr p);
  fs_cu_result (*cuPointerGetAttributes)(unsigned n, int *attrs, void **data, fs_cu_ptr p);
  fs_cu_result (*cuMemGetAddressRange_v2)(fs_cu_ptr *base, size_t *size, fs_cu_ptr p);
  fs_cu_result (*cuMemcpyDtoH_v2)(void *dst, fs_cu_ptr src, size_t n);
  fs_cu_result (*cuMemcpyHtoD_v2)(fs_cu_ptr dst, const void *src, size_t n);
  fs_cu_result (*cuMemcpyDtoHAsync_v2)(void *dst, fs_cu_ptr src, size_t n, fs_cu_stream s);
  fs_cu_result (*cuMemcpyHtoDAsync_v2)(fs_cu_ptr dst, const void *src, size_t n, fs_cu_stream s);
  fs_cu_result (*cuStreamSynchronize)(fs_cu_stream s);
  fs_cu_result (*cuMemHostAlloc)(void **pp, size_t n, unsigned flags);
  fs_cu_result (*cuMemFreeHost)(void *p);
  fs_cu_result (*cuCtxGetCurrent)(fs_cu_ctx *ctx);
  fs_cu_result (*cuCtxPushCurrent_v2)(fs_cu_ctx ctx);
  fs_cu_result (*cuCtxPopCurrent_v2)(fs_cu_ctx *ctx);
  fs_cu_result (*cuDeviceGet)(fs_cu_device *dev, int ordinal);
  fs_cu_result (*cuDevicePrimaryCtxRetain)(fs_cu_ctx *ctx, fs_cu_device dev);
  /* optional (NULL when the driver lacks them) */
  fs_cu_result (*cuGetErrorString)(fs_cu_result r, const char **s);
  fs_cu_result (*cuMemGetHandleForAddressRange)(void *handle, fs_cu_ptr p, size_t n, int type,
                                                unsigned long long flags); /* CUDA >= 11.7 */
};

/* FABSOCK_CUDA=0 was given (read once). */
bool fs_cuda_disabled(void);

/* The driver's file name (FABSOCK_CUDA_LIB or libcuda.so.1). */
const char *fs_cuda_lib_name(void);

/* Whether the driver is already mapped in this process.  Never maps it, never
 * caches (callers rate-limit it: it takes the loader's lock). */
bool fs_cuda_in_process(void);

/* The resolved driver table, loading it on the first call; NULL when disabled,
 * absent or incomplete (remembered).  Does not call cuInit. */
const struct fs_cuda *fs_cuda_get(void);

/* The table if an earlier fs_cuda_get() loaded it, else NULL; never loads. */
const struct fs_cuda *fs_cuda_loaded(void);

/* A CUresult as a negative errno value (0 for success). */
int fs_cuda_errno(fs_cu_result r);

/* The driver's name for r (or "CUDA error"); for logs. */
const char *fs_cuda_strerror(fs_cu_result r);

#endif
