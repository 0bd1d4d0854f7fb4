/* fabsock-bench compare: plain TCP against LD_PRELOAD=libfabsock.so, same
 * machine, same sizes, one invocation.
 *
 * For every (test, size) and every round, a server and a client are started
 * by re-executing this program (/proc/self/exe), both plain or both
 * preloaded.  Rounds alternate the order (plain first, then preloaded first,
 * ...) so slow drift hurts both sides alike; the median round is reported.
 * Children talk to us over pipes: the server writes its port on --port-fd
 * and exits when --ctl-fd reports EOF; the client writes struct bench_result
 * records on --result-fd.  Every child is bounded by a deadline and killed
 * if it hangs, so a broken library fails a round instead of the run. */
#include "bench/bench.h"
#include "bench/shm-floor.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static char self_exe[PATH_MAX];
static char lib_real[PATH_MAX], base_real[PATH_MAX];
static char **child_env[2];

int bench_lib_mapped(const char *path) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[PATH_MAX + 128];
  int found = 0;
  if (!f) return 1; /* cannot tell: do not refuse to run */
  size_t len = strlen(path);
  while (!found && fgets(line, sizeof line, f)) {
    char *slash = strchr(line, '/');
    found = slash && !strncmp(slash, path, len) && (slash[len] == '\n' || slash[len] == 0);
  }
  fclose(f);
  return found;
}

/* The environment of a side 0 (plain, or with --base lib preloaded without
 * --hooks) or side 1 (preloaded) child: ours without LD_PRELOAD, plus,
 * preloaded, LD_PRELOAD=lib and FABSOCK_SPIN_US, and on side 1
 * FABSOCK_HOOKS=--hooks.  Other FABSOCK_* variables pass through (a plain
 * child ignores them). */
static char **make_env(const struct bench_opts *o, int side) {
  size_t n = 0;
  int preload = o->lib && (side == 1 || o->base_lib);
  while (environ[n]) n++;
  char **env = calloc(n + 5, sizeof *env);
  size_t k = 0;
  if (!env) return NULL;
  for (size_t i = 0; i < n; i++) {
    if (!strncmp(environ[i], "LD_PRELOAD=", 11) || !strncmp(environ[i], "FSBENCH_EXPECT_LIB=", 19))
      continue;
    if (preload && o->spin && !strncmp(environ[i], "FABSOCK_SPIN_US=", 16)) continue;
    if (o->hooks && !strncmp(environ[i], "FABSOCK_HOOKS=", 14)) continue;
    env[k++] = environ[i];
  }
  if (side == 1 && o->hooks) {
    char *h = malloc(strlen(o->hooks) + 16);
    if (!h) return NULL;
    sprintf(h, "FABSOCK_HOOKS=%s", o->hooks);
    env[k++] = h;
  }
  if (preload) {
    const char *path = side == 0 && o->base_path ? base_real : lib_real;
    char *a = malloc(strlen(path) + 32), *b = malloc(strlen(path) + 32);
    if (!a || !b) return NULL;
    sprintf(a, "LD_PRELOAD=%s", path);
    sprintf(b, "FSBENCH_EXPECT_LIB=%s", path);
    env[k++] = a;
    env[k++] = b;
    if (o->spin) {
      char *c = malloc(strlen(o->spin) + 20);
      if (!c) return NULL;
      sprintf(c, "FABSOCK_SPIN_US=%s", o->spin);
      env[k++] = c;
    }
  }
  env[k] = NULL;
  return env;
}

/* fork + execve of ourselves; keep[] are our pipe ends the child inherits
 * (they were made O_CLOEXEC so that no other child inherits them).  cpu >= 0:
 * the child and all its threads run on that CPU only (--cpus). */
static pid_t spawn(char *const argv[], int side, const int *keep, int nkeep, int cpu) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid != 0) return pid;
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) < 0) {
      fprintf(stderr, "fabsock-bench: cannot run on CPU %d: %s\n", cpu, strerror(errno));
      _exit(127);
    }
  }
  for (int i = 0; i < nkeep; i++) fcntl(keep[i], F_SETFD, 0);
  execve(self_exe, argv, child_env[side]);
  fprintf(stderr, "fabsock-bench: exec %s: %s\n", self_exe, strerror(errno));
  _exit(127);
}

static double now_s(void) { return bench_now_ns() / 1e9; }

/* waitpid with a deadline; SIGKILL when it passes.  Returns the status. */
static int reap(pid_t pid, double deadline, int *killed) {
  int st = 0;
  *killed = 0;
  for (;;) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return st;
    if (r < 0 && errno != EINTR) return 0;
    if (now_s() > deadline && !*killed) {
      kill(pid, SIGKILL);
      *killed = 1;
      waitpid(pid, &st, 0);
      return st;
    }
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
}

/* Read up to len bytes before the deadline; returns bytes read (EOF or
 * timeout stop early). */
static size_t read_until(int fd, void *buf, size_t len, double deadline, int *timed_out) {
  size_t got = 0;
  *timed_out = 0;
  while (got < len) {
    double left = deadline - now_s();
    if (left <= 0) {
      *timed_out = 1;
      break;
    }
    struct pollfd p = {fd, POLLIN, 0};
    int n = poll(&p, 1, (int)(left * 1000) + 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    ssize_t r = read(fd, (char *)buf + got, len - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  return got;
}

static void describe_status(char *buf, size_t len, const char *who, int st, int killed) {
  if (killed) snprintf(buf, len, "%s hung and was killed", who);
  else if (WIFSIGNALED(st)) snprintf(buf, len, "%s killed by signal %d (%s)", who,
                                     WTERMSIG(st), strsignal(WTERMSIG(st)));
  else snprintf(buf, len, "%s exited with status %d", who, WEXITSTATUS(st));
}

static double run_secs(const struct bench_opts *o, int test) {
  return (test == T_PINGPONG ? o->pp_time : o->time) / o->rounds;
}

/* One round of one network test on one side.  Fills *r (r->ok tells). */
static void net_round(const struct bench_opts *o, int test, uint64_t size, int side,
                      struct bench_result *r) {
  int pport[2] = {-1, -1}, pctl[2] = {-1, -1}, pres[2] = {-1, -1};
  pid_t srv = -1, cli = -1;
  char a_port_fd[16], a_ctl_fd[16], a_res_fd[16], a_port[16] = "", a_size[32], a_time[32],
      a_warm[32], a_warmt[32], a_iters[32], a_thr[16];
  const char *host = o->host ? o->host : "127.0.0.1";
  memset(r, 0, sizeof *r);
  r->test = test;
  r->size = size;
  if (pipe2(pport, O_CLOEXEC) || pipe2(pctl, O_CLOEXEC) || pipe2(pres, O_CLOEXEC)) {
    snprintf(r->err, sizeof r->err, "pipe: %s", strerror(errno));
    goto out;
  }
  snprintf(a_port_fd, sizeof a_port_fd, "%d", pport[1]);
  snprintf(a_ctl_fd, sizeof a_ctl_fd, "%d", pctl[0]);
  char *sargv[] = {self_exe, "server", "--bind", (char *)host, "--port", "0", "--port-fd",
                   a_port_fd, "--ctl-fd", a_ctl_fd, o->verbose ? "-v" : NULL, NULL};
  int skeep[] = {pport[1], pctl[0]};
  srv = spawn(sargv, side, skeep, 2, o->cpu_server);
  close(pport[1]);
  close(pctl[0]);
  pport[1] = pctl[0] = -1;
  if (srv < 0) {
    snprintf(r->err, sizeof r->err, "fork: %s", strerror(errno));
    goto out;
  }
  int to;
  size_t got = read_until(pport[0], a_port, sizeof a_port - 1, now_s() + 20, &to);
  a_port[got] = 0;
  if (!got || !strchr(a_port, '\n')) {
    snprintf(r->err, sizeof r->err, "server did not start%s", to ? " (timeout)" : "");
    goto out;
  }
  *strchr(a_port, '\n') = 0;

  double secs = run_secs(o, test);
  snprintf(a_res_fd, sizeof a_res_fd, "%d", pres[1]);
  snprintf(a_size, sizeof a_size, "%llu", (unsigned long long)size);
  snprintf(a_time, sizeof a_time, "%.6f", secs);
  snprintf(a_warm, sizeof a_warm, "%llu", (unsigned long long)o->warmup_iters);
  snprintf(a_warmt, sizeof a_warmt, "%.6f", o->warmup_time);
  snprintf(a_iters, sizeof a_iters, "%llu", (unsigned long long)o->iters);
  snprintf(a_thr, sizeof a_thr, "%d", o->conn_threads);
  char *cargv[28] = {self_exe, "client", "--host", (char *)host, "--port", a_port,
                     "--tests", (char *)bench_test_name(test),
                     test == T_STREAM ? "--msg" : "--sizes", a_size, "--run-time", a_time,
                     "--warmup", a_warm, "--warmup-time", a_warmt, "--threads", a_thr,
                     "--result-fd", a_res_fd, "--fill", (char *)bench_fill_name(o->fill), NULL};
  int ca = 22;
  if (o->framed) cargv[ca++] = "--framed";
  if (o->iters) {
    cargv[ca++] = "--iters";
    cargv[ca++] = a_iters;
  }
  cargv[ca] = NULL;
  int ckeep[] = {pres[1]};
  cli = spawn(cargv, side, ckeep, 1, o->cpu_client);
  close(pres[1]);
  pres[1] = -1;
  if (cli < 0) {
    snprintf(r->err, sizeof r->err, "fork: %s", strerror(errno));
    goto out;
  }
  /* ping-pong may run to 4x its time (slow sides still get 1000 samples) */
  double deadline = now_s() + 10 + 1 + 5 * secs;
  struct bench_result tmp;
  got = read_until(pres[0], &tmp, sizeof tmp, deadline, &to);
  int killed, st = reap(cli, to ? 0 : deadline, &killed);
  cli = -1;
  if (got == sizeof tmp) {
    *r = tmp;
    if (!r->ok && !r->err[0]) snprintf(r->err, sizeof r->err, "client failed");
  } else {
    describe_status(r->err, sizeof r->err, "client", st, killed || to);
  }
out:
  if (cli > 0) {
    kill(cli, SIGKILL);
    waitpid(cli, NULL, 0);
  }
  if (pctl[1] >= 0) close(pctl[1]); /* the server's signal to exit */
  if (srv > 0) {
    int skilled, sst = reap(srv, now_s() + 10, &skilled);
    if (skilled || !WIFEXITED(sst) || WEXITSTATUS(sst) != 0) {
      char why[96];
      describe_status(why, sizeof why, "server", sst, skilled);
      if (r->ok) snprintf(r->err, sizeof r->err, "%s", why);
      else { /* the client's complaint is often just the echo of the server's death */
        size_t len = strlen(r->err);
        snprintf(r->err + len, sizeof r->err - len, "; %s", why);
      }
      r->ok = 0;
    }
  }
  for (int i = 0; i < 2; i++) {
    if (pport[i] >= 0) close(pport[i]);
    if (pres[i] >= 0) close(pres[i]);
    if (i == 0 && pctl[0] >= 0) close(pctl[0]);
  }
}

static void shm_round(const struct bench_opts *o, int test, uint64_t size, struct bench_result *r) {
  struct shm_floor_opts so = {.size = (size_t)size, .futex = test == T_SHM_FUTEX,
                              .max_ns = 500000000u, .cpu_a = -1, .cpu_b = -1};
  so.iters = so.futex ? 10000 : 100000;
  so.warmup = so.iters / 10;
  memset(r, 0, sizeof *r);
  r->test = test;
  r->size = size;
  if (test == T_SHM_STREAM) /* on the CPUs the stream's server and client get */
    r->ok = shm_floor_stream((size_t)size, shm_floor_stream_ring((size_t)size), o->time, o->cpu_server,
                             o->cpu_client, &r->rate, r->err, sizeof r->err) == 0;
  else
    r->ok = shm_floor_run(&so, &r->lat, r->err, sizeof r->err) == 0;
}

static void verbose_round(const struct bench_result *r, int side, int round) {
  char sz[32];
  fprintf(stderr, "    round %d %-7s %s %s: ", round + 1, side ? "fabsock" : "plain",
          bench_test_name(r->test), bench_fmt_size(r->size, sz, sizeof sz));
  if (!r->ok) fprintf(stderr, "FAILED: %s\n", r->err);
  else if (T_IS_RATE(r->test)) fprintf(stderr, "%.3f GB/s\n", r->rate);
  else if (r->test == T_CONNRATE) fprintf(stderr, "%.0f conn/s\n", r->rate);
  else fprintf(stderr, "p50 %.2f p99 %.2f mean %.2f min %.2f us (%llu)\n", r->lat.p50_us,
               r->lat.p99_us, r->lat.mean_us, r->lat.min_us, (unsigned long long)r->lat.n);
}

int bench_compare(const struct bench_opts *o, char **argv) {
  static struct bench_item items[6 * BENCH_MAX_SIZES];
  int n = 0, failed = 0;
  ssize_t l = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
  if (l <= 0) {
    fprintf(stderr, "fabsock-bench: cannot find my own executable\n");
    return 2;
  }
  self_exe[l] = 0;
  if (o->lib && !realpath(o->lib, lib_real)) {
    fprintf(stderr, "fabsock-bench: library %s: %s\n", o->lib, strerror(errno));
    return 2;
  }
  if (o->base_path && !realpath(o->base_path, base_real)) {
    fprintf(stderr, "fabsock-bench: library %s: %s\n", o->base_path, strerror(errno));
    return 2;
  }
  const char *pre = getenv("LD_PRELOAD");
  if (pre && *pre)
    fprintf(stderr, "fabsock-bench: note: ignoring LD_PRELOAD=%s for the children\n", pre);
  if (!(child_env[0] = make_env(o, 0)) || !(child_env[1] = make_env(o, 1))) return 2;

  if (o->lib) { /* does the library preload at all? */
    char *pargv[] = {self_exe, "probe", NULL};
    pid_t p = spawn(pargv, 1, NULL, 0, -1);
    int killed, st = p > 0 ? reap(p, now_s() + 20, &killed) : 0;
    if (p < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      char why[128];
      describe_status(why, sizeof why, "a process preloading it", st, p > 0 && killed);
      fprintf(stderr, "fabsock-bench: cannot preload %s: %s\n", lib_real, why);
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);

  /* the list of measurements */
  for (int i = 0; o->shm && (o->tests & T_PINGPONG) && i < (o->shm == 2 ? o->nsizes : 1); i++) {
    if (i > 0 && o->sizes[i] > SHM_FLOOR_MAX_SIZE)
      continue; /* --floor-all: the floor's own limit */
    uint64_t floor_size = o->sizes[i] > SHM_FLOOR_MAX_SIZE ? SHM_FLOOR_MAX_SIZE : o->sizes[i];
    items[n++] = (struct bench_item){.test = T_SHM_SPIN, .size = floor_size};
    items[n++] = (struct bench_item){.test = T_SHM_FUTEX, .size = floor_size};
  }
  for (int t = T_PINGPONG; t <= T_CONNRATE; t <<= 1) {
    if (!(o->tests & t)) continue;
    const uint64_t *sz = t == T_PINGPONG ? o->sizes : o->msgs;
    int ns = t == T_PINGPONG ? o->nsizes : t == T_STREAM ? o->nmsgs : 1;
    for (int i = 0; i < ns; i++) {
      /* The stream floor right before its stream: this machine's speed drifts. */
      if (t == T_STREAM && o->shm && shm_floor_stream_ring(sz[i]) >= sz[i])
        items[n++] = (struct bench_item){.test = T_SHM_STREAM, .size = sz[i]};
      items[n++] = (struct bench_item){.test = t, .size = t == T_CONNRATE ? 64 : sz[i]};
    }
  }

  fprintf(stderr, "fabsock-bench compare: %s%s%s vs %s, %d round%s each, %s\n",
          o->lib ? lib_real : "plain (--no-lib)", o->hooks ? " with FABSOCK_HOOKS=" : "",
          o->hooks ? o->hooks : "", o->base_path ? base_real : o->base_lib ? "the same without hooks" : "plain TCP",
          o->rounds, o->rounds > 1 ? "s" : "", o->host ? o->host : "127.0.0.1");
  double t_start = now_s();
  for (int i = 0; i < n; i++) {
    struct bench_item *it = &items[i];
    int is_shm = T_IS_SHM(it->test);
    char sz[32];
    double t_item = now_s();
    /* A stream floor runs its rounds between those of the stream after it
     * (its speed is compared with that stream's, and this machine's drifts);
     * that stream has then nothing left to run. */
    struct bench_item *with = it->test == T_SHM_STREAM && i + 1 < n && items[i + 1].test == T_STREAM &&
                                      items[i + 1].size == it->size ? &items[i + 1] : NULL;
    int ran = i > 0 && items[i - 1].test == T_SHM_STREAM && it->test == T_STREAM && items[i - 1].size == it->size;
    struct bench_item *net = with ? with : is_shm ? NULL : it;
    for (int round = 0; round < o->rounds && !ran; round++) {
      if (is_shm) {
        shm_round(o, it->test, it->size, &it->r[0][round]);
        if (o->verbose) verbose_round(&it->r[0][round], 0, round);
      }
      for (int k = 0; net && k < 2; k++) {
        int side = (round % 2) ? 1 - k : k; /* ABBA: plain first on even rounds */
        struct bench_result *r = &net->r[side][round];
        net_round(o, net->test, net->size, side, r);
        if (o->verbose) verbose_round(r, side, round);
      }
    }
    for (int side = 0; side < 2; side++) {
      if (is_shm && side == 1) continue;
      it->sum[side].rounds = o->rounds;
      bench_summarize(it, side);
      if (it->sum[side].nok < o->rounds) failed = 1;
    }
    /* one progress line per measurement */
    fprintf(stderr, "  [%2d/%d] %-9s %-8s", i + 1, n, bench_test_name(it->test),
            bench_fmt_size(it->size, sz, sizeof sz));
    for (int side = 0; side < (is_shm ? 1 : 2); side++) {
      const struct bench_summary *s = &it->sum[side];
      const char *who = is_shm ? "raw" : bench_side_name(o, side);
      if (s->nok < s->rounds) fprintf(stderr, "  %s FAILED (%s)", who, s->err);
      else if (T_IS_RATE(it->test)) fprintf(stderr, "  %s %.3f GB/s", who, s->rate);
      else if (it->test == T_CONNRATE) fprintf(stderr, "  %s %.0f conn/s", who, s->rate);
      else fprintf(stderr, "  %s p50 %.2f us", who, s->lat.p50_us);
    }
    fprintf(stderr, "  (%.1f s)\n", now_s() - t_item);
  }
  fprintf(stderr, "fabsock-bench compare: %.1f s\n", now_s() - t_start);

  int json_stdout = o->json && !strcmp(o->json, "-");
  bench_print_compare(json_stdout ? stderr : stdout, o, items, n);
  if (o->json && bench_json_compare(o, items, n) < 0) failed = 1;
  (void)argv;
  return failed;
}
