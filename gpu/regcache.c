/* Registration cache (see regcache.h): sorted array of non-overlapping
 * entries, LRU eviction by a use counter, reference-counted handles. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/regcache.h"

struct fs_rc_entry {
  struct fs_regcache_entry pub; /* first: the public pointer is this entry */
  unsigned refs;
  bool linked;                  /* in the sorted array (else a held zombie) */
  uint64_t last_use;
  struct fs_rc_entry *next_zombie;
};

struct fs_regcache {
  pthread_mutex_t lock;
  struct fs_regcache_ops ops;
  size_t max_entries, max_bytes;
  struct fs_rc_entry **v; /* sorted by range.base */
  size_t n, cap;
  size_t bytes;
  uint64_t tick;
  struct fs_rc_entry *zombies; /* unlinked but still held */
  struct fs_regcache_stats st;
};

static uintptr_t fs_rc_end(const struct fs_rc_entry *e)
{
  return e->pub.range.base + e->pub.range.len;
}

/* Index of the last entry with base <= addr, or -1. */
static ptrdiff_t fs_rc_floor(const struct fs_regcache *rc, uintptr_t addr)
{
  size_t lo = 0, hi = rc->n; /* answer in [lo-1, hi-1] */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (rc->v[mid]->pub.range.base <= addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  return (ptrdiff_t)lo - 1;
}

static void fs_rc_release(struct fs_regcache *rc, struct fs_rc_entry *e)
{
  rc->ops.dereg(rc->ops.arg, &e->pub.range, e->pub.handle);
  rc->st.deregs++;
  free(e);
}

/* Take v[i] out of the index; deregister now unless it is held. */
static void fs_rc_unlink_at(struct fs_regcache *rc, size_t i)
{
  struct fs_rc_entry *e = rc->v[i];
  memmove(&rc->v[i], &rc->v[i + 1], (rc->n - i - 1) * sizeof rc->v[0]);
  rc->n--;
  rc->bytes -= e->pub.range.len;
  e->linked = false;
  if (e->refs == 0) {
    fs_rc_release(rc, e);
  } else {
    e->next_zombie = rc->zombies;
    rc->zombies = e;
  }
}

/* Unlink every entry overlapping [base, base+len); returns how many. */
static size_t fs_rc_unlink_overlap(struct fs_regcache *rc, uintptr_t base, size_t len)
{
  uintptr_t end = base + len;
  size_t dropped = 0;
  ptrdiff_t i = fs_rc_floor(rc, base);
  if (i < 0 || fs_rc_end(rc->v[i]) <= base)
    i++;
  while ((size_t)i < rc->n && rc->v[i]->pub.range.base < end) {
    fs_rc_unlink_at(rc, (size_t)i); /* the next entry slides into slot i */
    dropped++;
  }
  return dropped;
}

static int fs_rc_insert(struct fs_regcache *rc, struct fs_rc_entry *e)
{
  if (rc->n == rc->cap) {
    size_t cap = rc->cap ? rc->cap * 2 : 16;
    struct fs_rc_entry **v = realloc(rc->v, cap * sizeof *v);
    if (v == NULL)
      return -ENOMEM;
    rc->v = v;
    rc->cap = cap;
  }
  size_t i = (size_t)(fs_rc_floor(rc, e->pub.range.base) + 1);
  memmove(&rc->v[i + 1], &rc->v[i], (rc->n - i) * sizeof rc->v[0]);
  rc->v[i] = e;
  rc->n++;
  rc->bytes += e->pub.range.len;
  e->linked = true;
  return 0;
}

static bool fs_rc_over(const struct fs_regcache *rc)
{
  return (rc->max_entries != 0 && rc->n > rc->max_entries) ||
         (rc->max_bytes != 0 && rc->bytes > rc->max_bytes);
}

/* Evict unheld entries, least recently used first, until within limits.
 * A linear scan: the cache holds at most a few thousand entries and eviction
 * only follows a registration, which costs far more. */
static void fs_rc_evict(struct fs_regcache *rc)
{
  while (fs_rc_over(rc)) {
    ptrdiff_t victim = -1;
    for (size_t i = 0; i < rc->n; i++)
      if (rc->v[i]->refs == 0 && (victim < 0 || rc->v[i]->last_use < rc->v[victim]->last_use))
        victim = (ptrdiff_t)i;
    if (victim < 0)
      return; /* everything is held */
    fs_rc_unlink_at(rc, (size_t)victim);
    rc->st.evictions++;
  }
}

struct fs_regcache *fs_regcache_create(const struct fs_regcache_ops *ops, size_t max_entries,
                                       size_t max_bytes)
{
  if (ops == NULL || ops->query == NULL || ops->reg == NULL || ops->dereg == NULL)
    return NULL;
  struct fs_regcache *rc = calloc(1, sizeof *rc);
  if (rc == NULL)
    return NULL;
  pthread_mutex_init(&rc->lock, NULL);
  rc->ops = *ops;
  rc->max_entries = max_entries;
  rc->max_bytes = max_bytes;
  return rc;
}

void fs_regcache_destroy(struct fs_regcache *rc)
{
  if (rc == NULL)
    return;
  for (size_t i = 0; i < rc->n; i++)
    fs_rc_release(rc, rc->v[i]);
  while (rc->zombies != NULL) {
    struct fs_rc_entry *z = rc->zombies;
    rc->zombies = z->next_zombie;
    fs_rc_release(rc, z);
  }
  free(rc->v);
  pthread_mutex_destroy(&rc->lock);
  free(rc);
}

int fs_regcache_get(struct fs_regcache *rc, const void *addr, size_t len,
                    const struct fs_regcache_entry **out)
{
  uintptr_t a = (uintptr_t)addr;
  if (len == 0 || a + len < a)
    return -EINVAL;
  struct fs_regcache_range r;
  memset(&r, 0, sizeof r);
  pthread_mutex_lock(&rc->lock);
  int err = rc->ops.query(rc->ops.arg, a, len, &r);
  if (err < 0)
    goto out;
  if (r.len == 0 || a < r.base || a - r.base > r.len || len > r.len - (a - r.base)) {
    err = -EFAULT; /* the allocation does not hold the whole range */
    goto out;
  }
  ptrdiff_t i = fs_rc_floor(rc, a);
  if (i >= 0) {
    struct fs_rc_entry *e = rc->v[i];
    if (e->pub.range.base == r.base && e->pub.range.len == r.len && e->pub.range.id == r.id) {
      e->refs++;
      e->last_use = ++rc->tick;
      rc->st.hits++;
      *out = &e->pub;
      goto out;
    }
  }
  rc->st.misses++;
  /* Live allocations never overlap, so whatever overlaps this one is stale. */
  rc->st.stale += fs_rc_unlink_overlap(rc, r.base, r.len);
  struct fs_rc_entry *e = calloc(1, sizeof *e);
  if (e == NULL) {
    err = -ENOMEM;
    goto out;
  }
  e->pub.range = r;
  err = rc->ops.reg(rc->ops.arg, &e->pub.range, &e->pub.handle);
  if (err < 0) {
    rc->st.reg_failures++;
    free(e);
    goto out;
  }
  rc->st.regs++;
  e->refs = 1;
  e->last_use = ++rc->tick;
  if (fs_rc_insert(rc, e) < 0) {
    fs_rc_release(rc, e);
    err = -ENOMEM;
    goto out;
  }
  fs_rc_evict(rc);
  *out = &e->pub;
out:
  pthread_mutex_unlock(&rc->lock);
  return err < 0 ? err : 0;
}

void fs_regcache_put(struct fs_regcache *rc, const struct fs_regcache_entry *pub)
{
  if (pub == NULL)
    return;
  struct fs_rc_entry *e = (struct fs_rc_entry *)(uintptr_t)pub;
  pthread_mutex_lock(&rc->lock);
  if (e->refs > 0 && --e->refs == 0) {
    if (!e->linked) {
      struct fs_rc_entry **pp = &rc->zombies;
      while (*pp != NULL && *pp != e)
        pp = &(*pp)->next_zombie;
      if (*pp == e)
        *pp = e->next_zombie;
      fs_rc_release(rc, e);
    } else {
      fs_rc_evict(rc); /* it may have been kept over the limits while held */
    }
  }
  pthread_mutex_unlock(&rc->lock);
}

size_t fs_regcache_invalidate(struct fs_regcache *rc, const void *addr, size_t len)
{
  uintptr_t a = (uintptr_t)addr;
  if (len == 0)
    return 0;
  if (a + len < a)
    len = UINTPTR_MAX - a;
  pthread_mutex_lock(&rc->lock);
  size_t n = fs_rc_unlink_overlap(rc, a, len);
  pthread_mutex_unlock(&rc->lock);
  return n;
}

void fs_regcache_flush(struct fs_regcache *rc)
{
  pthread_mutex_lock(&rc->lock);
  while (rc->n > 0)
    fs_rc_unlink_at(rc, rc->n - 1);
  pthread_mutex_unlock(&rc->lock);
}

void fs_regcache_get_stats(struct fs_regcache *rc, struct fs_regcache_stats *out)
{
  pthread_mutex_lock(&rc->lock);
  *out = rc->st;
  out->entries = rc->n;
  out->bytes = rc->bytes;
  pthread_mutex_unlock(&rc->lock);
}
