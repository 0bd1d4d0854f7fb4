/* start-loop: what a preloaded library adds to a process start, against
 * the floor of preloading at all.
 *
 * usage: start-loop [-n N] [--json] SIDE... -- PROGRAM [ARG...]
 *   SIDE    "none" (no LD_PRELOAD) or a library's path; up to 8
 *   N       starts per side (default 1000)
 *
 * Runs PROGRAM N times for each side, the sides interleaved start by start
 * (none, A, B, none, A, B, ...) so that this machine's drift lands on each
 * alike.  Each start is posix_spawnp() to waitpid(), timed on
 * CLOCK_MONOTONIC; only the child's environment carries LD_PRELOAD (run this
 * program itself plain).  A side whose library the loader refused would
 * time the plain program: each library's first start runs PROGRAM with
 * LD_TRACE_LOADED_OBJECTS first, and a library missing from that list is
 * refused here (exit 2).  Prints p50, p99 and mean us per side and the
 * child's page faults per start (wait4's ru_minflt: they do not move with
 * this machine's noise, and at 5-20 us each in a VM they are most of what
 * a library adds), and with --json one line of JSON.  bench/start-cost.sh
 * runs it against an empty library (bench/libstart-floor.so: what LD_PRELOAD costs by itself) and
 * libfabsock. */
#define _GNU_SOURCE 1
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "stats.h"

#define MAX_SIDES 8

extern char **environ;

/* environ without LD_PRELOAD, then "LD_PRELOAD=lib" if lib, then NULL. */
static char **side_env(const char *lib)
{
  size_t n = 0;
  while (environ[n])
    n++;
  char **env = calloc(n + 2, sizeof *env);
  if (!env)
    return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
      env[k++] = environ[i];
  if (lib) {
    size_t len = strlen(lib) + sizeof "LD_PRELOAD=";
    if (!(env[k] = malloc(len)))
      return NULL;
    snprintf(env[k++], len, "LD_PRELOAD=%s", lib);
  }
  return env;
}

/* One start: ns from spawn to reap, its page faults added to *faults; 0
 * if it failed or exited non-zero. */
static uint64_t one_start(char **argv, char **env, posix_spawn_file_actions_t *fa, uint64_t *faults)
{
  pid_t pid;
  uint64_t t0 = bench_now_ns();
  if (posix_spawnp(&pid, argv[0], fa, NULL, argv, env) != 0)
    return 0;
  int st;
  struct rusage ru;
  while (wait4(pid, &st, 0, &ru) < 0)
    if (errno != EINTR)
      return 0;
  uint64_t t1 = bench_now_ns();
  *faults += (uint64_t)ru.ru_minflt + (uint64_t)ru.ru_majflt;
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? t1 - t0 : 0;
}

/* The loader maps lib into argv[0] (ld.so lists it under
 * LD_TRACE_LOADED_OBJECTS, "\tPATH (0x...)"; it only warns when it cannot
 * preload).  0 if it does, -1 if not, -2 if argv[0] could not be run. */
static int lib_loads(char **argv, char **env, const char *lib)
{
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0)
    return -2;
  size_t n = 0;
  while (env[n])
    n++;
  char **tenv = calloc(n + 2, sizeof *tenv);
  if (!tenv)
    return -2;
  memcpy(tenv, env, n * sizeof *tenv);
  tenv[n] = "LD_TRACE_LOADED_OBJECTS=1";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, tenv);
  posix_spawn_file_actions_destroy(&fa);
  free(tenv);
  close(p[1]);
  if (rc != 0) {
    close(p[0]);
    return -2;
  }
  /* Read to the end (a static program ignores the variable and runs). */
  char want[4200], buf[16384];
  snprintf(want, sizeof want, "\t%s (", lib);
  size_t got = 0;
  bool found = false;
  ssize_t r;
  while ((r = read(p[0], buf + got, sizeof buf - 1 - got)) != 0) {
    if (r < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    got += (size_t)r;
    buf[got] = 0;
    found = found || strstr(buf, want) != NULL;
    if (got == sizeof buf - 1)
      got = 0; /* past what ld.so prints: drained, not kept */
  }
  close(p[0]);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
    ;
  return found ? 0 : -1;
}

/* s as a JSON string's contents. */
static void json_str(const char *s)
{
  for (; *s; s++)
    if (*s == '"' || *s == '\\')
      printf("\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      printf("\\u%04x", *s);
    else
      putchar(*s);
}

int main(int argc, char **argv)
{
  long n = 1000;
  int json = 0, nsides = 0, i = 1;
  const char *sides[MAX_SIDES];
  for (; i < argc && strcmp(argv[i], "--"); i++) {
    if (!strcmp(argv[i], "-n") && i + 1 < argc)
      n = atol(argv[++i]);
    else if (!strcmp(argv[i], "--json"))
      json = 1;
    else if (argv[i][0] != '-' && nsides < MAX_SIDES)
      sides[nsides++] = argv[i];
    else
      goto usage;
  }
  if (i >= argc - 1 || nsides == 0 || n < 1)
    goto usage;
  char **prog = argv + i + 1;
  char **env[MAX_SIDES];
  uint64_t *ns[MAX_SIDES];
  for (int s = 0; s < nsides; s++) {
    const char *lib = strcmp(sides[s], "none") ? sides[s] : NULL;
    if (lib && access(lib, R_OK) != 0) {
      fprintf(stderr, "start-loop: library %s: %s\n", lib, strerror(errno));
      return 2;
    }
    if (!(env[s] = side_env(lib)) || !(ns[s] = calloc((size_t)n, sizeof *ns[s]))) {
      fprintf(stderr, "start-loop: out of memory\n");
      return 1;
    }
    int loads = lib ? lib_loads(prog, env[s], lib) : 0;
    if (loads == -2) {
      fprintf(stderr, "start-loop: cannot run %s\n", prog[0]);
      return 1;
    }
    if (loads < 0) {
      fprintf(stderr, "start-loop: the loader does not preload %s into %s\n", lib, prog[0]);
      return 2;
    }
  }
  /* The child's stdout and stderr go to /dev/null: a terminal's write is
   * not the start. */
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  uint64_t faults[MAX_SIDES] = { 0 };
  for (long k = 0; k < n; k++)
    for (int s = 0; s < nsides; s++)
      if (!(ns[s][k] = one_start(prog, env[s], &fa, &faults[s]))) {
        fprintf(stderr, "start-loop: %s failed or exited non-zero (side %s)\n", prog[0], sides[s]);
        return 1;
      }
  posix_spawn_file_actions_destroy(&fa);
  struct lat_stats st[MAX_SIDES];
  for (int s = 0; s < nsides; s++)
    bench_lat_stats(ns[s], (size_t)n, &st[s]);
  printf("%ld starts of %s per side, interleaved; us from spawn to exit\n", n, prog[0]);
  printf("%-50s %9s %9s %9s %12s %8s\n", "side", "p50", "p99", "mean", "p50 - first", "faults");
  for (int s = 0; s < nsides; s++)
    printf("%-50s %9.1f %9.1f %9.1f %+12.1f %8.2f\n", sides[s], st[s].p50_us, st[s].p99_us, st[s].mean_us,
           st[s].p50_us - st[0].p50_us, (double)faults[s] / (double)n);
  if (json) {
    printf("{\"program\": \"");
    json_str(prog[0]);
    printf("\", \"starts\": %ld, \"sides\": [", n);
    for (int s = 0; s < nsides; s++) {
      printf("%s{\"side\": \"", s ? ", " : "");
      json_str(sides[s]);
      printf("\", \"p50_us\": %.1f, \"p99_us\": %.1f, \"mean_us\": %.1f, \"faults\": %.2f}", st[s].p50_us, st[s].p99_us,
             st[s].mean_us, (double)faults[s] / (double)n);
    }
    printf("]}\n");
  }
  return 0;
usage:
  fprintf(stderr, "usage: start-loop [-n N] [--json] SIDE... -- PROGRAM [ARG...]  (SIDE: none or a library)\n");
  return 2;
}
