/* Unit tests for engine/wait: the spin's verdict on a crowded CPU.  A
 * thread that shares its CPU with a busy one waits on the run queue for
 * about half the time it is runnable: the verdict must say crowded, and a
 * spin must not be worth it for a while.  And the spin a policy allows. */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include "base/clock.h"
#include "engine/wait.h"
#include "tests/unit/check_run.h"

#define MS 1000000ull

static bool have_schedstat(void)
{
  FILE *f = fopen("/proc/thread-self/schedstat", "r");
  unsigned long long a, b;
  bool ok = f && fscanf(f, "%llu %llu", &a, &b) == 2;
  if (f)
    fclose(f);
  return ok;
}

static void pin_here(int cpu)
{
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  ck_assert_int_eq(pthread_setaffinity_np(pthread_self(), sizeof set, &set), 0);
}

static int first_cpu(void)
{
  cpu_set_t set;
  ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
  for (int i = 0; i < CPU_SETSIZE; i++)
    if (CPU_ISSET(i, &set))
      return i;
  ck_abort_msg("no CPU in our affinity");
  return 0;
}

static volatile bool hog_stop;
static int hog_cpu;

static void *hog(void *arg)
{
  (void)arg;
  pin_here(hog_cpu);
  while (!hog_stop)
    ;
  return NULL;
}

static void busy_for(uint64_t ns)
{
  uint64_t end = fs_clock_ns() + ns;
  while (fs_clock_ns() < end)
    ;
}

/* 100 ms of wall time beside a busy thread on the same CPU: runnable all
 * along, running about half of it. */
START_TEST(t_crowded_beside_a_busy_thread)
{
  if (!have_schedstat()) {
    fprintf(stderr, "# SKIP no /proc/thread-self/schedstat in this kernel\n");
    return;
  }
  hog_cpu = first_cpu();
  pin_here(hog_cpu);
  ck_assert(!fs_wait_cpu_crowded(fs_clock_ns())); /* the first look only takes a baseline */
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, hog, NULL), 0);
  busy_for(100 * MS);
  ck_assert(fs_wait_cpu_crowded(fs_clock_ns()));
  ck_assert(fs_wait_cpu_crowded(fs_clock_ns())); /* still for 32 ms */
  ck_assert(!fs_wait_spin_worth());
  hog_stop = true;
  pthread_join(t, NULL);
}
END_TEST

/* The steps on numbers: a first look is a baseline; under 1 ms of wanting
 * a CPU tells nothing; a quarter waited is a crowd, and stillness follows,
 * 32 ms doubling to 512 ms while each try crowds; eight calm windows in a
 * row forget the past. */
START_TEST(t_steps)
{
  struct fs_wait_crowd t = { 0 };
  uint64_t now = 1000 * MS, run = 50 * MS, wait = 7 * MS;
  ck_assert(!fs_wait_crowd_step(&t, now, run, wait));
  ck_assert(!fs_wait_crowd_step(&t, now += 4 * MS, run += MS / 2, wait += MS / 2 - 1)); /* too little */
  ck_assert(!fs_wait_crowd_step(&t, now += 4 * MS, run += 7 * MS / 2, wait += MS / 2 + 1)); /* 4 ms run, 1 ms waited: a fifth */
  ck_assert(fs_wait_crowd_step(&t, now, run, wait) == false); /* nothing new */
  ck_assert(fs_wait_crowd_step(&t, now += 4 * MS, run += 3 * MS, wait += MS));
  ck_assert_uint_eq(t.backoff_ms, 32);
  ck_assert_uint_eq(t.quiet_until, now + 32 * MS);
  uint32_t want[] = { 64, 128, 256, 512, 512 };
  for (unsigned i = 0; i < sizeof want / sizeof want[0]; i++) {
    now = t.quiet_until;
    ck_assert(!fs_wait_crowd_step(&t, now, run += 10 * MS, wait += 30 * MS)); /* a new baseline */
    ck_assert(fs_wait_crowd_step(&t, now += 4 * MS, run += 2 * MS, wait += 2 * MS));
    ck_assert_uint_eq(t.backoff_ms, want[i]);
  }
  now = t.quiet_until;
  ck_assert(!fs_wait_crowd_step(&t, now, run, wait));
  for (int i = 0; i < 7; i++)
    ck_assert(!fs_wait_crowd_step(&t, now += 4 * MS, run += 3 * MS, wait += MS - 1)); /* just under a quarter */
  ck_assert_uint_eq(t.backoff_ms, 512);
  ck_assert(!fs_wait_crowd_step(&t, now += 4 * MS, run += 4 * MS, wait));
  ck_assert_uint_eq(t.backoff_ms, 0);
  ck_assert(fs_wait_crowd_step(&t, now += 4 * MS, run += 2 * MS, wait += 2 * MS));
  ck_assert_uint_eq(t.backoff_ms, 32);
  /* Totals that went back (a fork's child inherits t, not the counts) are
   * a new baseline, not a verdict. */
  now = t.quiet_until;
  ck_assert(!fs_wait_crowd_step(&t, now, run, wait));
  ck_assert(!fs_wait_crowd_step(&t, now += 4 * MS, 3 * MS, 0));
  ck_assert(!fs_wait_crowd_step(&t, now += 4 * MS, 7 * MS, MS / 2));
}
END_TEST

/* The spin a policy allows: its fixed bound, the learnt one where it asks
 * for adaptive, 1000 us and "busy" for busy polling. */
START_TEST(t_spin_bound)
{
  struct fs_policy_action p = { .spin_us = FS_POLICY_SPIN_ADAPTIVE };
  bool busy = false;
  ck_assert_uint_eq(fs_wait_spin_bound(&p, 37, &busy), 37);
  p.spin_us = 0;
  ck_assert_uint_eq(fs_wait_spin_bound(&p, 37, &busy), 0);
  p.spin_us = 5;
  ck_assert_uint_eq(fs_wait_spin_bound(&p, 37, &busy), 5);
  ck_assert(!busy);
  p.busy_poll = true;
  ck_assert_uint_eq(fs_wait_spin_bound(&p, 37, &busy), 1000);
  ck_assert(busy);
}
END_TEST

static Suite *wait_suite(void)
{
  Suite *s = suite_create("wait");
  TCase *tc = tcase_create("crowd");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, t_crowded_beside_a_busy_thread);
  tcase_add_test(tc, t_steps);
  tcase_add_test(tc, t_spin_bound);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  return run_suite(wait_suite(), true); /* per-thread state: a process per test */
}
