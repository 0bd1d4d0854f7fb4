/* epollsem: epoll readiness semantics on one TCP connection, as a transcript.
 *
 * The process forks: the child is the peer (P), the parent the side under
 * test (T).  P connects, then does what T asks over a pipe (write N bytes,
 * read N bytes, shut down writing) and acknowledges each step, so every
 * epoll_wait of T happens at a known point of the stream.  T first moves
 * 64 KiB each way (past libfabsock's upgrade threshold), optionally waits
 * for a go file (so a script can check the fabric meanwhile), then runs the
 * cases and prints one line per check.  The harness compares the transcript
 * of a preloaded run with the plain one: the kernel is the reference.
 *
 * Cases: level-triggered, edge-triggered (also after a partial read),
 * EPOLLONESHOT and its re-arm by MOD, DEL and re-ADD with data pending and
 * without, one fd in two epoll sets, an epoll fd inside another, EPOLLOUT,
 * EPOLLEXCLUSIVE (and MOD of it: EINVAL), a DELeted dup closed while the
 * socket lives on, SO_RCVLOWAT (poll, select, epoll, a blocking recv, one
 * that times out) and MSG_PEEK | MSG_WAITALL, SO_SNDBUF with the peer's
 * SO_RCVBUF (a sender refused early), EPOLLRDHUP after the peer's
 * shutdown, and EOF.  The epoll sets exist before the upgrade.
 *
 * usage: epollsem [-g GO_FILE] [-r READY_FILE] [-P PORT_FILE]
 * exit 0 when every step ran (the transcript says what was seen), 1 when a
 * step failed, 2 on set-up errors. */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/time.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int cmd_w = -1, ack_r = -1; /* T -> P commands, P -> T acks */

/* ---- the peer ---------------------------------------------------------- */

static void peer(int cmd_r, int ack_w)
{
  char c;
  unsigned n;
  FILE *in = fdopen(cmd_r, "r");
  if (!in || fscanf(in, " %c %u", &c, &n) != 2 || c != 'p')
    _exit(2);
  int s = it_connect(0, NULL, (int)n);
  if (s < 0)
    it_die(2, "peer connect:");
  static char buf[1 << 16];
  memset(buf, 'p', sizeof buf);
  while (fscanf(in, " %c %u", &c, &n) == 2) {
    int ok = 1;
    if (c == 'w')
      ok = it_write_all(s, buf, n) == (ssize_t)n;
    else if (c == 'r')
      for (unsigned left = n; ok && left > 0;) { /* in buffer-sized pieces */
        unsigned k = left < sizeof buf ? left : (unsigned)sizeof buf;
        ok = it_read_full(s, buf, k) == (ssize_t)k;
        left -= k;
      }
    else if (c == 's')
      ok = shutdown(s, SHUT_WR) == 0;
    else if (c == 'c')
      ok = close(s) == 0;
    else if (c == 'd')
      it_sleep_us(n * 1000u); /* a pause before the next step */
    else if (c == 'b') {
      int v = (int)n;
      ok = setsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, sizeof v) == 0;
    }
    if (write(ack_w, ok ? "+" : "-", 1) != 1 || !ok)
      _exit(1);
  }
  _exit(0);
}

/* Ask the peer for one step and wait until it is done. */
static void ask(char c, unsigned n)
{
  char line[32], a;
  int len = snprintf(line, sizeof line, "%c %u\n", c, n);
  if (write(cmd_w, line, (size_t)len) != len || read(ack_r, &a, 1) != 1 || a != '+')
    it_die(1, "peer step %c %u failed", c, n);
}

/* Ask for a step without waiting: the side under test blocks meanwhile;
 * acks(n) collects the acknowledgements later. */
static void tell(char c, unsigned n)
{
  char line[32];
  int len = snprintf(line, sizeof line, "%c %u\n", c, n);
  if (write(cmd_w, line, (size_t)len) != len)
    it_die(1, "peer step %c %u: pipe write:", c, n);
}

static void acks(int n)
{
  for (char a; n > 0; n--)
    if (read(ack_r, &a, 1) != 1 || a != '+')
      it_die(1, "peer step failed");
}

/* ---- the side under test ----------------------------------------------- */

static const char *evname(uint32_t ev)
{
  static char b[64];
  b[0] = 0;
  if (ev & EPOLLIN) strcat(b, "|IN");
  if (ev & EPOLLOUT) strcat(b, "|OUT");
  if (ev & EPOLLRDHUP) strcat(b, "|RDHUP");
  if (ev & EPOLLHUP) strcat(b, "|HUP");
  if (ev & EPOLLERR) strcat(b, "|ERR");
  return b[0] ? b + 1 : "none";
}

/* One epoll_wait: prints "label: N events (tag:EVENTS ...)". */
static void ew(const char *label, int ep, int ms)
{
  struct epoll_event e[4];
  int n = epoll_wait(ep, e, 4, ms);
  if (n < 0)
    it_die(1, "%s: epoll_wait:", label);
  printf("%s: %d", label, n);
  for (int i = 0; i < n; i++)
    printf(" %lu:%s", (unsigned long)e[i].data.u64, evname(e[i].events));
  printf("\n");
  fflush(stdout);
}

static void ctl(const char *label, int ep, int op, int fd, uint32_t events, uint64_t tag)
{
  struct epoll_event e = { .events = events, .data.u64 = tag };
  int rc = epoll_ctl(ep, op, fd, &e);
  printf("%s: %s\n", label, rc == 0 ? "0" : it_errname(errno));
}

static void drain(const char *label, int s, size_t want)
{
  static char buf[1 << 16];
  size_t got = 0;
  while (got < want) {
    ssize_t r = recv(s, buf, want - got < sizeof buf ? want - got : sizeof buf, 0);
    if (r <= 0)
      it_die(1, "%s: recv after %zu of %zu:", label, got, want);
    got += (size_t)r;
  }
  printf("%s: read %zu\n", label, got);
}

/* poll() and select() for input within ms: prints "label: poll X, select Y". */
static void readable(const char *label, int s, int ms)
{
  struct pollfd p = { s, POLLIN, 0 };
  int n = poll(&p, 1, ms);
  fd_set r;
  FD_ZERO(&r);
  FD_SET(s, &r);
  struct timeval tv = { 0, 0 };
  int m = select(s + 1, &r, NULL, NULL, &tv);
  printf("%s: poll %d%s, select %d\n", label, n, n > 0 && (p.revents & POLLIN) ? " IN" : "", m);
  fflush(stdout);
}

static void set_int(const char *label, int s, int name, int v)
{
  int rc = setsockopt(s, SOL_SOCKET, name, &v, sizeof v);
  printf("%s: %s\n", label, rc == 0 ? "0" : it_errname(errno));
}

static void set_rcvtimeo(int s, int ms)
{
  struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
  if (setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0)
    it_die(1, "SO_RCVTIMEO:");
}

static void recv_print(const char *label, int s, size_t n, int flags)
{
  static char buf[1 << 12];
  ssize_t r = recv(s, buf, n, flags);
  printf("%s: %zd%s%s\n", label, r, r < 0 ? " " : "", r < 0 ? it_errname(errno) : "");
  fflush(stdout);
}

/* SO_RCVLOWAT: poll, select, epoll and a blocking recv wait for that many
 * bytes (a recv whose SO_RCVTIMEO runs out returns what is there); and
 * MSG_PEEK | MSG_WAITALL waits for all it asks for. */
static void lowat_cases(int s, int ep)
{
  set_int("rcvlowat 100", s, SO_RCVLOWAT, 100);
  ctl("mod ep IN", ep, EPOLL_CTL_MOD, s, EPOLLIN, 20);
  ask('w', 50);
  it_sleep_us(50000);
  readable("lowat 100, 50 there", s, 100);
  ew("lowat 100, 50 there, epoll", ep, 100);
  ask('w', 60);
  readable("lowat 100, 110 there", s, 2000);
  ew("lowat 100, 110 there, epoll", ep, 2000);
  drain("lowat", s, 110);
  /* (Not "80 more": the kernel would copy the 30 and then sleep until 100
   * bytes are queued beyond them, its wake-up ignoring what it copied.) */
  ask('w', 30);
  tell('d', 100);
  tell('w', 100);
  recv_print("lowat 100, recv 200 with 30 there, 100 more in 100 ms", s, 200, 0);
  acks(2);
  set_rcvtimeo(s, 100);
  ask('w', 30);
  recv_print("lowat 100, recv 200 with 30 there, SO_RCVTIMEO 100 ms", s, 200, 0);
  set_rcvtimeo(s, 0);
  set_int("rcvlowat 1", s, SO_RCVLOWAT, 1);
  ask('w', 40);
  tell('d', 100);
  tell('w', 60);
  recv_print("peek|waitall 100 with 40 there, 60 more in 100 ms", s, 100, MSG_PEEK | MSG_WAITALL);
  acks(2);
  drain("peek|waitall", s, 100);
}

/* SO_SNDBUF and the peer's SO_RCVBUF at 4 KiB, the peer not reading: a
 * non-blocking sender is refused long before 256 KiB (the kernel's count
 * depends on the window it advertised, 47 KiB here; libfabsock's ring holds
 * the two buffers' worth: 16 KiB on shm, 136 KiB on rdma, which does not
 * carry the peer's SO_RCVBUF); then the peer reads it all. */
static void sockbuf_case(int s)
{
  static char buf[1 << 16];
  ask('b', 4096);
  set_int("sndbuf 4096 (peer rcvbuf 4096)", s, SO_SNDBUF, 4096);
  int fl = fcntl(s, F_GETFL);
  fcntl(s, F_SETFL, fl | O_NONBLOCK);
  size_t took = 0;
  ssize_t w = 0;
  while (took < (256u << 10) && (w = send(s, buf, sizeof buf, 0)) > 0)
    took += (size_t)w;
  printf("peer not reading: took %s 192 KiB, then %s\n", took < (192u << 10) ? "less than" : "at least",
         w < 0 ? it_errname(errno) : "no refusal");
  fcntl(s, F_SETFL, fl);
  ask('r', (unsigned)took);
  printf("peer read all it took: ok\n");
  set_int("sndbuf 256K", s, SO_SNDBUF, 256 << 10);
  ask('b', 256 << 10);
}

static void wait_go(const char *ready, const char *go)
{
  if (ready)
    it_write_file(ready, "ready\n");
  if (!go)
    return;
  struct stat st;
  for (int i = 0; i < 3000 && stat(go, &st) != 0; i++)
    it_sleep_us(10000);
}

int main(int argc, char **argv)
{
  it_prog = "epollsem";
  const char *go = NULL, *ready = NULL, *portfile = NULL;
  int opt;
  while ((opt = getopt(argc, argv, "g:r:P:")) != -1) {
    if (opt == 'g') go = optarg;
    else if (opt == 'r') ready = optarg;
    else if (opt == 'P') portfile = optarg;
    else it_die(2, "usage: epollsem [-g GO] [-r READY] [-P PORT_FILE]");
  }
  signal(SIGPIPE, SIG_IGN);
  /* Fork before any socket exists: a child of a process that has set rdma
   * up (a listening socket does) would not use rdma. */
  int cp[2], ap[2];
  if (pipe(cp) || pipe(ap))
    it_die(2, "pipe:");
  pid_t pid = fork();
  if (pid < 0)
    it_die(2, "fork:");
  if (pid == 0) {
    close(cp[1]);
    close(ap[0]);
    peer(cp[0], ap[1]);
  }
  close(cp[0]);
  close(ap[1]);
  cmd_w = cp[1];
  ack_r = ap[0];
  int port, lfd = it_listen(0, NULL, 0, 4, &port);
  if (lfd < 0)
    it_die(2, "listen:");
  if (portfile)
    it_write_port(portfile, port);
  char pl[32];
  int pn = snprintf(pl, sizeof pl, "p %d\n", port);
  if (write(cmd_w, pl, (size_t)pn) != pn)
    it_die(2, "pipe write:");
  int s = accept(lfd, NULL, NULL);
  if (s < 0)
    it_die(2, "accept:");
  close(lfd);

  /* Sets made before the upgrade. */
  int ep1 = epoll_create1(0), ep2 = epoll_create1(0), outer = epoll_create1(0);
  ctl("add ep1 IN", ep1, EPOLL_CTL_ADD, s, EPOLLIN, 1);

  /* Past the upgrade threshold both ways, twice (the first crossing starts
   * the upgrade, the second runs after it). */
  static char big[1 << 16];
  memset(big, 't', sizeof big);
  for (int i = 0; i < 2; i++) {
    ask('w', sizeof big);
    if (it_read_full(s, big, sizeof big) != sizeof big)
      it_die(1, "warm-up read:");
    if (it_write_all(s, big, sizeof big) != sizeof big)
      it_die(1, "warm-up write:");
    ask('r', sizeof big);
    it_sleep_us(100000);
  }
  wait_go(ready, go);

  /* level-triggered */
  ew("lt idle", ep1, 50);
  ask('w', 100);
  ew("lt data", ep1, 2000);
  ew("lt again", ep1, 0);
  drain("lt", s, 100);
  ew("lt drained", ep1, 50);

  /* edge-triggered */
  ctl("mod ep1 IN|ET", ep1, EPOLL_CTL_MOD, s, EPOLLIN | EPOLLET, 2);
  ask('w', 100);
  ew("et data", ep1, 2000);
  ew("et again", ep1, 50);
  drain("et partial", s, 40);
  ew("et after partial read", ep1, 50);
  ask('w', 10);
  ew("et new data", ep1, 2000);
  drain("et", s, 70);

  /* one-shot */
  ctl("mod ep1 IN|ONESHOT", ep1, EPOLL_CTL_MOD, s, EPOLLIN | EPOLLONESHOT, 3);
  ask('w', 10);
  ew("oneshot data", ep1, 2000);
  ask('w', 10);
  ew("oneshot disarmed", ep1, 50);
  ctl("mod ep1 IN|ONESHOT (re-arm)", ep1, EPOLL_CTL_MOD, s, EPOLLIN | EPOLLONESHOT, 4);
  ew("oneshot re-armed", ep1, 2000);
  drain("oneshot", s, 20);

  /* DEL and ADD again (event loops do it at every request) */
  ctl("mod ep1 IN", ep1, EPOLL_CTL_MOD, s, EPOLLIN, 5);
  ctl("del ep1", ep1, EPOLL_CTL_DEL, s, 0, 0);
  ask('w', 20);
  ew("deleted", ep1, 50);
  ctl("add ep1 IN", ep1, EPOLL_CTL_ADD, s, EPOLLIN, 6);
  ew("re-added, data pending", ep1, 2000);
  drain("re-add", s, 20);
  ctl("del ep1", ep1, EPOLL_CTL_DEL, s, 0, 0);
  ctl("add ep1 IN", ep1, EPOLL_CTL_ADD, s, EPOLLIN, 7);
  ew("re-added, nothing pending", ep1, 50);
  ask('w', 5);
  ew("re-added, then data", ep1, 2000);
  drain("re-add 2", s, 5);
  ctl("del ep1 (twice)", ep1, EPOLL_CTL_DEL, s, 0, 0);
  ctl("del ep1 (twice)", ep1, EPOLL_CTL_DEL, s, 0, 0);
  ctl("mod ep1 (deleted)", ep1, EPOLL_CTL_MOD, s, EPOLLIN, 8);
  ctl("add ep1 IN", ep1, EPOLL_CTL_ADD, s, EPOLLIN, 9);
  ctl("add ep1 IN (again)", ep1, EPOLL_CTL_ADD, s, EPOLLIN, 9);

  /* one fd in two sets */
  ctl("add ep2 IN", ep2, EPOLL_CTL_ADD, s, EPOLLIN, 10);
  ask('w', 7);
  ew("two sets, ep1", ep1, 2000);
  ew("two sets, ep2", ep2, 2000);
  drain("two sets", s, 7);
  ew("two sets, ep1 drained", ep1, 50);
  ew("two sets, ep2 drained", ep2, 50);
  ctl("del ep2", ep2, EPOLL_CTL_DEL, s, 0, 0);

  /* an epoll fd inside another */
  ctl("add outer ep1", outer, EPOLL_CTL_ADD, ep1, EPOLLIN, 11);
  ew("nested idle", outer, 50);
  ask('w', 9);
  ew("nested data", outer, 2000);
  ew("nested inner", ep1, 0);
  drain("nested", s, 9);
  ew("nested inner drained", ep1, 50);
  ew("nested drained", outer, 50);
  ask('w', 3);
  ew("nested data again", outer, 2000);
  ew("nested inner again", ep1, 0);
  drain("nested 2", s, 3);
  ctl("del outer ep1", outer, EPOLL_CTL_DEL, ep1, 0, 0);

  /* writable */
  ctl("mod ep1 OUT", ep1, EPOLL_CTL_MOD, s, EPOLLOUT, 12);
  ew("out", ep1, 2000);
  ctl("mod ep1 IN|OUT", ep1, EPOLL_CTL_MOD, s, EPOLLIN | EPOLLOUT, 13);
  ask('w', 4);
  ew("in|out", ep1, 2000);
  drain("in|out", s, 4);

  /* exclusive */
  int ep3 = epoll_create1(0);
  ctl("add ep3 IN|EXCLUSIVE", ep3, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLEXCLUSIVE, 14);
  ask('w', 6);
  ew("exclusive", ep3, 2000);
  ctl("mod ep3 IN|EXCLUSIVE", ep3, EPOLL_CTL_MOD, s, EPOLLIN | EPOLLEXCLUSIVE, 15);
  ctl("mod ep3 IN", ep3, EPOLL_CTL_MOD, s, EPOLLIN, 16);
  ew("exclusive, after refused MODs", ep3, 2000);
  drain("exclusive", s, 6);
  ctl("del ep3", ep3, EPOLL_CTL_DEL, s, 0, 0);

  /* a dup in a set, DELeted, then closed while s lives on: nothing of it
   * stays in the set (libfabsock keeps a DELeted fd's registration for a
   * re-ADD; the EOF below would show one left behind) */
  int ep4 = epoll_create1(0), d = dup(s);
  ctl("add ep4 dup IN", ep4, EPOLL_CTL_ADD, d, EPOLLIN, 18);
  ask('w', 2);
  ew("dup data", ep4, 2000);
  drain("dup", s, 2);
  ew("dup drained", ep4, 50);
  ctl("del ep4 dup", ep4, EPOLL_CTL_DEL, d, 0, 0);
  close(d);
  ctl("add ep4 IN|RDHUP", ep4, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLRDHUP, 19);

  lowat_cases(s, ep1);
  sockbuf_case(s);

  /* the peer shuts down writing, then EOF */
  ctl("mod ep1 IN|RDHUP", ep1, EPOLL_CTL_MOD, s, EPOLLIN | EPOLLRDHUP, 17);
  ask('w', 8);
  ask('s', 0);
  ew("rdhup", ep1, 2000);
  ew("rdhup ep4", ep4, 2000);
  drain("rdhup", s, 8);
  char b;
  ssize_t r = recv(s, &b, 1, 0);
  printf("eof: recv %zd\n", r);
  ew("eof", ep1, 2000);
  ew("eof ep4", ep4, 2000);
  ew("eof ep4 again", ep4, 2000);
  shutdown(s, SHUT_WR);
  ew("both shut", ep1, 2000);

  close(cmd_w);
  int st;
  waitpid(pid, &st, 0);
  printf("peer: %s\n", WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "ok" : "failed");
  close(s);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
