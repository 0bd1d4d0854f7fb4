/* Registration cache: keeps memory registrations (ibv_reg_mr, ibv_reg_dmabuf_mr,
 * ...) alive across transfers so that no registration happens on the data path.
 *
 * Pure logic, no CUDA and no verbs: three callbacks plug it in.
 *  - query(addr, len) says which allocation holds [addr, addr+len): its range and
 *    a buffer id that changes whenever the allocation is freed and another one
 *    takes its place (for CUDA: CU_POINTER_ATTRIBUTE_BUFFER_ID, which the
 *    driver never reuses; see fs_gpu_regcache_query in gpu/gpu.h).
 *  - reg(range) registers that allocation and returns an opaque handle.
 *  - dereg(handle) undoes it; called exactly once per successful reg.
 *
 * Entries cover whole allocations (the range query returned), never overlap,
 * and sit in an array sorted by base address (binary search).  A lookup always
 * asks query() first: the same address with a new buffer id means the old
 * memory was freed and reused, so the stale entry (and any other entry that
 * overlaps the new allocation: only stale ones can) is dropped.
 *
 * Entries are reference counted: fs_regcache_get() returns one held, and
 * fs_regcache_put() releases it.  A held entry is never deregistered under a
 * transfer; if it goes stale or is flushed meanwhile it is unlinked at once and
 * deregistered by the last put.  Unheld entries are evicted least recently
 * used first when the cache holds more than max_entries entries or max_bytes
 * bytes (0 = no limit); held ones may push it over the limits temporarily.
 *
 * Thread-safe (one mutex); callbacks run under it and must not call back
 * into the same cache. */
#ifndef FS_GPU_REGCACHE_H
#define FS_GPU_REGCACHE_H

#include <stddef.h>
#include <stdint.h>

struct fs_regcache_range {
  uintptr_t base;
  size_t len;
  uint64_t id; /* buffer id; any value, compared for equality only */
};

struct fs_regcache_ops {
  /* 0 and *out filled, or -errno (the lookup fails with it). */
  int (*query)(void *arg, uintptr_t addr, size_t len, struct fs_regcache_range *out);
  /* 0 and *handle set, or -errno. */
  int (*reg)(void *arg, const struct fs_regcache_range *r, void **handle);
  void (*dereg)(void *arg, const struct fs_regcache_range *r, void *handle);
  void *arg;
};

struct fs_regcache;

struct fs_regcache_entry {
  struct fs_regcache_range range;
  void *handle; /* what reg() returned */
};

struct fs_regcache_stats {
  uint64_t hits, misses, stale, evictions, regs, deregs, reg_failures;
  size_t entries, bytes;
};

/* NULL on ENOMEM.  ops is copied. */
struct fs_regcache *fs_regcache_create(const struct fs_regcache_ops *ops, size_t max_entries,
                                       size_t max_bytes);

/* Deregister every entry (held ones too: the caller must have stopped all
 * transfers) and free the cache. */
void fs_regcache_destroy(struct fs_regcache *rc);

/* The registered entry covering [addr, addr+len), registering it on a miss;
 * held until fs_regcache_put().  0 or -errno (query/reg failure, -EFAULT when
 * the allocation does not cover the whole range, -EINVAL for len 0). */
int fs_regcache_get(struct fs_regcache *rc, const void *addr, size_t len,
                    const struct fs_regcache_entry **out);

void fs_regcache_put(struct fs_regcache *rc, const struct fs_regcache_entry *e);

/* Drop every entry that overlaps [addr, addr+len) (e.g. the memory is being
 * freed); returns how many were dropped. */
size_t fs_regcache_invalidate(struct fs_regcache *rc, const void *addr, size_t len);

/* Drop every entry. */
void fs_regcache_flush(struct fs_regcache *rc);

void fs_regcache_get_stats(struct fs_regcache *rc, struct fs_regcache_stats *out);

#endif
