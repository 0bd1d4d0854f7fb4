/* Monotonic time for spin budgets, sleeps and deadlines (vDSO, no syscall). */
#ifndef FS_BASE_CLOCK_H
#define FS_BASE_CLOCK_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

static inline uint64_t fs_clock_ns(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static inline uint64_t fs_clock_us(void)
{
  return fs_clock_ns() / 1000u;
}

/* Cheaper, tick-resolution time for coarse decisions (give-up timers). */
static inline uint64_t fs_clock_coarse_ns(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* A spin's periodic clock check, at iteration i (a multiple of `every`):
 * *first is the clock at the first check, *npi what one iteration takes
 * (learnt from the checks since; kept as given before the second).
 * Returns the time spun so far in ns, the first `every` iterations
 * estimated.  Spins read no clock between checks: see fs_sockio_spin. */
static inline uint64_t fs_clock_spin_check(uint64_t *first, uint32_t *npi, unsigned i, unsigned every)
{
  uint64_t now = fs_clock_ns();
  if (!*first) {
    *first = now;
  } else if (now > *first) {
    uint64_t v = (now - *first) / (i - every);
    *npi = v ? (v > 1000000u ? 1000000u : (uint32_t)v) : 1;
  }
  return now - *first + (uint64_t)every * *npi;
}

/* A poll with nothing to wait on: false once deadline_ns (fs_clock_ns) has
 * passed, else a nap of nap_ns and true. */
static inline bool fs_clock_nap(uint64_t deadline_ns, long nap_ns)
{
  if (fs_clock_ns() >= deadline_ns)
    return false;
  struct timespec ts = { 0, nap_ns };
  nanosleep(&ts, NULL);
  return true;
}

/* Absolute deadline for a relative timeout (ts NULL: 0, none). */
static inline uint64_t fs_clock_deadline(const struct timespec *ts)
{
  return ts ? fs_clock_ns() + (uint64_t)ts->tv_sec * 1000000000u + (uint64_t)ts->tv_nsec : 0;
}

/* Time left to deadline as a timespec in *buf; NULL (forever) if ts is NULL. */
static inline const struct timespec *fs_clock_left(const struct timespec *ts, uint64_t deadline, struct timespec *buf)
{
  if (!ts)
    return NULL;
  uint64_t now = fs_clock_ns();
  uint64_t left = deadline > now ? deadline - now : 0;
  buf->tv_sec = (time_t)(left / 1000000000u);
  buf->tv_nsec = (long)(left % 1000000000u);
  return buf;
}

#endif
