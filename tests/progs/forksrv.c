/* forksrv: accept-then-fork echo server.
 *
 *   forksrv [-6] [-H host] [-p port] [-P portfile]
 *
 * The parent accepts, forks, closes its copy of the connection and goes
 * back to accept(); the child closes the listening socket and echoes with
 * blocking read()/write() until EOF, then exits.  Children are reaped by
 * SIGCHLD = SIG_IGN.  Runs until killed. */
#include "tests/progs/common.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static void child(int fd)
{
  static char buf[65536];
  for (;;) {
    ssize_t r = read(fd, buf, sizeof buf);
    if (r == 0)
      break;
    if (r < 0) {
      if (errno == EINTR)
        continue;
      it_die(1, "child read:");
    }
    if (it_write_all(fd, buf, (size_t)r) < 0)
      it_die(1, "child write:");
  }
  close(fd);
  _exit(0);
}

int main(int argc, char **argv)
{
  int v6 = 0, port = 0, opt, bound, lfd;
  const char *host = NULL, *portfile = NULL;
  it_prog = "forksrv";
  while ((opt = getopt(argc, argv, "6H:p:P:")) != -1) {
    switch (opt) {
    case '6': v6 = 1; break;
    case 'H': host = optarg; break;
    case 'p': port = atoi(optarg); break;
    case 'P': portfile = optarg; break;
    default: it_die(2, "usage: forksrv [-6] [-H host] [-p port] [-P portfile]");
    }
  }
  signal(SIGPIPE, SIG_IGN);
  signal(SIGCHLD, SIG_IGN);
  lfd = it_listen(v6, host, port, 128, &bound);
  if (portfile)
    it_write_port(portfile, bound);
  for (;;) {
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      it_die(1, "accept:");
    }
    pid_t pid = fork();
    if (pid < 0)
      it_die(1, "fork:");
    if (pid == 0) {
      close(lfd);
      child(fd);
    }
    close(fd);
  }
}
