/* mtclient: multi-threaded echo client, each thread on its own connection(s).
 *
 *   mtclient -p port [-6] [-H host] [-t threads] [-n bytes] [-r repeats]
 *            [-c chunk] [-s seed] [-B] [-w holdfile]
 *
 * Each thread makes `repeats` sequential connections; on each it sends
 * `bytes` of a per-connection stream and verifies the echo byte for byte,
 * then shuts down its write side and expects a clean EOF.
 * -B: all threads connect first and meet at a barrier, so that all
 * connections are open at the same time (concurrency test).
 * -w: after the data of the last round, hold every connection open at
 * it_hold() so that the harness can inspect them (`fabsock stat`).
 * Prints "ok ..." and exits 0, or prints each failure and exits 1. */
#include "tests/progs/common.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int v6, port, threads = 1, repeats = 1, use_barrier;
static const char *host, *holdfile;
static uint64_t bytes = 1 << 20, seed = 1;
static size_t chunk = 65536;
static pthread_barrier_t barrier;
static int failures;

static void *worker(void *arg)
{
  long id = (long)arg;
  char err[256];
  for (int r = 0; r < repeats; r++) {
    int last = r == repeats - 1;
    int fd = it_connect(v6, host, port);
    if (fd < 0) {
      it_msg("thread %ld conn %d: connect: %s", id, r, it_errname(errno));
      __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
      if (use_barrier && r == 0)
        pthread_barrier_wait(&barrier); /* keep the others from waiting forever */
      if (holdfile && last) { /* match the two waits around it_hold() */
        if (pthread_barrier_wait(&barrier) == PTHREAD_BARRIER_SERIAL_THREAD)
          it_hold(holdfile);
        pthread_barrier_wait(&barrier);
      }
      continue;
    }
    if (use_barrier && r == 0)
      pthread_barrier_wait(&barrier);
    uint64_t s = seed * 1000003u + (uint64_t)id * 7919u + (uint64_t)r;
    int ok = it_echo_roundtrip(fd, bytes, s, chunk, err, sizeof err) == 0;
    if (holdfile && last) {
      if (pthread_barrier_wait(&barrier) == PTHREAD_BARRIER_SERIAL_THREAD)
        it_hold(holdfile);
      pthread_barrier_wait(&barrier);
    }
    if (ok)
      ok = it_echo_finish(fd, err, sizeof err) == 0;
    if (!ok) {
      it_msg("thread %ld conn %d: %s", id, r, err);
      __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
    }
    close(fd);
  }
  return NULL;
}

int main(int argc, char **argv)
{
  int opt;
  it_prog = "mtclient";
  while ((opt = getopt(argc, argv, "p:6H:t:n:r:c:s:Bw:")) != -1) {
    switch (opt) {
    case 'p': port = atoi(optarg); break;
    case '6': v6 = 1; break;
    case 'H': host = optarg; break;
    case 't': threads = atoi(optarg); break;
    case 'n': bytes = it_size(optarg); break;
    case 'r': repeats = atoi(optarg); break;
    case 'c': chunk = (size_t)it_size(optarg); break;
    case 's': seed = it_size(optarg); break;
    case 'B': use_barrier = 1; break;
    case 'w': holdfile = optarg; break;
    default: it_die(2, "usage: mtclient -p port [-6] [-H host] [-t n] [-n bytes] [-r repeats] [-c chunk] [-s seed] [-B] [-w holdfile]");
    }
  }
  if (!port || threads < 1 || repeats < 1 || !chunk)
    it_die(2, "need -p port, threads >= 1, repeats >= 1");
  signal(SIGPIPE, SIG_IGN);
  if (use_barrier || holdfile)
    pthread_barrier_init(&barrier, NULL, (unsigned)threads);

  pthread_t *tid = calloc((size_t)threads, sizeof *tid);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  uint64_t t0 = it_now_ns();
  for (long i = 0; i < threads; i++)
    if (pthread_create(&tid[i], &attr, worker, (void *)i) != 0)
      it_die(2, "pthread_create %ld failed", i);
  for (int i = 0; i < threads; i++)
    pthread_join(tid[i], NULL);
  double secs = (double)(it_now_ns() - t0) / 1e9;
  if (failures) {
    printf("FAIL %d of %d connections\n", failures, threads * repeats);
    return 1;
  }
  printf("ok threads=%d conns=%d bytes_each=%llu secs=%.2f\n", threads, threads * repeats,
         (unsigned long long)bytes, secs);
  return 0;
}
