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

/* The raw shared-memory stream: a forked child copies `size`-byte messages
 * into a ring of `ring` bytes in an anonymous MAP_SHARED mapping (in
 * quarters of the ring where larger), the caller copies them out (two
 * copies per byte, as any shm socket makes), both spinning on the other's
 * index.  Measures for `secs` after a warm-up, and
 * returns 0 with the caller's received bytes per second in *gbps (1e9 B/s),
 * or -1 with a message in err.  cpu_a: the caller's CPU, cpu_b: the
 * child's (-1: no pinning). */
int shm_floor_stream(size_t size, size_t ring, double secs, int cpu_a, int cpu_b, double *gbps,
                     char *err, size_t errlen);

/* The ring the stream floor uses for a message size: as libfabsock's shm
 * ring for a connection whose largest call is that size (32x, 256 KiB to
 * 4 MiB: fabric/shm/shm.h). */
size_t shm_floor_stream_ring(size_t size);

#endif
