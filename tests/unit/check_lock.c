/* Unit tests for base/lock: exclusion under contention (threads that sleep
 * on the futex), try-lock, and errno left alone on the slow paths. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "base/lock.h"
#include "tests/unit/check_run.h"

static fs_lock_t lk;
static unsigned long counter;
static int inside;

START_TEST(t_uncontended)
{
  fs_lock_init(&lk);
  ck_assert(fs_lock_try(&lk));
  ck_assert(!fs_lock_try(&lk));
  fs_unlock(&lk);
  fs_lock(&lk);
  ck_assert_uint_eq(lk.v, 1);
  fs_unlock(&lk);
  ck_assert_uint_eq(lk.v, 0);
}
END_TEST

#define ROUNDS 200000
static void *worker(void *arg)
{
  (void)arg;
  for (int i = 0; i < ROUNDS; i++) {
    fs_lock(&lk);
    /* Two holders at once would see each other here. */
    ck_assert_int_eq(__atomic_add_fetch(&inside, 1, __ATOMIC_RELAXED), 1);
    counter++;
    if ((i & 4095) == 0) { /* hold it across a sleep: the others must wait on the futex */
      struct timespec ts = { 0, 200000 };
      nanosleep(&ts, NULL);
    }
    __atomic_sub_fetch(&inside, 1, __ATOMIC_RELAXED);
    fs_unlock(&lk);
  }
  return NULL;
}

START_TEST(t_contended)
{
  fs_lock_init(&lk);
  counter = 0;
  pthread_t t[4];
  for (int i = 0; i < 4; i++)
    ck_assert_int_eq(pthread_create(&t[i], NULL, worker, NULL), 0);
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  ck_assert_uint_eq(counter, 4ul * ROUNDS);
  ck_assert_uint_eq(lk.v, 0);
}
END_TEST

static void *hold_then_release(void *arg)
{
  (void)arg;
  struct timespec ts = { 0, 20 * 1000 * 1000 };
  nanosleep(&ts, NULL);
  errno = 0;
  fs_unlock(&lk); /* the waiter marked it: this wakes it by futex */
  ck_assert_int_eq(errno, 0);
  return NULL;
}

START_TEST(t_errno_kept)
{
  fs_lock_init(&lk);
  fs_lock(&lk);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, hold_then_release, NULL), 0);
  errno = EINTR;
  fs_lock(&lk); /* sleeps until the other thread unlocks */
  ck_assert_int_eq(errno, EINTR);
  ck_assert_uint_eq(lk.v, 2); /* taken as waited for */
  fs_unlock(&lk);
  pthread_join(t, NULL);
  ck_assert_uint_eq(lk.v, 0);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("lock");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, t_uncontended);
  tcase_add_test(tc, t_contended);
  tcase_add_test(tc, t_errno_kept);
  suite_add_tcase(s, tc);
  return run_suite(s, false);
}
