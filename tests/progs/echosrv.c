/* echosrv: epoll-based TCP echo server with non-blocking sockets.
 *
 *   echosrv [-6] [-e] [-L] [-H host] [-p port] [-P portfile] [-b bufsize] [-u user]
 *
 * Level-triggered by default: interest follows the buffer state (EPOLLIN
 * while there is room, EPOLLOUT while there is something to send), one read
 * and one write per event.  -e: edge-triggered, registered once with
 * EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET, each event drains until EAGAIN.
 * -L: serve the listener a service manager passed (fd 3, LISTEN_FDS=1, as
 * systemd-socket-activate does) instead of making one.
 * -u: once listening, become that user (setgid, setgroups, setuid), as a
 * daemon that binds as root and then drops its privileges.
 * A client's EOF is answered (after the echo is flushed) with close().
 * Runs until killed.  Prints nothing on stdout; the bound port goes to -P. */
#include "tests/progs/common.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

struct conn {
  int fd;
  int eof;
  unsigned events; /* current interest (level-triggered mode) */
  size_t off, len, cap;
  unsigned char buf[];
};

static int edge;
static int ep;
static size_t bufsize = 65536;
static int lfd;

static void conn_close(struct conn *c)
{
  epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  free(c);
}

static unsigned want_events(const struct conn *c)
{
  unsigned ev = 0;
  if (c->off < c->len)
    ev |= EPOLLOUT;
  if (!c->eof && c->len < c->cap)
    ev |= EPOLLIN;
  return ev;
}

/* One step: try a write then a read.  Returns 1 on progress, 0 when both
 * would block (or have nothing to do), -1 when the connection is done. */
static int step(struct conn *c)
{
  int progress = 0;
  if (c->off < c->len) {
    ssize_t w = send(c->fd, c->buf + c->off, c->len - c->off, MSG_NOSIGNAL);
    if (w > 0) {
      c->off += (size_t)w;
      progress = 1;
    } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
      return -1;
    }
  }
  if (c->off == c->len)
    c->off = c->len = 0;
  if (!c->eof && c->len < c->cap) {
    ssize_t r = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
    if (r > 0) {
      c->len += (size_t)r;
      progress = 1;
    } else if (r == 0) {
      c->eof = 1;
      progress = 1;
    } else if (errno != EAGAIN && errno != EINTR) {
      return -1;
    }
  }
  if (c->eof && c->off == c->len)
    return -1;
  return progress;
}

static void handle(struct conn *c)
{
  int r;
  if (edge) {
    while ((r = step(c)) > 0)
      ;
    if (r < 0)
      conn_close(c);
    return;
  }
  r = step(c);
  if (r < 0) {
    conn_close(c);
    return;
  }
  unsigned ev = want_events(c);
  if (ev != c->events) {
    struct epoll_event e = { .events = ev, .data.ptr = c };
    c->events = ev;
    if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e) < 0)
      it_die(1, "epoll_ctl MOD:");
  }
}

static void accept_all(void)
{
  for (;;) {
    int fd;
    if (edge) {
      fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    } else {
      fd = accept(lfd, NULL, NULL);
      if (fd >= 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0)
        it_die(1, "fcntl O_NONBLOCK:");
    }
    if (fd < 0) {
      if (errno == EAGAIN || errno == EINTR)
        return;
      if (errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) {
        it_msg("accept: %s", it_errname(errno));
        return;
      }
      it_die(1, "accept:");
    }
    struct conn *c = calloc(1, sizeof *c + bufsize);
    if (!c)
      it_die(1, "out of memory");
    c->fd = fd;
    c->cap = bufsize;
    c->events = edge ? (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET) : EPOLLIN;
    struct epoll_event e = { .events = c->events, .data.ptr = c };
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) < 0)
      it_die(1, "epoll_ctl ADD:");
  }
}

int main(int argc, char **argv)
{
  int v6 = 0, port = 0, opt, bound, inherited = 0;
  const char *host = NULL, *portfile = NULL, *user = NULL;
  it_prog = "echosrv";
  while ((opt = getopt(argc, argv, "6eLH:p:P:b:u:")) != -1) {
    switch (opt) {
    case '6': v6 = 1; break;
    case 'e': edge = 1; break;
    case 'L': inherited = 1; break;
    case 'H': host = optarg; break;
    case 'p': port = atoi(optarg); break;
    case 'P': portfile = optarg; break;
    case 'b': bufsize = (size_t)it_size(optarg); break;
    case 'u': user = optarg; break;
    default: it_die(2, "usage: echosrv [-6] [-e] [-L] [-H host] [-p port] [-P portfile] [-b bufsize] [-u user]");
    }
  }
  signal(SIGPIPE, SIG_IGN);
  if (inherited) {
    const char *n = getenv("LISTEN_FDS");
    if (!n || atoi(n) != 1)
      it_die(2, "-L: LISTEN_FDS is %s, expected 1", n ? n : "unset");
    lfd = 3;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(lfd, (struct sockaddr *)&ss, &sl) < 0)
      it_die(2, "getsockname(3):");
    bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
  } else {
    lfd = it_listen(v6, host, port, 1024, &bound);
  }
  if (user) {
    struct passwd *pw = getpwnam(user);
    if (!pw)
      it_die(2, "-u: no user %s", user);
    if (setgid(pw->pw_gid) < 0 || setgroups(0, NULL) < 0 || setuid(pw->pw_uid) < 0)
      it_die(2, "-u %s:", user);
  }
  if (fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK) < 0)
    it_die(2, "fcntl:");
  ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0)
    it_die(2, "epoll_create1:");
  struct epoll_event le = { .events = EPOLLIN, .data.ptr = NULL };
  if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &le) < 0)
    it_die(2, "epoll_ctl listen:");
  if (portfile)
    it_write_port(portfile, bound);

  struct epoll_event evs[64];
  for (;;) {
    int n = epoll_wait(ep, evs, 64, -1);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      it_die(1, "epoll_wait:");
    }
    for (int i = 0; i < n; i++) {
      if (!evs[i].data.ptr)
        accept_all();
      else
        handle(evs[i].data.ptr);
    }
  }
}
