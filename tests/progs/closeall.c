/* closeall: a program that closes every descriptor it did not open itself
 * (as daemons and shells do), then keeps using sockets.
 *
 *   closeall -p port -m loop|closefrom|close_range|cloexec [-6]
 *
 * 1. connect A to the echo server, register it in an epoll set, round trip.
 * 2. close everything from 3 up:
 *      loop         close(fd) for fd = 3 .. 65535
 *      closefrom    closefrom(3)
 *      close_range  close_range(3, ~0U, 0)
 *      cloexec      close_range(3, ~0U, CLOSE_RANGE_CLOEXEC): nothing is
 *                   closed, A must stay usable and carry FD_CLOEXEC
 * 3. A must now be gone (EBADF) -- or, for cloexec, still work.
 * 4. connect B (it usually gets A's old number), a new epoll set, round trip,
 *    shutdown, EOF.  Descriptors 0-2 must still be open.
 * Prints "ok MODE" and exits 0, or "FAIL ..." and exits 1. */
#include "tests/progs/common.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

static int v6, port;
static char err[256];

static int epoll_roundtrip(int fd, uint64_t seed, int finish)
{
  int ep = epoll_create1(0);
  struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.fd = fd }, out;
  if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
    snprintf(err, sizeof err, "epoll setup: %s", it_errname(errno));
    return -1;
  }
  if (epoll_wait(ep, &out, 1, 5000) != 1 || !(out.events & EPOLLOUT)) {
    snprintf(err, sizeof err, "epoll_wait: no EPOLLOUT on a fresh connection");
    return -1;
  }
  if (it_echo_roundtrip(fd, 1 << 20, seed, 65536, err, sizeof err) != 0)
    return -1;
  if (finish && it_echo_finish(fd, err, sizeof err) != 0)
    return -1;
  close(ep);
  return 0;
}

int main(int argc, char **argv)
{
  const char *mode = NULL;
  int opt, r;
  it_prog = "closeall";
  while ((opt = getopt(argc, argv, "p:m:6")) != -1) {
    switch (opt) {
    case 'p': port = atoi(optarg); break;
    case 'm': mode = optarg; break;
    case '6': v6 = 1; break;
    default: it_die(2, "usage: closeall -p port -m loop|closefrom|close_range|cloexec [-6]");
    }
  }
  if (!port || !mode)
    it_die(2, "need -p and -m");
  signal(SIGPIPE, SIG_IGN);

  int a = it_connect(v6, NULL, port);
  if (a < 0)
    it_die(1, "connect A:");
  if (epoll_roundtrip(a, 1, 0) != 0) {
    printf("FAIL connection A before closing: %s\n", err);
    return 1;
  }

  if (strcmp(mode, "loop") == 0) {
    for (int fd = 3; fd <= 65535; fd++)
      close(fd);
  } else if (strcmp(mode, "closefrom") == 0) {
    closefrom(3);
  } else if (strcmp(mode, "close_range") == 0) {
    if (close_range(3, ~0U, 0) < 0)
      it_die(1, "close_range:");
  } else if (strcmp(mode, "cloexec") == 0) {
    if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
      it_die(1, "close_range(CLOEXEC):");
  } else {
    it_die(2, "unknown mode '%s'", mode);
  }

  for (int fd = 0; fd <= 2; fd++)
    if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      printf("FAIL fd %d was closed by %s\n", fd, mode);
      return 1;
    }

  r = fcntl(a, F_GETFD);
  if (strcmp(mode, "cloexec") == 0) {
    if (r < 0 || !(r & FD_CLOEXEC)) {
      printf("FAIL cloexec: fd A: %s\n", r < 0 ? it_errname(errno) : "FD_CLOEXEC not set");
      return 1;
    }
    if (epoll_roundtrip(a, 2, 1) != 0) {
      printf("FAIL cloexec: connection A after close_range: %s\n", err);
      return 1;
    }
    close(a);
  } else if (r >= 0 || errno != EBADF) {
    char path[64], what[256];
    snprintf(path, sizeof path, "/proc/self/fd/%d", a);
    ssize_t n = readlink(path, what, sizeof what - 1);
    what[n > 0 ? n : 0] = '\0';
    printf("FAIL %s: fd A (%d) still open after closing everything: now %s\n", mode, a, n > 0 ? what : "?");
    for (int fd = 0; fd < 1024; fd++) { /* what else is open, for the diagnosis */
      snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
      n = readlink(path, what, sizeof what - 1);
      if (n > 0)
        fprintf(stderr, "  fd %d: %.*s\n", fd, (int)n, what);
    }
    return 1;
  }

  int b = it_connect(v6, NULL, port);
  if (b < 0) {
    printf("FAIL connect B after %s: %s\n", mode, it_errname(errno));
    return 1;
  }
  if (epoll_roundtrip(b, 3, 1) != 0) {
    printf("FAIL connection B after %s: %s\n", mode, err);
    return 1;
  }
  close(b);
  printf("ok %s\n", mode);
  return 0;
}
