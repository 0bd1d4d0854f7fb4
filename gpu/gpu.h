/* GPU buffers on the data path: is this pointer device memory, and if so move
 * its bytes through pinned host staging buffers.
 *
 * When is the driver asked?  Device memory can only exist in a process that has
 * the CUDA driver (libcuda.so.1) mapped: every CUDA allocator lives in it.  So:
 *  - fs_gpu_maybe_device() answers from one cached word.  Until the driver is
 *    seen in the process it re-probes with dlopen(RTLD_NOLOAD), which never maps
 *    anything, at most once per FS_GPU_RECHECK_MS (coarse monotonic clock; in
 *    between, a tick calibrated against it: fs_gpu_surely_host) and at
 *    once after fs_gpu_note_efault(); and only when the loader has loaded
 *    something since the last probe (its load counter, dl_iterate_phdr), since a
 *    NOLOAD miss searches the library path with system calls.  The rate limit cannot hide real device
 *    memory: loading the driver, cuInit and a first allocation take far longer
 *    than the window.  Once the driver is seen, the answer stays "maybe" (it is
 *    never unloaded: we keep a reference).
 *  - fs_gpu_classify() asks the driver (cuPointerGetAttributes, no cuInit: a
 *    driver nobody initialised holds no device memory, and initialising it
 *    ourselves would break a CUDA-using child after fork).
 * Data path recipe (the lead wires it):
 *     if (fs_gpu_maybe_device(buf) && fs_gpu_classify(buf, len) == FS_GPU_DEVICE)
 *         n = fs_gpu_stage_out(buf, len, sink, ctx);   // or a fabric's own path
 * A path that lets the kernel touch the buffer may instead call the kernel first
 * and, on EFAULT, fs_gpu_note_efault() and then classify.  A path where
 * libfabsock itself reads the buffer (shm/rdma rings: memcpy) must classify
 * first whenever maybe_device says so: memcpy from device memory is SIGSEGV.
 *
 * Ordering: like CUDA-aware MPI, the application must have finished the GPU
 * work producing (or consuming) a buffer before send (after recv).  Our copies
 * go on the per-thread default stream, which also orders after work on the
 * legacy default stream.
 *
 * After fork(), a child of a process that used the driver treats every
 * pointer as host memory (CUDA cannot be used in such a child).
 *
 * Environment: FABSOCK_CUDA=0 disables all of it; FABSOCK_GPU_STAGING_BUFS
 * (default 4, at most 64) pinned buffers of FABSOCK_GPU_STAGING_SIZE bytes
 * (default 4M; K/M/G suffixes; 4K..1G) are allocated lazily per process.
 *
 * Everything returns -errno on failure and leaves errno as it found it. */
#ifndef FS_GPU_GPU_H
#define FS_GPU_GPU_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpu/regcache.h"

enum { FS_GPU_HOST = 0, FS_GPU_DEVICE = 1 };

#define FS_GPU_RECHECK_MS 5

/* Everything the driver says about one pointer. */
struct fs_gpu_ptr {
  int kind;             /* FS_GPU_HOST (plain, pinned or managed) or FS_GPU_DEVICE */
  unsigned memtype;     /* raw CUmemorytype: 0 unknown to CUDA, 1 host, 2 device */
  bool managed;         /* managed memory: CPU-accessible, so kind is HOST */
  int device;           /* device ordinal, -1 if none */
  void *ctx;            /* owning CUcontext (NULL: none recorded, e.g. VMM) */
  uint64_t buffer_id;   /* CU_POINTER_ATTRIBUTE_BUFFER_ID, 0 if none */
  uintptr_t base;       /* the allocation holding the pointer (device memory only; */
  size_t size;          /* fs_gpu_query fills these, fs_gpu_classify does not) */
};

/* A sink consumes n host bytes (e.g. a send on the real socket) and returns how
 * many it took, or -errno; it must be done with the bytes when it returns.  A
 * source fills up to n bytes and returns how many (0 = end), or -errno; with
 * more set it must not block: it takes only what is already there and
 * returns -EAGAIN if nothing is (a recv with MSG_DONTWAIT). */
typedef ssize_t (*fs_gpu_sink_fn)(void *ctx, const void *host, size_t n);
typedef ssize_t (*fs_gpu_source_fn)(void *ctx, void *host, size_t n, bool more);

struct fs_gpu_stats {
  uint64_t classified, device_hits;
  uint64_t staged_out_bytes, staged_in_bytes;
  uint64_t pinned_buffers, pinned_bytes; /* staging pool size */
  uint64_t unpinned_fallbacks;           /* pool exhausted: a malloc'd buffer was used */
  uint64_t driver_probes;                /* dlopen(RTLD_NOLOAD) looks for the driver */
};

#ifdef HAVE_CUDA

/* Cheap pre-check (see above): false means p cannot be device memory. */
bool fs_gpu_maybe_device(const void *p);

/* A process with sockets is about to fork: the probe above, due or not yet
 * made, made now.  A child's answer is its parent's at the fork (the same
 * objects are loaded), and a server that forks per connection and never
 * sends itself (PostgreSQL's postmaster) had each child probe at its first
 * send: the loader's list walked twice and three functions bound lazily in
 * every backend, 0.7 ms of a 20 ms connection here.  Now the child finds
 * the answer fresh (in the window, or the same load count).  errno kept. */
void fs_gpu_before_fork(void);

/* What fs_gpu_maybe_device answers from, kept by gpu.c, read inline by
 * fs_gpu_surely_host: the data path asks it twice per round trip, where a
 * call chain down to the clock costs more than the rest of a small send on
 * an emulated CPU.  Between probes the rate limit runs on a cheap tick (the
 * TSC on x86), calibrated against the clock by the probes themselves. */
enum { FS_GPU_ST_ABSENT = 0, FS_GPU_ST_PRESENT = 1, FS_GPU_ST_OFF = 2 };
extern int fs_gpu_state;              /* FS_GPU_ST_* */
extern uint64_t fs_gpu_next_tick;     /* no probe due before this tick; 0: ask the clock */
extern uint64_t fs_gpu_recheck_ticks; /* ticks in FS_GPU_RECHECK_MS; 0: not calibrated */

static inline uint64_t fs_gpu_tick(void)
{
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_ia32_rdtsc();
#else
  return 0; /* no cheap tick: every look asks the clock */
#endif
}

/* True when no pointer can be device memory now, known without a call:
 * support off, or no driver in the process and no probe due yet.  A tick
 * behind the mark by more than a window (another CPU's TSC) asks the clock. */
static inline bool fs_gpu_surely_host(void)
{
  int s = __atomic_load_n(&fs_gpu_state, __ATOMIC_RELAXED);
  if (s != FS_GPU_ST_ABSENT)
    return s == FS_GPU_ST_OFF;
  uint64_t next = __atomic_load_n(&fs_gpu_next_tick, __ATOMIC_RELAXED), t = fs_gpu_tick();
  return t < next && next - t <= __atomic_load_n(&fs_gpu_recheck_ticks, __ATOMIC_RELAXED);
}

/* A real kernel call on a user buffer failed with EFAULT: re-probe for the
 * driver at the next fs_gpu_maybe_device() regardless of the rate limit. */
void fs_gpu_note_efault(void);

/* FS_GPU_HOST or FS_GPU_DEVICE.  Host whenever the driver is absent, disabled,
 * not initialised or cannot tell. */
int fs_gpu_classify(const void *p, size_t len);

/* Like classify, filling *out; for device memory also the allocation's range
 * (-EFAULT if [p, p+len) does not fit in it). */
int fs_gpu_query(const void *p, size_t len, struct fs_gpu_ptr *out);

/* Synchronous copies; n or -errno.  Host (or managed) memory on the device
 * side is copied with memcpy. */
ssize_t fs_gpu_copy_from_device(void *host_dst, const void *dev_src, size_t n);
ssize_t fs_gpu_copy_to_device(void *dev_dst, const void *host_src, size_t n);

/* Move len bytes of dev to sink through pinned staging buffers, in chunks of
 * the staging size (a quarter of len, 256 KiB at least, when that is
 * smaller: a 1 MiB send overlaps too), copying chunk i+1 while the sink takes
 * chunk i.  Returns
 * the bytes the sink took; stops at the first short or failed sink call and
 * then returns the progress so far, or the sink's -errno if there was none.
 * A host pointer goes to the sink directly. */
ssize_t fs_gpu_stage_out(const void *dev, size_t len, fs_gpu_sink_fn sink, void *ctx);

/* Mirror: fill dev from source, chunk by chunk, the source filling one buffer
 * while the previous one is copied to the device.  Only the first source call
 * may block; the later ones (more) take what has already arrived, so a short
 * read does not end the call while bytes are waiting (each device copy has a
 * fixed cost: one per ring-sized piece halved the throughput).  Stops when
 * the source has nothing more (-EAGAIN), at end (0) or on error; returns bytes
 * now in device memory, or the source's -errno (0 at end) if none.  If a
 * device copy fails after the source gave bytes, those bytes are lost: the
 * progress before them is returned (or -EIO) and an error is logged. */
ssize_t fs_gpu_stage_in(void *dev, size_t len, fs_gpu_source_fn source, void *ctx);

/* A dma-buf fd for [p, p+len) (page-aligned; for ibv_reg_dmabuf_mr), or
 * -EOPNOTSUPP (driver too old / not supported) or another -errno. */
int fs_gpu_dmabuf_fd(const void *p, size_t len);

/* A regcache query op over the driver: the device allocation holding
 * [addr, addr+len) and its buffer id; -EINVAL for host memory. */
int fs_gpu_regcache_query(void *arg, uintptr_t addr, size_t len, struct fs_regcache_range *out);

void fs_gpu_get_stats(struct fs_gpu_stats *out);

#else /* !HAVE_CUDA: GPU support not built; everything is host memory. */

#include <string.h>

static inline bool fs_gpu_maybe_device(const void *p) { (void)p; return false; }
static inline bool fs_gpu_surely_host(void) { return true; }
static inline void fs_gpu_note_efault(void) {}
static inline int fs_gpu_classify(const void *p, size_t len) { (void)p; (void)len; return FS_GPU_HOST; }
static inline int fs_gpu_query(const void *p, size_t len, struct fs_gpu_ptr *out)
{
  (void)p, (void)len;
  memset(out, 0, sizeof *out);
  out->device = -1;
  return FS_GPU_HOST;
}
static inline ssize_t fs_gpu_copy_from_device(void *h, const void *d, size_t n) { memcpy(h, d, n); return (ssize_t)n; }
static inline ssize_t fs_gpu_copy_to_device(void *d, const void *h, size_t n) { memcpy(d, h, n); return (ssize_t)n; }
static inline ssize_t fs_gpu_stage_out(const void *d, size_t l, fs_gpu_sink_fn s, void *c) { return s(c, d, l); }
static inline ssize_t fs_gpu_stage_in(void *d, size_t l, fs_gpu_source_fn s, void *c) { return s(c, d, l, false); }
static inline int fs_gpu_dmabuf_fd(const void *p, size_t l) { (void)p; (void)l; return -EOPNOTSUPP; }
static inline int fs_gpu_regcache_query(void *a, uintptr_t p, size_t l, struct fs_regcache_range *o)
{
  (void)a, (void)p, (void)l, (void)o;
  return -EINVAL;
}
static inline void fs_gpu_get_stats(struct fs_gpu_stats *out) { memset(out, 0, sizeof *out); }

#endif
#endif
