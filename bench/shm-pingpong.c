/* shm-pingpong: the raw shared-memory floor.
 *
 * Two processes (fork) share an anonymous MAP_SHARED mapping and ping-pong a
 * message (default 64 B) through sequence-number flags with spin waiting
 * (acquire/release atomics, pause), and, in the futex variant, sleeping on a
 * futex after a bounded spin, which shows the cost of a blocking wake-up.
 * Prints p50/p99/mean/min round trip in microseconds.  fabsock-bench compare
 * links the same code (shm-floor.c) and prints it as "raw shm floor". */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/shm-floor.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: shm-pingpong [options]\n"
          "  -n, --iters N      measured round trips (default 200000 spin, 20000 futex)\n"
          "  -w, --warmup N     unmeasured round trips first (default 10%% of -n, >= 1000)\n"
          "  -s, --size BYTES   message size (default 64, max %u)\n"
          "  -m, --mode MODE    spin | futex | both (default both)\n"
          "      --spin-us US   futex mode: spin this long before sleeping (default 0)\n"
          "      --cpus A,B     pin parent to CPU A and child to CPU B\n"
          "  -t, --max-time S   bound warm-up and measurement to S s each (default 5)\n"
          "      --json         one JSON object per mode on stdout instead of the table\n",
          SHM_FLOOR_MAX_SIZE);
}

int main(int argc, char **argv) {
  static const struct option lo[] = {
      {"iters", required_argument, 0, 'n'}, {"warmup", required_argument, 0, 'w'},
      {"size", required_argument, 0, 's'},  {"mode", required_argument, 0, 'm'},
      {"spin-us", required_argument, 0, 'S'}, {"cpus", required_argument, 0, 'c'},
      {"json", no_argument, 0, 'j'},        {"help", no_argument, 0, 'h'},
      {"max-time", required_argument, 0, 't'},
      {0, 0, 0, 0}};
  long long iters = 0, warmup = -1, size = 64, spin_us = 0;
  double max_time = 5;
  int cpu_a = -1, cpu_b = -1, json = 0, modes = 3;
  int c;
  while ((c = getopt_long(argc, argv, "n:w:s:m:t:h", lo, NULL)) != -1) {
    switch (c) {
    case 'n': iters = atoll(optarg); break;
    case 'w': warmup = atoll(optarg); break;
    case 's': size = atoll(optarg); break;
    case 'S': spin_us = atoll(optarg); break;
    case 'c':
      if (sscanf(optarg, "%d,%d", &cpu_a, &cpu_b) != 2) {
        fprintf(stderr, "shm-pingpong: --cpus wants A,B\n");
        return 2;
      }
      break;
    case 'j': json = 1; break;
    case 't': max_time = atof(optarg); break;
    case 'm':
      if (!strcmp(optarg, "spin")) modes = 1;
      else if (!strcmp(optarg, "futex")) modes = 2;
      else if (!strcmp(optarg, "both")) modes = 3;
      else {
        fprintf(stderr, "shm-pingpong: unknown mode '%s'\n", optarg);
        return 2;
      }
      break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (optind < argc || size < 1 || size > SHM_FLOOR_MAX_SIZE || iters < 0 || spin_us < 0 ||
      !(max_time >= 0)) {
    usage(stderr);
    return 2;
  }
  if (!json) {
    printf("shm-pingpong: %lld B message, round trip in us\n", size);
    printf("%-16s %10s %9s %9s %9s %9s\n", "mode", "iters", "p50", "p99", "mean", "min");
  }
  int rc = 0;
  for (int m = 1; m <= 2; m++) {
    if (!(modes & m)) continue;
    struct shm_floor_opts o = {
        .iters = iters ? (uint64_t)iters : (m == 1 ? 200000u : 20000u),
        .size = (size_t)size, .futex = m == 2, .spin_us = (int)spin_us,
        .max_ns = (uint64_t)(max_time * 1e9), .cpu_a = cpu_a, .cpu_b = cpu_b};
    o.warmup = warmup >= 0 ? (uint64_t)warmup : (o.iters / 10 > 1000 ? o.iters / 10 : 1000);
    struct lat_stats st;
    char err[256], name[32];
    if (m == 1) snprintf(name, sizeof name, "spin");
    else snprintf(name, sizeof name, "futex(spin %lldus)", spin_us);
    if (shm_floor_run(&o, &st, err, sizeof err) < 0) {
      fprintf(stderr, "shm-pingpong: %s\n", err);
      rc = 1;
      continue;
    }
    if (json)
      printf("{\"mode\":\"%s\",\"spin_us\":%lld,\"size\":%lld,\"iters\":%llu,\"p50_us\":%.3f,"
             "\"p99_us\":%.3f,\"mean_us\":%.3f,\"min_us\":%.3f,\"max_us\":%.3f}\n",
             m == 1 ? "spin" : "futex", m == 1 ? 0 : spin_us, size,
             (unsigned long long)st.n, st.p50_us, st.p99_us, st.mean_us, st.min_us, st.max_us);
    else
      printf("%-16s %10llu %9.3f %9.3f %9.3f %9.3f\n", name, (unsigned long long)st.n,
             st.p50_us, st.p99_us, st.mean_us, st.min_us);
  }
  return rc;
}
