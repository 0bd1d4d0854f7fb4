/* idle-mem: what N connections cost a process in memory and descriptors,
 * before any data, right after a burst, and after they went idle.
 *
 *   idle-mem [-n CONNS] [-b BYTES] [-i IDLE_S] [--json]
 *
 * The process forks a server (one epoll loop) and connects CONNS times to
 * it on 127.0.0.1.  Each connection first exchanges 8 KiB each way (past
 * libfabsock's upgrade threshold) and rests 0.5 s, so that an accelerated
 * one is on its fabric before the burst: on each connection in turn the
 * client writes BYTES and the server, once it has them all, writes BYTES
 * back (a burst that sizes buffers).  Then everything stays open and idle for IDLE_S seconds.  At
 * each of the three points it reads, for both processes, VmRSS and
 * RssShmem (/proc/PID/status) and the open descriptors (/proc/PID/fd), and
 * the host's Shmem (/proc/meminfo).  Run it plain and under LD_PRELOAD and
 * compare (bench/idle-mem.sh).  Prints a table; --json one line of JSON. */
#define _GNU_SOURCE 1
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char *what)
{
  fprintf(stderr, "idle-mem: %s: %s\n", what, strerror(errno));
  exit(1);
}

#define WARM 8192 /* bytes each way before the burst */

struct conn {
  size_t got, sent;
};

/* Per connection: read WARM, write WARM back, read bytes, write bytes back. */
static size_t phase_end(const struct conn *s, size_t bytes)
{
  return s->got < WARM || s->sent < WARM ? WARM : WARM + bytes;
}

static void serve(int lfd, int nconns, size_t bytes, int ready_w)
{
  static char buf[1 << 16];
  memset(buf, 's', sizeof buf);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct rlimit rl;
  size_t maxfd = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (size_t)rl.rlim_cur : (size_t)nconns * 4 + 1024;
  struct conn *cs = calloc(maxfd, sizeof *cs);
  if (ep < 0 || !cs)
    die("server set-up");
  struct epoll_event ev = { .events = EPOLLIN, .data.fd = lfd };
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
  if (write(ready_w, "r", 1) != 1)
    die("ready pipe");
  int open_conns = 0, accepted = 0;
  struct epoll_event evs[64];
  for (;;) {
    int n = epoll_wait(ep, evs, 64, -1);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      die("epoll_wait");
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == lfd) {
        int c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
        if (c < 0)
          continue;
        if ((size_t)c >= maxfd)
          die("descriptor beyond the table");
        cs[c] = (struct conn){ 0, 0 };
        struct epoll_event ce = { .events = EPOLLIN, .data.fd = c };
        epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce);
        open_conns++;
        accepted++;
        continue;
      }
      struct conn *s = &cs[fd];
      size_t end = phase_end(s, bytes);
      if (evs[i].events & EPOLLIN) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r == 0 || (r < 0 && errno != EAGAIN)) {
          epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
          close(fd);
          if (--open_conns == 0 && accepted >= nconns)
            _exit(0);
          continue;
        }
        if (r > 0)
          s->got += (size_t)r;
      }
      if (s->got >= end && s->sent < end) {
        size_t k = end - s->sent < sizeof buf ? end - s->sent : sizeof buf;
        ssize_t w = write(fd, buf, k);
        if (w > 0)
          s->sent += (size_t)w;
      }
      uint32_t want = s->got >= end && s->sent < end ? EPOLLIN | EPOLLOUT : EPOLLIN;
      struct epoll_event ce = { .events = want, .data.fd = fd };
      epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ce);
    }
  }
}

struct mem {
  long rss_kb, shmem_kb, fds;
};

static long status_kb(const char *path, const char *key)
{
  FILE *f = fopen(path, "r");
  char line[256];
  long v = -1;
  size_t kl = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, key, kl) && line[kl] == ':') {
      v = strtol(line + kl + 1, NULL, 10);
      break;
    }
  if (f)
    fclose(f);
  return v;
}

static struct mem measure(pid_t pid)
{
  char p[64];
  struct mem m;
  snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
  m.rss_kb = status_kb(p, "VmRSS");
  m.shmem_kb = status_kb(p, "RssShmem");
  snprintf(p, sizeof p, "/proc/%d/fd", (int)pid);
  DIR *d = opendir(p);
  m.fds = 0;
  while (d && readdir(d))
    m.fds++;
  if (d)
    closedir(d);
  m.fds -= 2 + (pid == getpid()); /* ".", "..", and our own DIR's fd */
  return m;
}

/* Write n bytes of buf on fd, then read n back. */
static void exchange(int fd, char *buf, size_t n)
{
  size_t done = 0;
  while (done < n) {
    ssize_t w = write(fd, buf + done, n - done);
    if (w <= 0)
      die("write");
    done += (size_t)w;
  }
  for (done = 0; done < n;) {
    ssize_t g = read(fd, buf, n - done);
    if (g <= 0)
      die("read");
    done += (size_t)g;
  }
}

int main(int argc, char **argv)
{
  int nconns = 1000, idle_s = 3, json = 0;
  size_t bytes = 600 * 1024;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-n") && i + 1 < argc)
      nconns = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-b") && i + 1 < argc)
      bytes = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "-i") && i + 1 < argc)
      idle_s = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json"))
      json = 1;
    else {
      fprintf(stderr, "usage: idle-mem [-n CONNS] [-b BYTES] [-i IDLE_S] [--json]\n");
      return 2;
    }
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  socklen_t al = sizeof a;
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(lfd, 4096) < 0 ||
      getsockname(lfd, (struct sockaddr *)&a, &al) < 0)
    die("listen");
  int pw[2];
  if (pipe(pw) < 0)
    die("pipe");
  pid_t srv = fork();
  if (srv < 0)
    die("fork");
  if (srv == 0) {
    close(pw[0]);
    serve(lfd, nconns, bytes, pw[1]);
  }
  close(lfd);
  close(pw[1]);
  char r;
  if (read(pw[0], &r, 1) != 1)
    die("server did not start");
  int *fds = calloc((size_t)nconns, sizeof *fds);
  char *buf = malloc(bytes > WARM ? bytes : WARM);
  if (!fds || !buf)
    die("out of memory");
  memset(buf, 'c', bytes > WARM ? bytes : WARM);
  struct mem base_c = measure(getpid()), base_s = measure(srv);
  long base_host = status_kb("/proc/meminfo", "Shmem");
  for (int i = 0; i < nconns; i++) {
    fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&a, sizeof a) < 0)
      die("connect");
  }
  for (int i = 0; i < nconns; i++)
    exchange(fds[i], buf, WARM);
  usleep(500000); /* upgrades happen meanwhile */
  struct mem conn_c = measure(getpid()), conn_s = measure(srv);
  long conn_host = status_kb("/proc/meminfo", "Shmem");
  for (int i = 0; i < nconns && bytes; i++)
    exchange(fds[i], buf, bytes);
  struct mem burst_c = measure(getpid()), burst_s = measure(srv);
  long burst_host = status_kb("/proc/meminfo", "Shmem");
  sleep((unsigned)idle_s);
  struct mem idle_c = measure(getpid()), idle_s_m = measure(srv);
  long idle_host = status_kb("/proc/meminfo", "Shmem");
  for (int i = 0; i < nconns; i++)
    close(fds[i]);
  int st;
  waitpid(srv, &st, 0);
  const char *names[3] = { "connected", "after burst", "idle" };
  struct mem *cm[3] = { &conn_c, &burst_c, &idle_c }, *sm[3] = { &conn_s, &burst_s, &idle_s_m };
  long host[3] = { conn_host, burst_host, idle_host };
  if (json) {
    printf("{\"conns\": %d, \"bytes\": %zu, \"idle_s\": %d, \"points\": [", nconns, bytes, idle_s);
    for (int k = 0; k < 3; k++)
      printf("%s{\"point\": \"%s\", \"client_rss_kb\": %ld, \"client_shmem_kb\": %ld, \"client_fds\": %ld, "
             "\"server_rss_kb\": %ld, \"server_shmem_kb\": %ld, \"server_fds\": %ld, \"host_shmem_kb\": %ld}",
             k ? ", " : "", names[k], cm[k]->rss_kb - base_c.rss_kb, cm[k]->shmem_kb - base_c.shmem_kb,
             cm[k]->fds - base_c.fds, sm[k]->rss_kb - base_s.rss_kb, sm[k]->shmem_kb - base_s.shmem_kb,
             sm[k]->fds - base_s.fds, host[k] - base_host);
    printf("]}\n");
    return 0;
  }
  printf("%d connections, %zu bytes each way on each, idle %d s; growth over the process at start\n", nconns, bytes,
         idle_s);
  printf("%-12s %12s %12s %8s %12s %12s %8s %12s\n", "point", "client RSS", "client shm", "fds", "server RSS",
         "server shm", "fds", "host Shmem");
  for (int k = 0; k < 3; k++)
    printf("%-12s %9ld KB %9ld KB %8ld %9ld KB %9ld KB %8ld %9ld KB\n", names[k], cm[k]->rss_kb - base_c.rss_kb,
           cm[k]->shmem_kb - base_c.shmem_kb, cm[k]->fds - base_c.fds, sm[k]->rss_kb - base_s.rss_kb,
           sm[k]->shmem_kb - base_s.shmem_kb, sm[k]->fds - base_s.fds, host[k] - base_host);
  return 0;
}
