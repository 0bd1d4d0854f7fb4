/* fork-loop: what one fork costs a process that holds a TCP socket (the
 * library's tables exist then), as a fork-per-connection server pays it.
 *
 * usage: fork-loop [N]   forks N children (default 1000) one after the
 * other; each exits at once with _exit (no destructors: only the fork
 * itself and the library's fork handlers are timed); prints the mean us
 * per fork+exit+wait on one line.  A plain program: bench/fork-cost.sh runs
 * it with and without LD_PRELOAD. */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
  int n = argc > 1 ? atoi(argv[1]) : 1000;
  if (n <= 0) {
    fprintf(stderr, "usage: fork-loop [N]\n");
    return 2;
  }
  int s = socket(AF_INET, SOCK_STREAM, 0); /* tracked: the library's tables are made */
  if (s < 0) {
    perror("socket");
    return 1;
  }
  double t0 = now_us();
  for (int i = 0; i < n; i++) {
    pid_t p = fork();
    if (p < 0) {
      perror("fork");
      return 1;
    }
    if (p == 0)
      _exit(0);
    if (waitpid(p, NULL, 0) != p) {
      perror("waitpid");
      return 1;
    }
  }
  printf("%.1f\n", (now_us() - t0) / n);
  close(s);
  return 0;
}
