/* errnos: socket API calls with bad or borderline arguments, and the errno
 * each one produces, one line per call.
 *
 *   errnos
 *
 * Everything happens inside this one process (a loopback listener, a
 * connected pair, a pipe, an epoll set), so a run under LD_PRELOAD must
 * print exactly what a plain run prints.  The harness diffs the two.
 * Lines look like "label: -1 ENOTSOCK" or "label: 5" (return value when it
 * is deterministic) or "label: fd" (a new descriptor). Exit 0 always,
 * unless setup fails (2). */
#include "tests/progs/common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

static void report(const char *label, long r, int e, int is_fd)
{
  if (r < 0)
    printf("%s: -1 %s\n", label, it_errname(e));
  else if (is_fd)
    printf("%s: fd\n", label);
  else
    printf("%s: %ld\n", label, r);
}

/* Value-returning call / descriptor-returning call. */
#define T(label, expr) do { errno = 0; long r_ = (long)(expr); report(label, r_, errno, 0); } while (0)
#define TFD(label, expr) do { errno = 0; long r_ = (long)(expr); report(label, r_, errno, 1); } while (0)
/* A call expected to succeed: errno must not change (we set EXDEV before). */
#define KEEP(label, expr) do { errno = EXDEV; long r_ = (long)(expr); int e_ = errno; \
    printf("%s: %s, errno after: %s\n", label, r_ < 0 ? "failed" : "ok", it_errname(e_)); } while (0)

static struct sockaddr_in addr_of(int port)
{
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

static int wait_in(int fd)
{
  struct pollfd p = { .fd = fd, .events = POLLIN };
  return poll(&p, 1, 5000);
}

int main(void)
{
  char buf[256];
  int v = 1, lport, p[2];
  socklen_t sl;
  it_prog = "errnos";
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, NULL, _IOLBF, 0);

  int l = it_listen(0, NULL, 0, 16, &lport);
  struct sockaddr_in la = addr_of(lport);
  /* a port with nobody listening: bind, read the port, close */
  int tmp = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in any = addr_of(0);
  if (bind(tmp, (struct sockaddr *)&any, sizeof any) < 0)
    it_die(2, "bind:");
  sl = sizeof any;
  getsockname(tmp, (struct sockaddr *)&any, &sl);
  close(tmp);
  struct sockaddr_in closed = any;
  if (pipe(p) < 0)
    it_die(2, "pipe:");

  puts("== bad descriptors");
  T("send(-1)", send(-1, "x", 1, 0));
  T("recv(9999)", recv(9999, buf, 1, 0));
  T("read(9999)", read(9999, buf, 1));
  T("write(9999)", write(9999, "x", 1));
  T("connect(-1)", connect(-1, (struct sockaddr *)&la, sizeof la));
  T("shutdown(12345)", shutdown(12345, SHUT_RDWR));
  T("getsockopt(9999)", getsockopt(9999, SOL_SOCKET, SO_TYPE, &v, &sl));
  T("close(-1)", close(-1));
  T("dup2(9999, 100)", dup2(9999, 100));
  T("fcntl(9999, F_GETFL)", fcntl(9999, F_GETFL));

  puts("== a pipe is not a socket");
  sl = sizeof v;
  T("recv(pipe)", recv(p[0], buf, 1, MSG_DONTWAIT));
  T("send(pipe)", send(p[1], "x", 1, 0));
  T("connect(pipe)", connect(p[1], (struct sockaddr *)&la, sizeof la));
  T("accept(pipe)", accept(p[0], NULL, NULL));
  T("bind(pipe)", bind(p[0], (struct sockaddr *)&la, sizeof la));
  T("listen(pipe)", listen(p[0], 1));
  T("shutdown(pipe)", shutdown(p[0], SHUT_RD));
  T("getsockopt(pipe)", getsockopt(p[0], SOL_SOCKET, SO_TYPE, &v, &sl));
  T("setsockopt(pipe)", setsockopt(p[0], SOL_SOCKET, SO_KEEPALIVE, &v, sizeof v));
  T("getpeername(pipe)", getpeername(p[0], (struct sockaddr *)&la, &sl));
  T("write(pipe)", write(p[1], "ab", 2));
  T("read(pipe)", read(p[0], buf, sizeof buf));
  la = addr_of(lport);

  puts("== bad arguments");
  T("socket(AF_INET, 12345)", socket(AF_INET, 12345, 0));
  T("socket(12345, SOCK_STREAM)", socket(12345, SOCK_STREAM, 0));
  T("socket(AF_INET, SOCK_STREAM, IPPROTO_UDP)", socket(AF_INET, SOCK_STREAM, IPPROTO_UDP));
  int u = socket(AF_INET, SOCK_STREAM, 0);
  T("connect(addrlen 3)", connect(u, (struct sockaddr *)&la, 3));
  T("bind(addrlen 3)", bind(u, (struct sockaddr *)&la, 3));
  T("bind(in use)", bind(u, (struct sockaddr *)&la, sizeof la));
  T("setsockopt(optlen 1)", setsockopt(u, SOL_SOCKET, SO_RCVBUF, &v, 1));
  T("setsockopt(bad option)", setsockopt(u, SOL_SOCKET, 12345, &v, sizeof v));
  sl = sizeof v;
  T("getsockopt(bad level)", getsockopt(u, 12345, 1, &v, &sl));
  T("shutdown(how 99)", shutdown(u, 99));
  T("accept(not listening)", accept(u, NULL, NULL));
  int udp = socket(AF_INET, SOCK_DGRAM, 0);
  T("listen(udp)", listen(udp, 1));
  close(udp);

  puts("== unconnected TCP socket");
  T("recv(unconnected)", recv(u, buf, 1, 0));
  T("read(unconnected)", read(u, buf, 1));
  T("send(unconnected, MSG_NOSIGNAL)", send(u, "x", 1, MSG_NOSIGNAL));
  T("write(unconnected)", write(u, "x", 1));
  sl = sizeof la;
  T("getpeername(unconnected)", getpeername(u, (struct sockaddr *)&la, &sl));
  T("shutdown(unconnected)", shutdown(u, SHUT_WR));
  T("connect(refused)", connect(u, (struct sockaddr *)&closed, sizeof closed));
  sl = sizeof v;
  getsockopt(u, SOL_SOCKET, SO_ERROR, &v, &sl);
  printf("SO_ERROR after refused connect: %s\n", it_errname(v));
  T("connect(refused, again)", connect(u, (struct sockaddr *)&closed, sizeof closed));
  close(u);
  la = addr_of(lport);

  puts("== connected pair");
  int c = socket(AF_INET, SOCK_STREAM, 0);
  T("connect", connect(c, (struct sockaddr *)&la, sizeof la));
  int s = accept(l, NULL, NULL);
  if (s < 0)
    it_die(2, "accept:");
  T("connect(again)", connect(c, (struct sockaddr *)&la, sizeof la));
  T("listen(connected)", listen(c, 1));
  T("bind(connected)", bind(c, (struct sockaddr *)&la, sizeof la));
  v = 0;
  sl = sizeof v;
  T("getsockopt(SO_TYPE)", getsockopt(c, SOL_SOCKET, SO_TYPE, &v, &sl));
  printf("SO_TYPE: %d\n", v);
  sl = sizeof v;
  T("getsockopt(SO_DOMAIN)", getsockopt(c, SOL_SOCKET, SO_DOMAIN, &v, &sl));
  printf("SO_DOMAIN: %d\n", v);
  v = 1;
  T("setsockopt(TCP_NODELAY)", setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &v, sizeof v));
  v = 0;
  sl = sizeof v;
  T("getsockopt(TCP_NODELAY)", getsockopt(c, IPPROTO_TCP, TCP_NODELAY, &v, &sl));
  printf("TCP_NODELAY: %d\n", v != 0);
  T("recv(MSG_DONTWAIT, empty)", recv(c, buf, 1, MSG_DONTWAIT));
  fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
  T("recv(O_NONBLOCK, empty)", recv(s, buf, 1, 0));
  T("read(O_NONBLOCK, empty)", read(s, buf, 1));
  fcntl(l, F_SETFL, fcntl(l, F_GETFL) | O_NONBLOCK);
  T("accept(O_NONBLOCK, none pending)", accept(l, NULL, NULL));
  T("recv(len 0)", recv(s, buf, 0, 0));
  T("send(len 0)", send(c, buf, 0, 0));

  puts("== data");
  T("send(10)", send(c, "0123456789", 10, 0));
  wait_in(s);
  T("recv(bad buffer)", recv(s, (void *)16, 10, 0));
  T("recv(MSG_PEEK 4)", recv(s, buf, 4, MSG_PEEK));
  T("recv(10)", recv(s, buf, 10, 0));
  printf("data: %.10s\n", buf);
  T("send(bad buffer)", send(c, (void *)16, 10, MSG_NOSIGNAL));
  char big[100];
  memset(big, 'z', sizeof big);
  T("send(100)", send(c, big, 100, 0));
  wait_in(s);
  usleep(20000);
  v = -1;
  T("ioctl(FIONREAD)", ioctl(s, FIONREAD, &v));
  printf("FIONREAD: %d\n", v);
  struct sockaddr_in from;
  sl = sizeof from;
  T("recvfrom(50, with address)", recvfrom(s, buf, 50, 0, (struct sockaddr *)&from, &sl));
  printf("recvfrom addrlen: %u\n", (unsigned)sl);
  fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK);
  T("recv(MSG_WAITALL 50)", recv(s, buf, 50, MSG_WAITALL));
  T("sendto(connected, with address)", sendto(c, "ab", 2, 0, (struct sockaddr *)&la, sizeof la));
  wait_in(s);
  T("read(2)", read(s, buf, 2));
  struct iovec iov[2] = { { "abc", 3 }, { "defg", 4 } };
  T("writev(3+4)", writev(c, iov, 2));
  struct iovec riov[2] = { { buf, 2 }, { buf + 2, 5 } };
  T("recv(MSG_WAITALL 0)", recv(s, buf, 0, MSG_WAITALL));
  usleep(20000);
  T("readv(2+5)", readv(s, riov, 2));
  printf("readv data: %.7s\n", buf);

  puts("== vectors and discards (after 1 MiB each way: on a fabric where preloaded)");
  /* A pair of its own: the transcript after it stays where it was. */
  int vc = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(vc, (struct sockaddr *)&la, sizeof la) < 0)
    it_die(2, "connect:");
  wait_in(l);
  int vs = accept(l, NULL, NULL);
  if (vs < 0)
    it_die(2, "accept:");
  static char chunk[65536];
  for (int i = 0; i < 16; i++) {
    if (it_write_all(vc, chunk, sizeof chunk) != (ssize_t)sizeof chunk ||
        it_read_full(vs, chunk, sizeof chunk) != (ssize_t)sizeof chunk ||
        it_write_all(vs, chunk, sizeof chunk) != (ssize_t)sizeof chunk ||
        it_read_full(vc, chunk, sizeof chunk) != (ssize_t)sizeof chunk)
      return 2;
  }
  usleep(200000); /* the rendezvous, where there is one */
  static struct iovec many[IOV_MAX + 1];
  for (int i = 0; i <= IOV_MAX; i++)
    many[i] = (struct iovec){ buf, 1 };
  volatile int neg = -1;
  T("writev(IOV_MAX + 1)", writev(vc, many, IOV_MAX + 1));
  T("writev(-1)", writev(vc, many, neg));
  struct msghdr mh = { .msg_iov = many, .msg_iovlen = IOV_MAX + 1 };
  T("sendmsg(IOV_MAX + 1)", sendmsg(vc, &mh, MSG_NOSIGNAL));
  T("readv(IOV_MAX + 1)", readv(vs, many, IOV_MAX + 1));
  T("readv(-1)", readv(vs, many, neg));
  T("recvmsg(IOV_MAX + 1)", recvmsg(vs, &mh, MSG_DONTWAIT));
  /* The kernel sends nothing here (EISCONN): on a fabric the byte went,
   * and every reading below was one byte off. */
  T("send(MSG_FASTOPEN) when connected", send(vc, "f", 1, MSG_FASTOPEN | MSG_NOSIGNAL));
  T("sendto(MSG_FASTOPEN, its peer) when connected",
    sendto(vc, "f", 1, MSG_FASTOPEN | MSG_NOSIGNAL, (struct sockaddr *)&la, sizeof la));
  T("send(trunc)", send(vc, "trunc", 5, 0));
  wait_in(vs);
  T("recv(MSG_ERRQUEUE)", recv(vs, buf, 100, MSG_ERRQUEUE | MSG_DONTWAIT));
  usleep(20000);
  v = -1;
  T("ioctl(FIONREAD, the peer's first bytes after its switch)", ioctl(vs, FIONREAD, &v));
  printf("FIONREAD: %d\n", v);
  T("recv(NULL, MSG_PEEK | MSG_TRUNC)", recv(vs, NULL, 100, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT));
  T("recv(NULL, MSG_TRUNC)", recv(vs, NULL, 100, MSG_TRUNC | MSG_DONTWAIT));
  T("recv(MSG_TRUNC, drained)", recv(vs, NULL, 100, MSG_TRUNC | MSG_DONTWAIT));
  close(vc);
  close(vs);

  puts("== dup");
  int d = dup(s);
  TFD("dup", d);
  T("close(original)", close(s));
  T("send via c", send(c, "dup!", 4, 0));
  wait_in(d);
  T("recv via dup", recv(d, buf, sizeof buf, 0));
  T("recv on closed original", recv(s, buf, 1, MSG_DONTWAIT));
  s = d;

  puts("== shutdown");
  T("shutdown(c, SHUT_WR)", shutdown(c, SHUT_WR));
  T("send after SHUT_WR (MSG_NOSIGNAL)", send(c, "x", 1, MSG_NOSIGNAL));
  T("write after SHUT_WR (SIGPIPE ignored)", write(c, "x", 1));
  T("shutdown(c, SHUT_WR) again", shutdown(c, SHUT_WR));
  wait_in(s);
  T("recv at peer after SHUT_WR", recv(s, buf, 1, 0));
  T("send back on half-closed", send(s, "back", 4, 0));
  wait_in(c);
  T("recv on half-closed", recv(c, buf, sizeof buf, 0));
  T("shutdown(s, SHUT_RD)", shutdown(s, SHUT_RD));
  T("recv after own SHUT_RD", recv(s, buf, 1, MSG_DONTWAIT));
  struct pollfd pf = { .fd = s, .events = POLLIN | POLLOUT | POLLRDHUP };
  T("poll(half-closed both ways)", poll(&pf, 1, 0));
  printf("revents:%s%s%s%s%s\n", pf.revents & POLLIN ? " IN" : "", pf.revents & POLLOUT ? " OUT" : "",
         pf.revents & POLLRDHUP ? " RDHUP" : "", pf.revents & POLLHUP ? " HUP" : "", pf.revents & POLLERR ? " ERR" : "");
  T("close(c)", close(c));
  T("close(c) again", close(c));
  pf.fd = c;
  pf.events = POLLIN;
  T("poll(closed fd)", poll(&pf, 1, 0));
  printf("revents: %s\n", pf.revents & POLLNVAL ? "NVAL" : "other");
  usleep(20000);
  T("send to closed peer #1 (MSG_NOSIGNAL)", send(s, "x", 1, MSG_NOSIGNAL));
  usleep(20000);
  T("send to closed peer #2 (MSG_NOSIGNAL)", send(s, "x", 1, MSG_NOSIGNAL));
  close(s);

  puts("== epoll");
  int ep = epoll_create1(0);
  struct epoll_event ev = { .events = EPOLLIN };
  c = socket(AF_INET, SOCK_STREAM, 0);
  T("epoll_ctl(ADD)", epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
  T("epoll_ctl(ADD twice)", epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
  T("epoll_ctl(MOD non-member)", epoll_ctl(ep, EPOLL_CTL_MOD, p[0], &ev));
  T("epoll_ctl(DEL non-member)", epoll_ctl(ep, EPOLL_CTL_DEL, p[1], &ev));
  T("epoll_ctl(ADD itself)", epoll_ctl(ep, EPOLL_CTL_ADD, ep, &ev));
  int reg = open("/proc/self/exe", O_RDONLY);
  T("epoll_ctl(ADD regular file)", epoll_ctl(ep, EPOLL_CTL_ADD, reg, &ev));
  close(reg);
  T("epoll_wait(bad maxevents)", epoll_wait(ep, &ev, 0, 0));
  T("epoll_wait(not epoll)", epoll_wait(p[0], &ev, 1, 0));
  close(c);
  close(ep);

  puts("== errno is left alone by successful calls");
  la = addr_of(lport);
  fcntl(l, F_SETFL, fcntl(l, F_GETFL) & ~O_NONBLOCK);
  errno = EXDEV;
  c = socket(AF_INET, SOCK_STREAM, 0);
  printf("socket: errno after: %s\n", it_errname(errno));
  KEEP("setsockopt", setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &v, sizeof v));
  KEEP("connect", connect(c, (struct sockaddr *)&la, sizeof la));
  errno = EXDEV;
  s = accept(l, NULL, NULL);
  printf("accept: %s, errno after: %s\n", s < 0 ? "failed" : "ok", it_errname(errno));
  KEEP("send", send(c, "hello", 5, 0));
  pf.fd = s;
  pf.events = POLLIN;
  KEEP("poll", poll(&pf, 1, 5000));
  KEEP("recv", recv(s, buf, sizeof buf, 0));
  KEEP("write", write(s, "again", 5));
  KEEP("read", read(c, buf, sizeof buf));
  sl = sizeof v;
  KEEP("getsockopt", getsockopt(c, SOL_SOCKET, SO_ERROR, &v, &sl));
  sl = sizeof from;
  KEEP("getpeername", getpeername(c, (struct sockaddr *)&from, &sl));
  ep = epoll_create1(0);
  ev.events = EPOLLOUT;
  KEEP("epoll_ctl", epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
  KEEP("epoll_wait", epoll_wait(ep, &ev, 1, 1000));
  KEEP("shutdown", shutdown(c, SHUT_WR));
  KEEP("close(c)", close(c));
  KEEP("close(s)", close(s));
  KEEP("close(ep)", close(ep));
  puts("== end");
  return 0;
}
