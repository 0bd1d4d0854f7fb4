/* fabsock-bench: shared declarations.
 *
 * fabsock-bench is a plain socket application (the "unmodified program"):
 * it uses only the socket API, pthreads and libc, never libfabsock itself.
 *
 * Files: fabsock-bench.c (command line, modes), bench-proto.h (the wire
 * protocol), bench-server.c and bench-client.c (the tests), bench-compare.c
 * (compare mode: forks and re-execs server/client pairs, plain and
 * preloaded), bench-report.c (tables, JSON), stats.c (timing, percentiles),
 * shm-floor.c (raw shm ping-pong, shared with shm-pingpong). */
#ifndef BENCH_BENCH_H
#define BENCH_BENCH_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "bench/stats.h"

enum bench_test {
  T_PINGPONG = 1, /* request/response latency, one message each way */
  T_STREAM = 2,   /* one-way bandwidth */
  T_CONNRATE = 4, /* connect, 64 B request, 64 B reply, close */
  T_SHM_SPIN = 8, /* raw shm floor, spinning */
  T_SHM_FUTEX = 16, /* raw shm floor, futex sleep */
  T_SHM_STREAM = 32, /* raw shm stream floor: two copies through a ring, spinning */
};
#define T_IS_SHM(t) ((t) == T_SHM_SPIN || (t) == T_SHM_FUTEX || (t) == T_SHM_STREAM)
#define T_IS_RATE(t) ((t) == T_STREAM || (t) == T_SHM_STREAM)
#define T_NET_ALL (T_PINGPONG | T_STREAM | T_CONNRATE)
enum bench_fill { FILL_CONST = 0, FILL_RANDOM, FILL_TEXT };
#define BENCH_MAX_SIZES 16

struct bench_opts {
  /* where */
  const char *host;         /* client: server address (default 127.0.0.1) */
  const char *port;         /* client: server port; server: port to listen on ("0" = any) */
  const char *bind;         /* server: address to bind (default any, IPv4/IPv6) */
  /* what */
  int tests;                /* mask of enum bench_test */
  uint64_t sizes[BENCH_MAX_SIZES];  /* ping-pong message sizes */
  int nsizes;
  uint64_t msgs[BENCH_MAX_SIZES];   /* stream write sizes */
  int nmsgs;
  double time;              /* stream and connrate: seconds per test and side (all rounds) */
  double pp_time;           /* ping-pong: seconds per size and side (all rounds) */
  uint64_t iters;           /* ping-pong: fixed measured round trips per round (0 = by time) */
  uint64_t warmup_iters;    /* ping-pong warm-up: at least this many round trips ... */
  double warmup_time;       /* ... and at least this long (never more than 1 s), also stream */
  int conn_threads;         /* connrate: parallel client threads */
  int rounds;               /* compare: rounds per side (median reported) */
  int shm;                  /* compare: also run the raw shm floor: 1 at the first
                               ping-pong size, 2 (--floor-all) at every one */
  int framed;               /* client: len32be-framed protocol (bench-proto.h) */
  int fill;                 /* client: payload bytes, enum bench_fill */
  /* preloading (compare) */
  const char *lib;          /* libfabsock.so; NULL = none (plain vs plain) */
  const char *spin;         /* value for FABSOCK_SPIN_US on the preloaded side, or NULL */
  const char *hooks;        /* FABSOCK_HOOKS for side 1 only, or NULL */
  int base_lib;             /* side 0 preloads lib too (without hooks) instead of plain */
  const char *base_path;    /* --base PATH: side 0 preloads this library instead (old vs new) */
  int cpu_server, cpu_client; /* compare --cpus: pin each child, -1 = anywhere */
  /* output */
  const char *json;         /* file name, "-" for stdout, or NULL */
  int verbose;
  /* internal: compare-mode children */
  int result_fd;            /* client: write struct bench_result records here */
  int port_fd;              /* server: write the bound port (decimal line) here */
  int ctl_fd;               /* server: exit when this fd reports EOF */
  double run_time;          /* client child: this round's measuring time */
};

/* One measurement (one test, one size, one round, one side).  Written raw on
 * a pipe between a compare-mode child and its parent, which run the same
 * executable, so the layout needs no encoding. */
struct bench_result {
  int test;                 /* enum bench_test */
  int ok;
  uint64_t size;            /* message size in bytes */
  struct lat_stats lat;     /* T_PINGPONG, T_SHM_*: round trip statistics */
  uint64_t bytes;           /* T_STREAM: bytes counted by the receiver */
  uint64_t count;           /* T_CONNRATE: completed connections */
  double secs;              /* T_STREAM, T_CONNRATE: measured interval */
  double rate;              /* T_STREAM: GB/s (1e9 bytes/s); T_CONNRATE: connections/s */
  double rx_cpu;            /* T_STREAM: CPU seconds of the receiving thread meanwhile */
  char err[160];
};

/* bench-server.c, bench-client.c */
int bench_server(const struct bench_opts *o);      /* runs until stopped; exit status */
/* Runs one test with one size against o->host:o->port for `secs` seconds of
 * measurement (ping-pong: or o->iters round trips).  Fills r; returns 0 or -1. */
int bench_client_one(const struct bench_opts *o, int test, uint64_t size, double secs,
                     struct bench_result *r);

/* One (test, size) of a compare run: every round of both sides and the
 * median summary.  Side 0 is plain (or, for T_SHM_*, the raw floor), side 1
 * preloaded. */
#define BENCH_MAX_ROUNDS 32
struct bench_summary {
  int rounds, nok;          /* rounds run, rounds that succeeded */
  char err[160];            /* first failure */
  struct lat_stats lat;     /* per-field median over the successful rounds */
  double rate;              /* median GB/s or connections/s */
  double rx_core;           /* T_STREAM: median of bytes / receiver CPU s (GB/s per core) */
};
struct bench_item {
  int test;
  uint64_t size;
  struct bench_result r[2][BENCH_MAX_ROUNDS];
  struct bench_summary sum[2];
};

/* bench-compare.c */
int bench_lib_mapped(const char *path);
int bench_compare(const struct bench_opts *o, char **argv0);

/* bench-report.c */
void bench_summarize(struct bench_item *it, int side);
void bench_print_compare(FILE *f, const struct bench_opts *o, const struct bench_item *it, int n);
int bench_json_compare(const struct bench_opts *o, const struct bench_item *it, int n);
void bench_print_single(const struct bench_opts *o, const struct bench_result *r, int n);
int bench_json_single(const struct bench_opts *o, const struct bench_result *r, int n);
const char *bench_test_name(int test);
const char *bench_fill_name(int fill);
const char *bench_side_name(const struct bench_opts *o, int side);
const char *bench_fmt_size(uint64_t size, char *buf, size_t len);

#endif
