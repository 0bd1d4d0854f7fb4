/* fork-loop: what one fork costs a process that holds a TCP socket (the
 * library's tables exist then), as a fork-per-connection server pays it:
 * the socket listens (on 127.0.0.1, a port the kernel picks), so that its
 * stat table is the file, as a server's is (a process that only connects
 * keeps it in its own memory, base/stat.h, and its children copy nothing).
 *
 * usage: fork-loop [N] [--no-socket]   forks N children (default 1000) one
 * after the other; each exits at once with _exit (no destructors: only the
 * fork itself and the library's fork handlers are timed); prints, on one
 * line, the mean us per fork+exit+wait and the mean page faults (minor)
 * per child.  --no-socket: the process makes no socket first (a shell).
 * A plain program: bench/fork-cost.sh runs it with and without LD_PRELOAD,
 * tests/integration/t_forkcost.sh counts the faults (at most 4 more than
 * plain per child of a process that never made a socket). */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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
  int sock = !(argc > 2 && strcmp(argv[2], "--no-socket") == 0);
  if (n <= 0 || argc > 3 || (argc > 2 && sock)) {
    fprintf(stderr, "usage: fork-loop [N] [--no-socket]\n");
    return 2;
  }
  int s = sock ? socket(AF_INET, SOCK_STREAM, 0) : -2; /* tracked: the library's tables are made */
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  if (s == -1 || (s >= 0 && (bind(s, (struct sockaddr *)&a, sizeof a) < 0 || listen(s, 16) < 0))) {
    perror("socket");
    return 1;
  }
  struct rusage r0, r1;
  getrusage(RUSAGE_CHILDREN, &r0);
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
  double us = (now_us() - t0) / n;
  getrusage(RUSAGE_CHILDREN, &r1);
  printf("%.1f %.1f\n", us, (double)(r1.ru_minflt - r0.ru_minflt) / n);
  if (s >= 0)
    close(s);
  return 0;
}
