/* Monotonic time and latency statistics (see stats.h). */
#include "bench/stats.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Nearest-rank percentile: the smallest sample with at least p of the
 * samples at or below it. */
static uint64_t pct(const uint64_t *v, size_t n, double p) {
  size_t rank = (size_t)(p * (double)n + 0.999999);
  if (rank < 1) rank = 1;
  if (rank > n) rank = n;
  return v[rank - 1];
}

void bench_lat_stats(uint64_t *ns, size_t n, struct lat_stats *st) {
  memset(st, 0, sizeof *st);
  if (n == 0) return;
  qsort(ns, n, sizeof *ns, cmp_u64);
  long double sum = 0;
  for (size_t i = 0; i < n; i++) sum += ns[i];
  st->n = n;
  st->p50_us = pct(ns, n, 0.50) / 1e3;
  st->p99_us = pct(ns, n, 0.99) / 1e3;
  st->mean_us = (double)(sum / n) / 1e3;
  st->min_us = ns[0] / 1e3;
  st->max_us = ns[n - 1] / 1e3;
}

double bench_median(const double *v, size_t n) {
  double tmp[64];
  if (n == 0) return 0;
  if (n > 64) n = 64;
  memcpy(tmp, v, n * sizeof *v);
  qsort(tmp, n, sizeof *tmp, cmp_dbl);
  return n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
}
