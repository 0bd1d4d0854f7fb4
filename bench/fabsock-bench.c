/* fabsock-bench: socket benchmarks for libfabsock, an unmodified application.
 *
 *   fabsock-bench server  [--port P] [--bind ADDR]
 *   fabsock-bench client  HOST[:PORT] [test options] [--json FILE]
 *   fabsock-bench compare [--lib PATH | --no-lib] [--hooks SPEC] [--base lib|PATH] [--rounds N]
 *                         [--busy] [test options]
 *
 * compare forks server/client pairs of this same executable on the local
 * machine, plain and with LD_PRELOAD=libfabsock.so (or, --base lib, the
 * library without and with FABSOCK_HOOKS=SPEC), in alternating rounds, and
 * prints both side by side with the speed-up (see bench-compare.c). */
#include "bench/bench.h"

#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef FABSOCK_BENCH_DEFAULT_LIB
#define FABSOCK_BENCH_DEFAULT_LIB ""
#endif

static void usage(FILE *f) {
  fprintf(f,
"usage: fabsock-bench server  [--port P] [--bind ADDR]\n"
"       fabsock-bench client  HOST[:PORT] [options]       (or --host H --port P)\n"
"       fabsock-bench compare [--lib PATH | --no-lib] [--hooks SPEC] [--base lib|PATH] [options]\n"
"\n"
"compare runs every test twice on this machine, plain TCP and with\n"
"LD_PRELOAD=PATH (--lib, else $FABSOCK_LIB%s%s), in alternating rounds,\n"
"and prints the median round of each with the speed-up.\n"
"\n"
"tests:\n"
"  --tests LIST        pingpong,stream,connrate (default all three)\n"
"  --sizes LIST        ping-pong message sizes (default 64,1k,16k,64k,1m)\n"
"  --msg LIST          stream write sizes (default 4k,64k,1m)\n"
"  --time S            stream and connrate: seconds per test and side (default 2)\n"
"  --pp-time S         ping-pong: seconds per size and side (default 1)\n"
"  --iters N           ping-pong: measured round trips per round instead of --pp-time\n"
"  --warmup N          ping-pong warm-up round trips (default 1000) ...\n"
"  --warmup-time S     ... and warm-up seconds, ping-pong and stream (default 0.3, max 1)\n"
"  --threads N         connrate: client threads (default 1)\n"
"  --fill KIND         message payload: const (default), random, text (a-z)\n"
"  --framed            every message, hello and reply is a len32be frame\n"
"                      (for FABSOCK_HOOKS=frame:header=len32be)\n"
"compare:\n"
"  --lib PATH          libfabsock.so to preload\n"
"  --no-lib            preload nothing (plain vs plain: checks the harness)\n"
"  --hooks SPEC        the preloaded side runs with FABSOCK_HOOKS=SPEC\n"
"  --base plain|lib|PATH  the other side: plain TCP (default), the same\n"
"                      preloaded library without --hooks (hook cost), or\n"
"                      another build of it (a PATH with a '/': old vs new)\n"
"  --rounds N          rounds per side, median reported (default 3)\n"
"  --busy              preloaded side(s): FABSOCK_SPIN_US=busy (busy polling)\n"
"  --spin US           preloaded side(s): FABSOCK_SPIN_US=US\n"
"  --no-shm            skip the raw shared-memory floors (ping-pong and stream)\n"
"  --floor-all         the raw floor at every ping-pong size up to 1m\n"
"                      (default: the first size only)\n"
"  --cpus S,C          run every server on CPU S, every client on CPU C\n"
"  (other FABSOCK_* variables in the environment reach the preloaded side)\n"
"output:\n"
"  --json FILE         all numbers as JSON (\"-\" = stdout, the table goes to stderr)\n"
"  -v, --verbose       every round's numbers on stderr\n"
"sizes take k, m, g suffixes (powers of 1024).\n",
          FABSOCK_BENCH_DEFAULT_LIB[0] ? ", else " : "", FABSOCK_BENCH_DEFAULT_LIB);
}

static int parse_size(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || v <= 0) return -1;
  switch (*end) {
  case 'k': case 'K': v *= 1024; end++; break;
  case 'm': case 'M': v *= 1024 * 1024; end++; break;
  case 'g': case 'G': v *= 1024.0 * 1024 * 1024; end++; break;
  }
  if (*end == 'i' || *end == 'B') end++;
  if (*end == 'B') end++;
  if (*end || v < 1 || v > (double)(1ull << 30)) return -1;
  *out = (uint64_t)v;
  return 0;
}

static int parse_list(const char *s, uint64_t *out, int *n) {
  char buf[256], *save = NULL;
  snprintf(buf, sizeof buf, "%s", s);
  *n = 0;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (*n == BENCH_MAX_SIZES || parse_size(t, &out[*n]) < 0) return -1;
    (*n)++;
  }
  return *n ? 0 : -1;
}

static int parse_tests(const char *s) {
  char buf[128], *save = NULL;
  int mask = 0;
  snprintf(buf, sizeof buf, "%s", s);
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (!strcmp(t, "pingpong") || !strcmp(t, "latency")) mask |= T_PINGPONG;
    else if (!strcmp(t, "stream") || !strcmp(t, "bandwidth")) mask |= T_STREAM;
    else if (!strcmp(t, "connrate") || !strcmp(t, "conn")) mask |= T_CONNRATE;
    else if (!strcmp(t, "all")) mask |= T_NET_ALL;
    else return -1;
  }
  return mask;
}

static int parse_secs(const char *s, double *out, double min) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || *end || !(v >= min) || v > 3600) return -1;
  *out = v;
  return 0;
}

/* A count (--iters, --warmup): a whole number, min to 1e9 (parse_secs
 * capped them at 3600). */
static int parse_count(const char *s, uint64_t *out, uint64_t min) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s || *end || *s == '-' || errno || v < min || v > 1000000000ull) return -1;
  *out = v;
  return 0;
}

/* HOST:PORT, [V6]:PORT, or HOST alone. */
static int parse_hostport(char *s, struct bench_opts *o) {
  char *colon;
  if (s[0] == '[') {
    char *close = strchr(s, ']');
    if (!close) return -1;
    *close = 0;
    o->host = s + 1;
    if (close[1] == ':') o->port = close + 2;
    else if (close[1]) return -1;
    return 0;
  }
  colon = strrchr(s, ':');
  if (colon && colon == strchr(s, ':')) { /* exactly one colon: host:port */
    *colon = 0;
    o->port = colon + 1;
  }
  o->host = s;
  return 0;
}

enum {
  O_TESTS = 256, O_SIZES, O_MSG, O_TIME, O_PPTIME, O_ITERS, O_WARMUP, O_WARMUPT, O_THREADS,
  O_LIB, O_NOLIB, O_ROUNDS, O_BUSY, O_SPIN, O_NOSHM, O_JSON, O_HOST, O_PORT, O_BIND,
  O_RESFD, O_PORTFD, O_CTLFD, O_RUNTIME, O_FILL, O_FRAMED, O_HOOKS, O_BASE, O_CPUS, O_FLOORALL,
};

int main(int argc, char **argv) {
  static const struct option lo[] = {
      {"tests", required_argument, 0, O_TESTS}, {"sizes", required_argument, 0, O_SIZES},
      {"msg", required_argument, 0, O_MSG}, {"time", required_argument, 0, O_TIME},
      {"pp-time", required_argument, 0, O_PPTIME}, {"iters", required_argument, 0, O_ITERS},
      {"warmup", required_argument, 0, O_WARMUP}, {"warmup-time", required_argument, 0, O_WARMUPT},
      {"threads", required_argument, 0, O_THREADS}, {"lib", required_argument, 0, O_LIB},
      {"no-lib", no_argument, 0, O_NOLIB}, {"rounds", required_argument, 0, O_ROUNDS},
      {"busy", no_argument, 0, O_BUSY}, {"spin", required_argument, 0, O_SPIN},
      {"no-shm", no_argument, 0, O_NOSHM}, {"json", required_argument, 0, O_JSON},
      {"host", required_argument, 0, O_HOST}, {"port", required_argument, 0, O_PORT},
      {"bind", required_argument, 0, O_BIND}, {"verbose", no_argument, 0, 'v'},
      {"help", no_argument, 0, 'h'}, {"fill", required_argument, 0, O_FILL},
      {"framed", no_argument, 0, O_FRAMED}, {"hooks", required_argument, 0, O_HOOKS},
      {"base", required_argument, 0, O_BASE}, {"cpus", required_argument, 0, O_CPUS},
      {"floor-all", no_argument, 0, O_FLOORALL},
      /* compare mode's children */
      {"result-fd", required_argument, 0, O_RESFD}, {"port-fd", required_argument, 0, O_PORTFD},
      {"ctl-fd", required_argument, 0, O_CTLFD}, {"run-time", required_argument, 0, O_RUNTIME},
      {0, 0, 0, 0}};
  struct bench_opts o = {
      .tests = T_NET_ALL, .sizes = {64, 1024, 16384, 65536, 1048576}, .nsizes = 5,
      .msgs = {4096, 65536, 1048576}, .nmsgs = 3, .time = 2, .pp_time = 1,
      .warmup_iters = 1000, .warmup_time = 0.3, .conn_threads = 1, .rounds = 3, .shm = 1,
      .result_fd = -1, .port_fd = -1, .ctl_fd = -1, .cpu_server = -1, .cpu_client = -1};
  int no_lib = 0;

  if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const char *mode = argv[1];
  /* compare mode's children check that the library really got preloaded:
   * ld.so only warns when it cannot preload, and the run would be plain. */
  const char *expect = getenv("FSBENCH_EXPECT_LIB");
  if (expect && *expect && !bench_lib_mapped(expect)) {
    fprintf(stderr, "fabsock-bench: %s is not loaded in this process (LD_PRELOAD failed?)\n",
            expect);
    return 3;
  }
  if (!strcmp(mode, "probe")) return 0; /* compare's preflight of the above */
  if (strcmp(mode, "server") && strcmp(mode, "client") && strcmp(mode, "compare")) {
    fprintf(stderr, "fabsock-bench: unknown mode '%s' (server, client or compare)\n", mode);
    return 2;
  }
  optind = 2;
  int c;
  while ((c = getopt_long(argc, argv, "vh", lo, NULL)) != -1) {
    int bad = 0;
    switch (c) {
    case O_TESTS: bad = (o.tests = parse_tests(optarg)) <= 0; break;
    case O_SIZES: bad = parse_list(optarg, o.sizes, &o.nsizes); break;
    case O_MSG: bad = parse_list(optarg, o.msgs, &o.nmsgs); break;
    case O_TIME: bad = parse_secs(optarg, &o.time, 0.01); break;
    case O_PPTIME: bad = parse_secs(optarg, &o.pp_time, 0.01); break;
    case O_RUNTIME: bad = parse_secs(optarg, &o.run_time, 0.001); break;
    case O_WARMUPT: bad = parse_secs(optarg, &o.warmup_time, 0); break;
    case O_ITERS: bad = parse_count(optarg, &o.iters, 1); break;
    case O_WARMUP: bad = parse_count(optarg, &o.warmup_iters, 0); break;
    case O_THREADS:
      o.conn_threads = atoi(optarg);
      bad = o.conn_threads < 1 || o.conn_threads > 256;
      break;
    case O_ROUNDS: o.rounds = atoi(optarg); bad = o.rounds < 1 || o.rounds > 32; break;
    case O_LIB: o.lib = optarg; break;
    case O_NOLIB: no_lib = 1; break;
    case O_BUSY: o.spin = "busy"; break;
    case O_SPIN: o.spin = optarg; break;
    case O_NOSHM: o.shm = 0; break;
    case O_FLOORALL: o.shm = 2; break;
    case O_FILL:
      if (!strcmp(optarg, "const")) o.fill = FILL_CONST;
      else if (!strcmp(optarg, "random")) o.fill = FILL_RANDOM;
      else if (!strcmp(optarg, "text")) o.fill = FILL_TEXT;
      else bad = 1;
      break;
    case O_FRAMED: o.framed = 1; break;
    case O_HOOKS: o.hooks = optarg; break;
    case O_CPUS: {
      char *end;
      long a = strtol(optarg, &end, 10), b = -1;
      if (*end == ',') b = strtol(end + 1, &end, 10);
      bad = *end || a < 0 || b < 0 || a >= CPU_SETSIZE || b >= CPU_SETSIZE;
      o.cpu_server = (int)a;
      o.cpu_client = (int)b;
      break;
    }
    case O_BASE:
      if (!strcmp(optarg, "plain")) o.base_lib = 0;
      else if (!strcmp(optarg, "lib")) o.base_lib = 1;
      else if (strchr(optarg, '/')) o.base_lib = 1, o.base_path = optarg; /* another library */
      else bad = 1;
      break;
    case O_JSON: o.json = optarg; break;
    case O_HOST: o.host = optarg; break;
    case O_PORT: o.port = optarg; break;
    case O_BIND: o.bind = optarg; break;
    case O_RESFD: o.result_fd = atoi(optarg); break;
    case O_PORTFD: o.port_fd = atoi(optarg); break;
    case O_CTLFD: o.ctl_fd = atoi(optarg); break;
    case 'v': o.verbose = 1; break;
    case 'h': usage(stdout); return 0;
    default: return 2;
    }
    if (bad) {
      const char *name = "?";
      for (const struct option *l = lo; l->name; l++)
        if (l->val == c) name = l->name;
      fprintf(stderr, "fabsock-bench: bad value for --%s: '%s'\n", name, optarg);
      return 2;
    }
  }
  if (!strcmp(mode, "client") && optind < argc) {
    if (parse_hostport(argv[optind++], &o) < 0) {
      fprintf(stderr, "fabsock-bench: bad HOST:PORT\n");
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "fabsock-bench: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  if (o.tests & T_STREAM)
    for (int i = 0; i < o.nmsgs; i++)
      if (o.msgs[i] < 16) {
        fprintf(stderr, "fabsock-bench: stream messages must be at least 16 bytes\n");
        return 2;
      }
  if (o.framed && (o.tests & T_PINGPONG))
    for (int i = 0; i < o.nsizes; i++)
      if (o.sizes[i] < 16) {
        fprintf(stderr, "fabsock-bench: framed ping-pong messages must be at least 16 bytes\n");
        return 2;
      }

  if (!strcmp(mode, "server")) {
    if (!o.port) o.port = "7471";
    return bench_server(&o);
  }

  if (!strcmp(mode, "client")) {
    if (!o.port) o.port = "7471";
    struct bench_result res[3 * BENCH_MAX_SIZES];
    int n = 0, failed = 0;
    for (int t = T_PINGPONG; t <= T_CONNRATE; t <<= 1) {
      if (!(o.tests & t)) continue;
      const uint64_t *sz = t == T_PINGPONG ? o.sizes : t == T_STREAM ? o.msgs : (uint64_t[]){64};
      int ns = t == T_PINGPONG ? o.nsizes : t == T_STREAM ? o.nmsgs : 1;
      double secs = o.run_time > 0 ? o.run_time : t == T_PINGPONG ? o.pp_time : o.time;
      for (int i = 0; i < ns; i++, n++) {
        if (bench_client_one(&o, t, sz[i], secs, &res[n]) < 0) {
          failed = 1;
          if (o.result_fd < 0)
            fprintf(stderr, "fabsock-bench: %s %llu: %s\n", bench_test_name(t),
                    (unsigned long long)sz[i], res[n].err);
        }
        if (o.result_fd >= 0) {
          ssize_t w = write(o.result_fd, &res[n], sizeof res[n]);
          if (w != (ssize_t)sizeof res[n]) return 1;
        }
      }
    }
    if (o.result_fd >= 0) return failed;
    bench_print_single(&o, res, n);
    if (o.json && bench_json_single(&o, res, n) < 0) return 1;
    return failed;
  }

  /* compare */
  if (no_lib) {
    if (o.hooks || o.base_lib) {
      fprintf(stderr, "fabsock-bench: --hooks and --base lib need a library (not --no-lib)\n");
      return 2;
    }
    o.lib = NULL;
  } else {
    if (!o.lib) o.lib = getenv("FABSOCK_LIB");
    if ((!o.lib || !*o.lib) && FABSOCK_BENCH_DEFAULT_LIB[0] &&
        access(FABSOCK_BENCH_DEFAULT_LIB, R_OK) == 0)
      o.lib = FABSOCK_BENCH_DEFAULT_LIB;
    if (!o.lib || !*o.lib) {
      fprintf(stderr, "fabsock-bench: no library to preload: give --lib PATH or set "
                      "FABSOCK_LIB (or --no-lib to compare plain with plain)\n");
      return 2;
    }
    if (access(o.lib, R_OK) != 0) {
      fprintf(stderr, "fabsock-bench: library %s: %s\n", o.lib, strerror(errno));
      return 2;
    }
  }
  return bench_compare(&o, argv);
}
