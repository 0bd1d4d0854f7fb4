/* killpeer: the peer dies (SIGKILL) in the middle of a transfer.
 *
 *   killpeer -l sink|source|abort [-P portfile] [-I pidfile] [-H holdfile]   (server, one connection)
 *   killpeer -c send|psend|recv -p port [-R readyfile] [-H holdfile] [-T seconds]
 *
 * Servers: `sink` accepts and never reads (its receive queue fills);
 * `source` accepts and writes forever; `abort` writes 2 MiB, then closes
 * with SO_LINGER {1, 0} (a reset) and waits.  The harness kills the server with
 * SIGKILL once the client has written the ready file.
 * Clients: `send` writes 64 KiB chunks (MSG_NOSIGNAL) until an error;
 * `psend` does the same non-blocking, waiting in poll() for POLLOUT (an
 * event loop's way); `recv` reads until EOF or an error.  -H: hold at
 * it_hold(holdfile) after connect or accept, before the first byte (the
 * harness lets go once the connection is on a fabric: every byte then
 * goes there).  The client prints one line
 *     outcome: CLASS (DETAIL)
 * CLASS is "eof" (clean end of stream), "reset" (ECONNRESET or EPIPE),
 * "error" (anything else) or "hang" (no outcome within -T seconds, default
 * 20).  Exit 0 for eof/reset, 1 otherwise. */
#include "tests/progs/common.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void on_alarm(int sig)
{
  static const char msg[] = "outcome: hang (no EOF or error within the time limit)\n";
  (void)sig;
  if (write(1, msg, sizeof msg - 1) < 0) {
    /* nothing more to do */
  }
  _exit(1);
}

static int report(const char *what, int r, int e, uint64_t total)
{
  const char *cls;
  if (r == 0)
    cls = "eof";
  else if (e == ECONNRESET || e == EPIPE)
    cls = "reset";
  else
    cls = "error";
  printf("outcome: %s (%s %s after %llu bytes)\n", cls, what, r == 0 ? "EOF" : it_errname(e),
         (unsigned long long)total);
  return r == 0 || e == ECONNRESET || e == EPIPE ? 0 : 1;
}

int main(int argc, char **argv)
{
  int opt, port = 0, limit = 20;
  const char *server = NULL, *client = NULL, *portfile = NULL, *pidfile = NULL, *readyfile = NULL;
  const char *holdfile = NULL;
  static char buf[65536];
  it_prog = "killpeer";
  while ((opt = getopt(argc, argv, "l:c:p:P:I:R:H:T:")) != -1) {
    switch (opt) {
    case 'l': server = optarg; break;
    case 'c': client = optarg; break;
    case 'p': port = atoi(optarg); break;
    case 'P': portfile = optarg; break;
    case 'I': pidfile = optarg; break;
    case 'R': readyfile = optarg; break;
    case 'H': holdfile = optarg; break;
    case 'T': limit = atoi(optarg); break;
    default:
      it_die(2, "usage: killpeer -l sink|source|abort [-P portfile] [-I pidfile] | -c send|psend|recv -p port [-R file] [-H file] [-T s]");
    }
  }
  signal(SIGPIPE, SIG_IGN);
  memset(buf, 'k', sizeof buf);

  if (server) {
    int bound, lfd = it_listen(0, NULL, port, 16, &bound), fd;
    char pid[32];
    if (pidfile) {
      snprintf(pid, sizeof pid, "%d\n", (int)getpid());
      it_write_file(pidfile, pid);
    }
    if (portfile)
      it_write_port(portfile, bound);
    do
      fd = accept(lfd, NULL, NULL);
    while (fd < 0 && errno == EINTR);
    if (fd < 0)
      it_die(1, "accept:");
    it_hold(holdfile);
    if (strcmp(server, "sink") == 0) {
      for (;;)
        pause();
    }
    if (strcmp(server, "abort") == 0) {
      for (int i = 0; i < 32; i++)
        if (it_write_all(fd, buf, sizeof buf) < 0)
          it_die(1, "abort write:");
      struct linger lg = { 1, 0 };
      if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) < 0)
        it_die(1, "SO_LINGER:");
      close(fd);
      for (;;)
        pause();
    }
    for (;;)
      if (it_write_all(fd, buf, sizeof buf) < 0)
        it_die(1, "source write:");
  }

  if (!client || !port)
    it_die(2, "need -l or -c with -p");
  int fd = it_connect(0, NULL, port);
  if (fd < 0)
    it_die(2, "connect:");
  if (holdfile)
    it_hold(holdfile);
  signal(SIGALRM, on_alarm);
  alarm((unsigned)limit);
  uint64_t total = 0;
  int ready = 0;
  bool poll_driven = strcmp(client, "psend") == 0;
  if (poll_driven && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0)
    it_die(2, "fcntl:");
  if (poll_driven || strcmp(client, "send") == 0) {
    for (;;) {
      ssize_t w = send(fd, buf, sizeof buf, MSG_NOSIGNAL);
      if (w < 0 && (errno == EINTR || (poll_driven && errno == EAGAIN))) {
        struct pollfd p = { fd, POLLOUT, 0 };
        if (errno == EAGAIN && poll(&p, 1, -1) < 0 && errno != EINTR)
          return report("poll", -1, errno, total);
        continue;
      }
      if (w < 0)
        return report("send", -1, errno, total);
      total += (uint64_t)w;
      /* Under a fabric ring's size (256 KiB): all may be in the ring. */
      if (!ready && total >= 128 * 1024 && readyfile) {
        it_write_file(readyfile, "ready\n");
        ready = 1;
      }
    }
  }
  for (;;) {
    ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return report("recv", (int)r, r < 0 ? errno : 0, total);
    total += (uint64_t)r;
    if (!ready && total >= 1024 * 1024 && readyfile) {
      it_write_file(readyfile, "ready\n");
      ready = 1;
    }
  }
}
