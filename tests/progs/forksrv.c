/* forksrv: accept-then-fork echo server, or a prefork one.
 *
 *   forksrv [-6] [-H host] [-p port] [-P portfile] [-w workers]
 *
 * The parent accepts, forks, closes its copy of the connection and goes
 * back to accept(); the child closes the listening socket and echoes with
 * blocking read()/write() until EOF, then exits.  Children are reaped by
 * SIGCHLD = SIG_IGN.  With -w N, prefork instead (as nginx, Apache prefork,
 * gunicorn): the parent listens, forks N workers and waits; each worker
 * accepts and echoes one connection at a time.  Workers die with the
 * parent.  Runs until killed. */
#include "tests/progs/common.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

static void echo(int fd)
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
}

static void child(int fd)
{
  echo(fd);
  _exit(0);
}

static int accept_one(int lfd)
{
  for (;;) {
    int fd = accept(lfd, NULL, NULL);
    if (fd >= 0)
      return fd;
    if (errno != EINTR && errno != ECONNABORTED)
      it_die(1, "accept:");
  }
}

static void prefork(int lfd, int workers)
{
  pid_t parent = getpid();
  for (int i = 0; i < workers; i++) {
    pid_t pid = fork();
    if (pid < 0)
      it_die(1, "fork:");
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent)
        _exit(0);
      for (;;)
        echo(accept_one(lfd));
    }
  }
  for (;;)
    pause();
}

int main(int argc, char **argv)
{
  int v6 = 0, port = 0, opt, bound, lfd, workers = 0;
  const char *host = NULL, *portfile = NULL;
  it_prog = "forksrv";
  while ((opt = getopt(argc, argv, "6H:p:P:w:")) != -1) {
    switch (opt) {
    case '6': v6 = 1; break;
    case 'H': host = optarg; break;
    case 'p': port = atoi(optarg); break;
    case 'P': portfile = optarg; break;
    case 'w': workers = atoi(optarg); break;
    default: it_die(2, "usage: forksrv [-6] [-H host] [-p port] [-P portfile] [-w workers]");
    }
  }
  signal(SIGPIPE, SIG_IGN);
  signal(SIGCHLD, SIG_IGN);
  lfd = it_listen(v6, host, port, 128, &bound);
  if (portfile)
    it_write_port(portfile, bound);
  if (workers > 0)
    prefork(lfd, workers);
  for (;;) {
    int fd = accept_one(lfd);
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
