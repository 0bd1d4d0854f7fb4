/* Unit tests for engine/cancel: a thread asleep in the library holds
 * cancellation off; a cancel noted for it ends its sleep (fs_cancel_asked)
 * and acts at the boundary (fs_cancel_release), with the application's
 * own state (disabled, enabled) respected and errno untouched. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <unistd.h>

#include "engine/cancel.h"
#include "tests/unit/check_run.h"

static int cancel_state(void)
{
  int st;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &st);
  pthread_setcancelstate(st, NULL);
  return st;
}

START_TEST(t_hold_release_restores)
{
  ck_assert_int_eq(cancel_state(), PTHREAD_CANCEL_ENABLE);
  fs_cancel_hold();
  fs_cancel_hold(); /* idempotent */
  ck_assert_int_eq(cancel_state(), PTHREAD_CANCEL_DISABLE);
  ck_assert(!fs_cancel_asked());
  errno = 1234;
  fs_cancel_release();
  ck_assert_int_eq(errno, 1234);
  ck_assert_int_eq(fs_cancel_saved, 0);
  ck_assert_int_eq(cancel_state(), PTHREAD_CANCEL_ENABLE);
}
END_TEST

static sem_t held;
static volatile int cleaned, returned, asked_seen, app_disabled;

static void cleanup(void *arg)
{
  (void)arg;
  cleaned = 1;
}

/* A sleeper as in fs_wait_sleep: hold, sleep in slices until asked (the
 * sleeps are cancellation points, held off), then the boundary. */
static void *sleeper(void *arg)
{
  (void)arg;
  pthread_cleanup_push(cleanup, NULL);
  if (app_disabled)
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
  fs_cancel_hold();
  sem_post(&held);
  for (int i = 0; i < (app_disabled ? 50 : 5000) && !fs_cancel_asked(); i++)
    usleep(1000);
  asked_seen = fs_cancel_asked();
  fs_cancel_release();
  if (app_disabled) { /* the application's own state, then its own point */
    returned = cancel_state() == PTHREAD_CANCEL_DISABLE ? 1 : 2;
    pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
    pthread_testcancel();
  }
  returned = 3;
  pthread_cleanup_pop(0);
  return NULL;
}

static void run_sleeper(bool disabled)
{
  cleaned = returned = asked_seen = 0;
  app_disabled = disabled;
  ck_assert_int_eq(sem_init(&held, 0, 0), 0);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, sleeper, NULL), 0);
  ck_assert_int_eq(sem_wait(&held), 0);
  usleep(20000); /* asleep, cancellation held off */
  ck_assert_int_eq(pthread_cancel(t), 0);
  fs_cancel_note(t);
  void *res = NULL;
  ck_assert_int_eq(pthread_join(t, &res), 0);
  ck_assert_ptr_eq(res, PTHREAD_CANCELED);
  ck_assert_int_eq(cleaned, 1);
}

START_TEST(t_asked_sleeper_cancelled_at_release)
{
  run_sleeper(false);
  ck_assert_msg(asked_seen, "the sleeper saw the cancel noted for it");
  ck_assert_int_eq(returned, 0); /* unwound at fs_cancel_release */
}
END_TEST

START_TEST(t_application_disabled_is_kept)
{
  run_sleeper(true);
  ck_assert_msg(!asked_seen, "cancellation disabled by the application: the sleep is not ended");
  ck_assert_int_eq(returned, 1); /* release returned, the state still disabled */
}
END_TEST

int main(void)
{
  Suite *s = suite_create("cancel");
  TCase *tc = tcase_create("cancel");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, t_hold_release_restores);
  tcase_add_test(tc, t_asked_sleeper_cancelled_at_release);
  tcase_add_test(tc, t_application_disabled_is_kept);
  suite_add_tcase(s, tc);
  return run_suite(s, true);
}
