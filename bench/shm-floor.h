/* The raw shared-memory floor: two processes ping-pong a message through an
 * anonymous MAP_SHARED mapping with sequence-number flags.  No sockets, no
 * library: the best any shm fabric can hope for on this machine. */
#ifndef BENCH_SHM_FLOOR_H
#define BENCH_SHM_FLOOR_H

#include <stddef.h>
#include <stdint.h>

#include "bench/stats.h"

#define SHM_FLOOR_MAX_SIZE (1u << 20)

struct shm_floor_opts {
  uint64_t iters;    /* measured round trips */
  uint64_t warmup;   /* unmeasured round trips first */
  uint64_t max_ns;   /* stop measuring after this long even if iters are not done; 0 = never */
  size_t size;       /* message bytes, 1 .. SHM_FLOOR_MAX_SIZE */
  int futex;         /* 0: spin forever; 1: spin spin_us, then sleep on a futex */
  int spin_us;       /* futex mode only: bounded spin before sleeping (0 = sleep at once) */
  int cpu_a, cpu_b;  /* pin parent / child to these CPUs; -1 = no pinning */
};

/* Forks a child, runs the ping-pong, waits for the child.  Returns 0, or -1
 * with a message in err. */
int shm_floor_run(const struct shm_floor_opts *o, struct lat_stats *st,
                  char *err, size_t errlen);

#endif
