/* Test-only extras of the fake CUDA driver (tests/unit/fakecuda.c).
 *
 * The fake implements the driver entry points libfabsock uses (plus the few an
 * application needs: cuMemAlloc_v2, cuMemFree_v2, cuMemAllocManaged, ...) over
 * host memory.  "Device" memory lives in an address range mapped PROT_NONE, so
 * that the kernel answers EFAULT and a stray memcpy is SIGSEGV, exactly as with
 * real device memory; the fake reads and writes it through a private shadow
 * mapping.  Two devices, one primary context each, per-thread context stacks,
 * and asynchronous copies that really are deferred until the stream is
 * synchronised (a missing synchronisation shows up as wrong data).
 *
 * Tests reach these extras with dlsym() on the fake's handle. */
#ifndef FS_TESTS_FAKECUDA_H
#define FS_TESTS_FAKECUDA_H

#include <stddef.h>
#include <stdint.h>

struct fakecuda_stats {
  uint64_t pointer_queries;  /* cuPointerGetAttribute(s) calls */
  uint64_t host_allocs;      /* successful cuMemHostAlloc */
  uint64_t host_allocs_live; /* minus cuMemFreeHost */
  uint64_t primary_retains;
  uint64_t sync_copies, async_copies, stream_syncs;
  uint64_t ctx_pushes, ctx_pops;
  uint64_t max_queued; /* deepest deferred-copy queue seen */
};

enum fakecuda_fail { FAKECUDA_FAIL_ISSUE = 1, FAKECUDA_FAIL_SYNC = 2 };

typedef void (*fakecuda_stats_fn)(struct fakecuda_stats *out);
/* The host view of n bytes of fake device memory at p (NULL if not device). */
typedef void *(*fakecuda_shadow_fn)(unsigned long long p, size_t n);
/* Make the copy after `after` more copies fail with CUresult code, when it is
 * issued or when its stream is synchronised; code 0 clears. */
typedef void (*fakecuda_fail_copy_fn)(int after, int code, enum fakecuda_fail when);
/* Allocate device memory that reports no context (like cuMemCreate/cuMemMap
 * memory), on device `dev`. */
typedef int (*fakecuda_alloc_noctx_fn)(unsigned long long *p, size_t n, int dev);
/* Make cuMemHostAlloc fail (1) or work (0). */
typedef void (*fakecuda_hostalloc_fail_fn)(int on);

#endif
