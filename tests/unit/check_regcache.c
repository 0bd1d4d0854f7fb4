/* Unit tests of gpu/regcache.c: pure logic over a simulated allocation table. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/regcache.h"
#include "tests/unit/check_run.h"

/* ---- a simulated allocator ---------------------------------------------- */

#define MAXA 256
#define MAXH 400000

static struct fs_regcache_range allocs[MAXA];
static int nallocs;
static uint64_t next_id = 1;
static pthread_mutex_t alock = PTHREAD_MUTEX_INITIALIZER;

/* Registration bookkeeping: handle k is live while live[k]. */
static int live[MAXH];
static int nhandles, nregs, nderegs, double_deregs, bad_handles;
static int fail_query, fail_reg;

static int alloc_add(uintptr_t base, size_t len)
{
  pthread_mutex_lock(&alock);
  allocs[nallocs] = (struct fs_regcache_range){ base, len, next_id++ };
  int i = nallocs++;
  pthread_mutex_unlock(&alock);
  return i;
}

/* Free allocation i and put a new one at the same address. */
static void alloc_reuse(int i)
{
  pthread_mutex_lock(&alock);
  allocs[i].id = next_id++;
  pthread_mutex_unlock(&alock);
}

static int q(void *arg, uintptr_t addr, size_t len, struct fs_regcache_range *out)
{
  (void)arg;
  (void)len;
  if (fail_query)
    return -EIO;
  int ret = -EINVAL;
  pthread_mutex_lock(&alock);
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].len != 0 && addr >= allocs[i].base && addr - allocs[i].base < allocs[i].len) {
      *out = allocs[i];
      ret = 0;
    }
  pthread_mutex_unlock(&alock);
  return ret;
}

static int reg(void *arg, const struct fs_regcache_range *r, void **h)
{
  (void)arg;
  (void)r;
  if (fail_reg)
    return -ENOMEM;
  int k = __atomic_add_fetch(&nhandles, 1, __ATOMIC_RELAXED);
  if (k >= MAXH)
    return -ENOSPC;
  live[k] = 1;
  __atomic_add_fetch(&nregs, 1, __ATOMIC_RELAXED);
  *h = (void *)(uintptr_t)k;
  return 0;
}

static void dereg(void *arg, const struct fs_regcache_range *r, void *h)
{
  (void)arg;
  (void)r;
  uintptr_t k = (uintptr_t)h;
  if (k == 0 || k >= MAXH) {
    bad_handles++;
    return;
  }
  if (!live[k])
    double_deregs++;
  live[k] = 0;
  __atomic_add_fetch(&nderegs, 1, __ATOMIC_RELAXED);
}

static const struct fs_regcache_ops ops = { q, reg, dereg, NULL };

#define A(i) ((void *)(allocs[i].base))

static void assert_all_released(void)
{
  ck_assert_int_eq(double_deregs, 0);
  ck_assert_int_eq(bad_handles, 0);
  ck_assert_int_eq(nregs, nderegs);
  int still = 0; /* counted first: every ck_assert costs a message to the runner */
  for (int k = 0; k < MAXH; k++)
    still += live[k] != 0;
  ck_assert_msg(still == 0, "%d handles never deregistered", still);
}

static const struct fs_regcache_entry *get_ok(struct fs_regcache *rc, void *p, size_t n)
{
  const struct fs_regcache_entry *e = NULL;
  ck_assert_int_eq(fs_regcache_get(rc, p, n, &e), 0);
  ck_assert_ptr_nonnull(e);
  return e;
}

/* ---- tests -------------------------------------------------------------- */

START_TEST(test_hit_miss)
{
  int a = alloc_add(0x10000, 0x4000);
  struct fs_regcache *rc = fs_regcache_create(&ops, 8, 0);
  const struct fs_regcache_entry *e1 = get_ok(rc, A(a), 100);
  ck_assert_uint_eq(e1->range.base, 0x10000);
  ck_assert_uint_eq(e1->range.len, 0x4000);
  fs_regcache_put(rc, e1);
  const struct fs_regcache_entry *e2 = get_ok(rc, (char *)A(a) + 0x3000, 0x1000); /* sub-range */
  ck_assert_ptr_eq(e1, e2);
  fs_regcache_put(rc, e2);
  ck_assert_int_eq(nregs, 1);
  struct fs_regcache_stats st;
  fs_regcache_get_stats(rc, &st);
  ck_assert_uint_eq(st.hits, 1);
  ck_assert_uint_eq(st.misses, 1);
  ck_assert_uint_eq(st.entries, 1);
  ck_assert_uint_eq(st.bytes, 0x4000);
  fs_regcache_destroy(rc);
  assert_all_released();
}
END_TEST

START_TEST(test_many_sorted)
{
  /* 200 allocations inserted in a scrambled order; every lookup finds its own. */
  struct fs_regcache *rc = fs_regcache_create(&ops, 0, 0);
  int idx[200];
  for (int i = 0; i < 200; i++)
    idx[i] = alloc_add(0x100000 + (uintptr_t)i * 0x2000, 0x1000 + (size_t)(i % 7) * 0x100);
  void *h[200];
  for (int k = 0; k < 200; k++) {
    int i = (k * 77) % 200; /* 77 is prime to 200: a permutation */
    const struct fs_regcache_entry *e = get_ok(rc, A(idx[i]), 1);
    h[i] = e->handle;
    fs_regcache_put(rc, e);
  }
  for (int k = 0; k < 2000; k++) {
    int i = (k * 31 + 5) % 200;
    size_t off = (size_t)(k * 13) % allocs[idx[i]].len;
    const struct fs_regcache_entry *e = get_ok(rc, (char *)A(idx[i]) + off, 1);
    ck_assert_ptr_eq(e->handle, h[i]);
    ck_assert_uint_eq(e->range.base, allocs[idx[i]].base);
    fs_regcache_put(rc, e);
  }
  ck_assert_int_eq(nregs, 200);
  fs_regcache_destroy(rc);
  assert_all_released();
}
END_TEST

START_TEST(test_buffer_id_change)
{
  int a = alloc_add(0x10000, 0x4000);
  struct fs_regcache *rc = fs_regcache_create(&ops, 8, 0);
  const struct fs_regcache_entry *e = get_ok(rc, A(a), 10);
  void *old = e->handle;
  fs_regcache_put(rc, e);
  alloc_reuse(a); /* freed, reallocated at the same address */
  e = get_ok(rc, A(a), 10);
  ck_assert_ptr_ne(e->handle, old);
  ck_assert_uint_eq(e->range.id, allocs[a].id);
  ck_assert_int_eq(nregs, 2);
  ck_assert_int_eq(nderegs, 1);
  ck_assert(!live[(uintptr_t)old]);
  fs_regcache_put(rc, e);
  struct fs_regcache_stats st;
  fs_regcache_get_stats(rc, &st);
  ck_assert_uint_eq(st.stale, 1);
  ck_assert_uint_eq(st.entries, 1);
  fs_regcache_destroy(rc);
  assert_all_released();
}
END_TEST

START_TEST(test_overlap)
{
  struct fs_regcache *rc = fs_regcache_create(&ops, 0, 0);
  int a = alloc_add(0x1000, 0x2000); /* [0x1000, 0x3000) */
  int b = alloc_add(0x4000, 0x1000); /* [0x4000, 0x5000) */
  int c = alloc_add(0x8000, 0x1000); /* [0x8000, 0x9000): untouched */
  fs_regcache_put(rc, get_ok(rc, A(a), 1));
  fs_regcache_put(rc, get_ok(rc, A(b), 1));
  fs_regcache_put(rc, get_ok(rc, A(c), 1));
  /* a and b freed; one allocation [0x2000, 0x6000) now overlaps both */
  allocs[a].len = 0;
  allocs[b].len = 0;
  int d = alloc_add(0x2000, 0x4000);
  const struct fs_regcache_entry *e = get_ok(rc, (char *)A(d) + 0x2800, 16);
  ck_assert_uint_eq(e->range.base, 0x2000);
  fs_regcache_put(rc, e);
  ck_assert_int_eq(nderegs, 2);
  struct fs_regcache_stats st;
  fs_regcache_get_stats(rc, &st);
  ck_assert_uint_eq(st.entries, 2);
  ck_assert_uint_eq(st.stale, 2);
  /* c is still a hit */
  fs_regcache_put(rc, get_ok(rc, A(c), 1));
  ck_assert_int_eq(nregs, 4);
  /* a range query that grows at the same base (same id) replaces the entry */
  allocs[d].len = 0x5000;
  fs_regcache_put(rc, get_ok(rc, A(d), 1));
  ck_assert_int_eq(nregs, 5);
  ck_assert_int_eq(nderegs, 3);
  fs_regcache_destroy(rc);
  assert_all_released();
}
END_TEST

START_TEST(test_lru_eviction)
{
  struct fs_regcache *rc = fs_regcache_create(&ops, 4, 0);
  int a[6];
  void *h[6];
  for (int i = 0; i < 6; i++)
    a[i] = alloc_add(0x100000 * (uintptr_t)(i + 1), 0x1000);
  for (int i = 0; i < 4; i++) {
    const struct fs_regcache_entry *e = get_ok(rc, A(a[i]), 1);
    h[i] = e->handle;
    fs_regcache_put(rc, e);
  }
  fs_regcache_put(rc, get_ok(rc, A(a[0]), 1)); /* 0 is now the most recent; 1 the least */
  fs_regcache_put(rc, get_ok(rc, A(a[4]), 1)); /* evicts 1 */
  ck_assert(!live[(uintptr_t)h[1]]);
  ck_assert(live[(uintptr_t)h[0]]);
  fs_regcache_put(rc, get_ok(rc, A(a[5]), 1)); /* evicts 2 */
  ck_assert(!live[(uintptr_t)h[2]]);
  ck_assert(live[(uintptr_t)h[3]]);
  struct fs_regcache_stats st;
  fs_regcache_get_stats(rc, &st);
  ck_assert_uint_eq(st.entries, 4);
  ck_assert_uint_eq(st.evictions, 2);
  /* an evicted one comes back as a miss */
  const struct fs_regcache_entry *e = get_ok(rc, A(a[1]), 1);
  ck_assert_ptr_ne(e->handle, h[1]);
  fs_regcache_put(rc, e);
  ck_assert_int_eq(nregs, 7);
  fs_regcache_destroy(rc);
  assert_all_released();
}
END_TEST

START_TEST(test_byte_limit)
{
  struct fs_regcache *rc = fs_regcache_create(&ops, 0, 0x3000);
  int a = alloc_add(0x10000, 0x2000), b = alloc_add(0x20000, 0x2000);
  fs_regcache_put(rc, get_ok(rc, A(a), 1));
  fs_regcache_put(rc, get_ok(rc, A(b), 1)); /* 0x4000 > 0x3000: a goes */
  struct fs_regcache_stats st;
  fs_regcache_get_stats(rc, &st);
  ck_assert_uint_eq(st.entries, 1);
  ck_assert_uint_eq(st.bytes, 0x2000);
  ck_assert_int_eq(nderegs, 1);
  fs_regcache_destroy(rc);
  assert_all_released();
}
END_TEST

START_TEST(test_held_not_evicted)
{
  struct fs_regcache *rc = fs_regcache_create(&ops, 2, 0);
  const struct fs_regcache_entry *e[4];
  for (int i = 0; i < 4; i++)
    e[i] = get_ok(rc, A(alloc_add(0x10000 * (uintptr_t)(i + 1), 0x100)), 1);
  struct fs_regcache_stats st;
  fs_regcache_get_stats(rc, &st);
  ck_assert_uint_eq(st.entries, 4); /* over the limit while held */
  ck_assert_int_eq(nderegs, 0);
  fs_regcache_put(rc, e[2]);
  fs_regcache_put(rc, e[0]);
  fs_regcache_get_stats(rc, &st);
  ck_assert_uint_eq(st.entries, 2);
  ck_assert_int_eq(nderegs, 2);
  ck_assert(live[(uintptr_t)e[1]->handle]);
  ck_assert(live[(uintptr_t)e[3]->handle]);
  fs_regcache_put(rc, e[1]);
  fs_regcache_put(rc, e[3]);
  fs_regcache_destroy(rc);
  assert_all_released();
}
END_TEST

START_TEST(test_held_stale_deferred)
{
  int a = alloc_add(0x10000, 0x1000);
  struct fs_regcache *rc = fs_regcache_create(&ops, 8, 0);
  const struct fs_regcache_entry *held = get_ok(rc, A(a), 1);
  const struct fs_regcache_entry *held2 = get_ok(rc, A(a), 1); /* two references */
  ck_assert_ptr_eq(held, held2);
  uintptr_t hk = (uintptr_t)held->handle;
  alloc_reuse(a);
  const struct fs_regcache_entry *fresh = get_ok(rc, A(a), 1);
  ck_assert_ptr_ne(fresh, held);
  ck_assert(live[hk]); /* still under a transfer */
  fs_regcache_put(rc, held);
  ck_assert(live[hk]);
  fs_regcache_put(rc, held2);
  ck_assert(!live[hk]); /* the last put deregisters it, once */
  ck_assert_int_eq(nderegs, 1);
  fs_regcache_put(rc, fresh);
  fs_regcache_destroy(rc);
  assert_all_released();
}
END_TEST

START_TEST(test_invalidate_flush_destroy)
{
  struct fs_regcache *rc = fs_regcache_create(&ops, 0, 0);
  int a = alloc_add(0x10000, 0x1000), b = alloc_add(0x20000, 0x1000), c = alloc_add(0x30000, 0x1000);
  fs_regcache_put(rc, get_ok(rc, A(a), 1));
  const struct fs_regcache_entry *hb = get_ok(rc, A(b), 1);
  fs_regcache_put(rc, get_ok(rc, A(c), 1));
  ck_assert_uint_eq(fs_regcache_invalidate(rc, (void *)0x10800, 0x10000), 2); /* a and b */
  ck_assert_int_eq(nderegs, 1);       /* b is held: later */
  ck_assert_uint_eq(fs_regcache_invalidate(rc, (void *)0x10000, 0), 0);
  ck_assert_uint_eq(fs_regcache_invalidate(rc, (void *)0x50000, 0x1000), 0);
  fs_regcache_flush(rc);              /* c */
  ck_assert_int_eq(nderegs, 2);
  struct fs_regcache_stats st;
  fs_regcache_get_stats(rc, &st);
  ck_assert_uint_eq(st.entries, 0);
  /* a held zombie at destroy is deregistered too */
  fs_regcache_put(rc, get_ok(rc, A(a), 1));
  (void)hb;
  fs_regcache_destroy(rc);
  assert_all_released();
}
END_TEST

START_TEST(test_errors)
{
  int a = alloc_add(0x10000, 0x1000);
  struct fs_regcache *rc = fs_regcache_create(&ops, 8, 0);
  const struct fs_regcache_entry *e = NULL;
  ck_assert_int_eq(fs_regcache_get(rc, A(a), 0, &e), -EINVAL);
  ck_assert_int_eq(fs_regcache_get(rc, (void *)0x999999, 1, &e), -EINVAL); /* query says no */
  ck_assert_int_eq(fs_regcache_get(rc, A(a), 0x1001, &e), -EFAULT);
  ck_assert_int_eq(fs_regcache_get(rc, (char *)A(a) + 0xfff, 2, &e), -EFAULT);
  ck_assert_int_eq(fs_regcache_get(rc, (void *)UINTPTR_MAX, 2, &e), -EINVAL);
  fail_query = 1;
  ck_assert_int_eq(fs_regcache_get(rc, A(a), 1, &e), -EIO);
  fail_query = 0;
  fail_reg = 1;
  ck_assert_int_eq(fs_regcache_get(rc, A(a), 1, &e), -ENOMEM);
  fail_reg = 0;
  struct fs_regcache_stats st;
  fs_regcache_get_stats(rc, &st);
  ck_assert_uint_eq(st.entries, 0);
  ck_assert_uint_eq(st.reg_failures, 1);
  ck_assert_ptr_null(e);
  fs_regcache_put(rc, get_ok(rc, A(a), 1)); /* works once the registrar does */
  fs_regcache_put(rc, NULL);
  ck_assert_ptr_null(fs_regcache_create(NULL, 1, 1));
  struct fs_regcache_ops bad = ops;
  bad.dereg = NULL;
  ck_assert_ptr_null(fs_regcache_create(&bad, 1, 1));
  fs_regcache_destroy(NULL);
  fs_regcache_destroy(rc);
  assert_all_released();
}
END_TEST

/* Many threads getting and putting while allocations are "reused" under
 * them: afterwards every registration was deregistered exactly once. */
#define NT 8
#define NA 32
static struct fs_regcache *shared_rc;
static int shared_idx[NA];
static int thread_errors;

static void *hammer(void *arg)
{
  unsigned seed = (unsigned)(uintptr_t)arg;
  for (int k = 0; k < 10000; k++) {
    seed = seed * 1103515245u + 12345u;
    int i = (int)((seed >> 8) % NA);
    if ((seed >> 20) % 50 == 0) {
      alloc_reuse(shared_idx[i]);
      continue;
    }
    const struct fs_regcache_entry *e;
    size_t off = (seed >> 4) % 0x800;
    if (fs_regcache_get(shared_rc, (char *)A(shared_idx[i]) + off, 0x100, &e) != 0) {
      __atomic_add_fetch(&thread_errors, 1, __ATOMIC_RELAXED);
      continue;
    }
    if (e->range.base != allocs[shared_idx[i]].base)
      __atomic_add_fetch(&thread_errors, 1, __ATOMIC_RELAXED);
    fs_regcache_put(shared_rc, e);
  }
  return NULL;
}

START_TEST(test_threads)
{
  for (int i = 0; i < NA; i++)
    shared_idx[i] = alloc_add(0x1000000 + (uintptr_t)i * 0x10000, 0x1000);
  shared_rc = fs_regcache_create(&ops, 8, 0);
  pthread_t t[NT];
  for (uintptr_t i = 0; i < NT; i++)
    ck_assert_int_eq(pthread_create(&t[i], NULL, hammer, (void *)(i + 1)), 0);
  for (int i = 0; i < NT; i++)
    pthread_join(t[i], NULL);
  ck_assert_int_eq(thread_errors, 0);
  struct fs_regcache_stats st;
  fs_regcache_get_stats(shared_rc, &st);
  ck_assert_uint_le(st.entries, 8);
  ck_assert_uint_gt(st.hits, 0);
  ck_assert_uint_gt(st.stale + st.evictions, 0);
  fs_regcache_destroy(shared_rc);
  assert_all_released();
}
END_TEST

int main(void)
{
  Suite *s = suite_create("regcache");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_hit_miss);
  tcase_add_test(tc, test_many_sorted);
  tcase_add_test(tc, test_buffer_id_change);
  tcase_add_test(tc, test_overlap);
  tcase_add_test(tc, test_lru_eviction);
  tcase_add_test(tc, test_byte_limit);
  tcase_add_test(tc, test_held_not_evicted);
  tcase_add_test(tc, test_held_stale_deferred);
  tcase_add_test(tc, test_invalidate_flush_destroy);
  tcase_add_test(tc, test_errors);
  tcase_add_test(tc, test_threads);
  suite_add_tcase(s, tc);
  return run_suite(s, true); /* each test starts with empty bookkeeping */
}
