/* nbconnect: non-blocking connect observed through epoll.
 *
 *   nbconnect -p port [-6] [-r]
 *
 * socket(SOCK_NONBLOCK), connect(), epoll for EPOLLOUT, getsockopt(SO_ERROR).
 * Without -r the port has an echo server: the program then checks a second
 * connect() (EISCONN) and does a verified echo round trip, then twenty
 * connections that connect() again once EPOLLOUT says so, checking that
 * no descriptor stays behind after their close.  With -r the port
 * is closed: the outcome must be ECONNREFUSED through SO_ERROR.
 * Every observable step is printed on stdout, one line each, with nothing
 * run-dependent in it, so that the output of a plain run and of a preloaded
 * run can be compared byte for byte. Exit 0 when the expected outcome was
 * seen, 1 otherwise. */
#include "tests/progs/common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

static void print_events(const char *what, unsigned ev)
{
  printf("%s:", what);
  if (!ev)
    printf(" none");
  if (ev & EPOLLIN) printf(" IN");
  if (ev & EPOLLOUT) printf(" OUT");
  if (ev & EPOLLERR) printf(" ERR");
  if (ev & EPOLLHUP) printf(" HUP");
  if (ev & EPOLLRDHUP) printf(" RDHUP");
  printf("\n");
}

int main(int argc, char **argv)
{
  int v6 = 0, port = 0, refused = 0, opt;
  struct sockaddr_storage ss;
  socklen_t len;
  char err[256];
  it_prog = "nbconnect";
  while ((opt = getopt(argc, argv, "p:6r")) != -1) {
    switch (opt) {
    case 'p': port = atoi(optarg); break;
    case '6': v6 = 1; break;
    case 'r': refused = 1; break;
    default: it_die(2, "usage: nbconnect -p port [-6] [-r]");
    }
  }
  if (!port)
    it_die(2, "need -p");
  signal(SIGPIPE, SIG_IGN);
  memset(&ss, 0, sizeof ss);
  if (v6) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    a->sin6_family = AF_INET6;
    a->sin6_port = htons((uint16_t)port);
    a->sin6_addr = in6addr_loopback;
    len = sizeof *a;
  } else {
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof *a;
  }
  int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0)
    it_die(2, "socket:");
  int r = connect(fd, (struct sockaddr *)&ss, len);
  int cerr = r == 0 ? 0 : errno;
  printf("connect: %s\n", r == 0 ? "0" : it_errname(errno));

  int ep = epoll_create1(0);
  struct epoll_event ev = { .events = EPOLLOUT, .data.fd = fd }, out;
  if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
    it_die(2, "epoll_ctl:");
  int n = epoll_wait(ep, &out, 1, 10000);
  if (n < 0)
    it_die(1, "epoll_wait:");
  printf("epoll_wait: %d\n", n);
  print_events("events", n == 1 ? out.events : 0);

  int soerr = -1;
  socklen_t sl = sizeof soerr;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
    it_die(1, "getsockopt SO_ERROR:");
  printf("SO_ERROR: %s\n", it_errname(soerr));
  int first_soerr = soerr;
  /* SO_ERROR is cleared by reading it. */
  sl = sizeof soerr;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
  printf("SO_ERROR again: %s\n", it_errname(soerr));

  r = connect(fd, (struct sockaddr *)&ss, len);
  printf("second connect: %s\n", r == 0 ? "0" : it_errname(errno));

  if (refused) {
    char c;
    r = (int)recv(fd, &c, 1, 0);
    printf("recv after refusal: %s\n", r < 0 ? it_errname(errno) : r == 0 ? "EOF" : "data");
    struct sockaddr_storage peer;
    socklen_t pl = sizeof peer;
    r = getpeername(fd, (struct sockaddr *)&peer, &pl);
    printf("getpeername: %s\n", r == 0 ? "0" : it_errname(errno));
    close(fd);
    return (cerr == ECONNREFUSED || first_soerr == ECONNREFUSED) ? 0 : 1;
  }
  if (first_soerr != 0 || (cerr != 0 && cerr != EINPROGRESS))
    return 1;

  struct sockaddr_storage peer;
  socklen_t pl = sizeof peer;
  r = getpeername(fd, (struct sockaddr *)&peer, &pl);
  printf("getpeername: %s\n", r == 0 ? "0" : it_errname(errno));
  /* the same epoll set, now interested in input: nothing to read yet */
  ev.events = EPOLLIN;
  epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
  n = epoll_wait(ep, &out, 1, 100);
  printf("idle epoll_wait: %d\n", n);
  char c;
  r = (int)recv(fd, &c, 1, 0);
  printf("idle recv: %s\n", r < 0 ? it_errname(errno) : "data");
  if (it_echo_roundtrip(fd, 1 << 20, 5, 65536, err, sizeof err) != 0 || it_echo_finish(fd, err, sizeof err) != 0) {
    printf("echo: FAIL %s\n", err);
    return 1;
  }
  printf("echo: ok\n");
  close(fd);
  /* Twenty more: connect, wait for EPOLLOUT, connect again (its 0 says
   * "connected now", as APR and Python's select loops read it), close.  No
   * descriptor may stay behind. */
  /* the library keeps its own descriptors high, below 65,536 (base/fdreg.h) */
  static unsigned char before_map[1 << 16];
  int before = it_fd_snapshot(before_map, (int)sizeof before_map);
  for (int i = 0; i < 20; i++) {
    int s2 = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (s2 < 0)
      it_die(2, "socket:");
    int r1 = connect(s2, (struct sockaddr *)&ss, len);
    struct epoll_event e2 = { .events = EPOLLOUT, .data.fd = s2 };
    epoll_ctl(ep, EPOLL_CTL_ADD, s2, &e2);
    if (r1 < 0 && epoll_wait(ep, &out, 1, 10000) != 1)
      it_die(1, "no EPOLLOUT for connection %d", i);
    int r2 = connect(s2, (struct sockaddr *)&ss, len);
    if (i == 0)
      printf("connect after EPOLLOUT: %s\n", r2 == 0 ? "0" : it_errname(errno));
    close(s2);
  }
  /* The library may still be closing descriptors of earlier connections
   * (rendezvous clean-up): wait up to 5 s for the count to settle. */
  int left = it_count_fds() - before;
  for (int i = 0; i < 500 && left > 0; i++) {
    it_sleep_us(10000);
    left = it_count_fds() - before;
  }
  printf("descriptors left after 20 connect, EPOLLOUT, connect, close: %d\n", left > 0 ? left : 0);
  if (left > 0)
    it_fd_report_new(before_map, (int)sizeof before_map, stdout);
  return 0;
}
