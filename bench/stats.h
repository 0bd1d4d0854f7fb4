/* Small helpers shared by fabsock-bench and shm-pingpong: monotonic time and
 * latency statistics over a sample of round-trip times. */
#ifndef BENCH_STATS_H
#define BENCH_STATS_H

#include <stddef.h>
#include <stdint.h>

struct lat_stats {
  uint64_t n;
  double p50_us, p99_us, mean_us, min_us, max_us;
};

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void);

/* Sorts ns[0..n) in place and fills st.  n may be 0 (all zero). */
void bench_lat_stats(uint64_t *ns, size_t n, struct lat_stats *st);

/* Median of v[0..n) (sorts a copy; n <= 64).  0 for n == 0. */
double bench_median(const double *v, size_t n);

#endif
