/* fabsock-bench server: accepts connections, reads each one's hello and
 * serves the test it names (protocol in bench-proto.h).  connrate is answered
 * on the accept thread; ping-pong and stream connections get a thread each. */
#include "bench/bench.h"
#include "bench/bench-proto.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int stop_pipe[2] = {-1, -1};
static pthread_mutex_t srv_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t srv_cv = PTHREAD_COND_INITIALIZER;
static int srv_active;

static void on_stop(int sig) {
  int saved = errno;
  char c = (char)sig;
  if (write(stop_pipe[1], &c, 1) < 0) {}
  errno = saved;
}

struct conn {
  int fd;
  int test;
  int verbose;
  uint64_t size;
  int framed;             /* the client sent a framed hello (bench-proto.h) */
};

static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void pingpong_serve(struct conn *c) {
  void *buf = malloc(c->size);
  uint64_t n = 0;
  const char *end = "EOF";
  if (!buf) return;
  for (;; n++) {
    ssize_t r = read_full(c->fd, buf, c->size);
    if (r <= 0) {
      if (r < 0) end = strerror(errno);
      if (r < 0 && errno != ECONNRESET)
        fprintf(stderr, "fabsock-bench server: ping-pong read: %s\n", end);
      break;
    }
    if (write_full(c->fd, buf, c->size) < 0) {
      end = strerror(errno);
      fprintf(stderr, "fabsock-bench server: ping-pong write: %s\n", end);
      break;
    }
  }
  if (c->verbose)
    fprintf(stderr, "fabsock-bench server: ping-pong %llu B: %llu round trips, ended by %s\n",
            (unsigned long long)c->size, (unsigned long long)n, end);
  free(buf);
}

/* Receive stream messages, checking kind and sequence numbers; see the
 * protocol above.  Reads use the message size as buffer size (like iperf). */
static void stream_serve(struct conn *c) {
  unsigned char *buf = malloc(c->size), hdr[STREAM_HDR], reply[FRAME_HDR + REPLY_LEN];
  uint64_t off = 0, expect = 0, bytes = 0, first = 0, cpu0 = 0;
  size_t f = c->framed ? FRAME_HDR : 0;
  int kind = K_DATA;
  if (!buf) return;
  for (;;) {
    ssize_t n = read(c->fd, buf, c->size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n < 0 || off != 0)
        fprintf(stderr, "fabsock-bench server: stream ended %s\n",
                n < 0 ? strerror(errno) : "in the middle of a message");
      break;
    }
    if (!bytes) {
      first = bench_now_ns();
      cpu0 = thread_cpu_ns(); /* this read's own work is not counted: one read in many */
    }
    bytes += (uint64_t)n;
    for (size_t p = 0; p < (size_t)n;) {
      size_t take;
      if (off < STREAM_HDR) {
        take = STREAM_HDR - off < (size_t)n - p ? STREAM_HDR - off : (size_t)n - p;
        memcpy(hdr + off, buf + p, take);
        if (off + take == STREAM_HDR) {
          kind = hdr[f];
          if (get64(hdr + 8) != expect || kind > K_END || (f && get32(hdr) != c->size - f)) {
            fprintf(stderr, "fabsock-bench server: stream corrupted at message %llu "
                    "(got sequence %llu, kind %d)\n", (unsigned long long)expect,
                    (unsigned long long)get64(hdr + 8), kind);
            goto out;
          }
          expect++;
        }
      } else {
        take = c->size - off < (size_t)n - p ? c->size - off : (size_t)n - p;
      }
      p += take;
      off += take;
      if (off == c->size) {
        off = 0;
        if (kind != K_DATA) {
          if (p != (size_t)n) {
            fprintf(stderr, "fabsock-bench server: data after a sync message\n");
            goto out;
          }
          if (f) put32(reply, REPLY_LEN);
          put64(reply + f, bytes);
          put64(reply + f + 8, bench_now_ns() - first);
          put64(reply + f + 16, thread_cpu_ns() - cpu0);
          if (write_full(c->fd, reply, f + REPLY_LEN) < 0) goto out;
          bytes = 0;
          if (kind == K_END) goto out;
        }
      }
    }
  }
out:
  free(buf);
}

static void *conn_thread(void *arg) {
  struct conn *c = arg;
  if (c->test == T_PINGPONG) pingpong_serve(c);
  else stream_serve(c);
  close(c->fd);
  free(c);
  pthread_mutex_lock(&srv_mu);
  srv_active--;
  pthread_cond_broadcast(&srv_cv);
  pthread_mutex_unlock(&srv_mu);
  return NULL;
}

/* Read the hello and serve connrate inline; hand other tests to a thread. */
static void serve_accepted(int fd, int verbose) {
  unsigned char h[FRAME_HDR + HELLO_LEN];
  int framed = 0;
  nodelay(fd);
  ssize_t got = read_full(fd, h, HELLO_LEN);
  if (got == HELLO_LEN && get32(h) == HELLO_LEN && memcmp(h + FRAME_HDR, "FSBENCH1", 8) == 0) {
    framed = 1; /* the framed hello: 4 more bytes */
    got = read_full(fd, h + HELLO_LEN, FRAME_HDR);
    got = got == FRAME_HDR ? HELLO_LEN : -1;
  }
  if (got != (ssize_t)HELLO_LEN || memcmp(h + (framed ? FRAME_HDR : 0), "FSBENCH1", 8) != 0) {
    fprintf(stderr, "fabsock-bench server: connection dropped: %s\n",
            got == 0 ? "EOF before the hello" : got < 0 ? strerror(errno) : "not a hello");
    close(fd);
    return;
  }
  unsigned char *hello = h + (framed ? FRAME_HDR : 0);
  int test = (int)get32(hello + 8);
  uint64_t size = get64(hello + 16);
  if (test == T_CONNRATE) { /* the reply is the hello, renamed (and framed alike) */
    memcpy(hello, "FSBENCHR", 8);
    if (write_full(fd, h, (framed ? FRAME_HDR : 0) + HELLO_LEN) < 0 && errno != ECONNRESET &&
        errno != EPIPE)
      fprintf(stderr, "fabsock-bench server: connrate reply: %s\n", strerror(errno));
    close(fd);
    return;
  }
  if ((test != T_PINGPONG && test != T_STREAM) || size < 1 || size > (1ull << 30) ||
      (test == T_STREAM && size < STREAM_HDR)) {
    fprintf(stderr, "fabsock-bench server: bad hello (test %d, size %llu)\n", test,
            (unsigned long long)size);
    close(fd);
    return;
  }
  struct conn *c = malloc(sizeof *c);
  pthread_t t;
  pthread_attr_t attr;
  if (!c) {
    close(fd);
    return;
  }
  *c = (struct conn){fd, test, verbose, size, framed};
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_mutex_lock(&srv_mu);
  srv_active++;
  pthread_mutex_unlock(&srv_mu);
  if (pthread_create(&t, &attr, conn_thread, c) != 0) {
    fprintf(stderr, "fabsock-bench server: pthread_create failed\n");
    close(fd);
    free(c);
    pthread_mutex_lock(&srv_mu);
    srv_active--;
    pthread_mutex_unlock(&srv_mu);
  }
  pthread_attr_destroy(&attr);
}

static int listen_on(const struct bench_opts *o) {
  struct addrinfo hints = {.ai_flags = AI_PASSIVE, .ai_socktype = SOCK_STREAM}, *res, *ai;
  int rc = getaddrinfo(o->bind, o->port ? o->port : "0", &hints, &res);
  if (rc != 0) {
    fprintf(stderr, "fabsock-bench server: %s: %s\n", o->bind ? o->bind : "*", gai_strerror(rc));
    return -1;
  }
  int fd = -1, err = 0;
  for (ai = res; ai; ai = ai->ai_next) {
    /* A bare SOCK_STREAM, as in bench-client.c's dial(), so rsocket's
     * preload puts it on RDMA instead of falling back to kernel TCP. */
    fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 1024) == 0) break;
    err = errno;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) fprintf(stderr, "fabsock-bench server: cannot listen: %s\n", strerror(err));
  return fd;
}

int bench_server(const struct bench_opts *o) {
  signal(SIGPIPE, SIG_IGN);
  if (pipe2(stop_pipe, O_CLOEXEC) < 0) return 1;
  struct sigaction sa = {.sa_handler = on_stop};
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  int lfd = listen_on(o);
  if (lfd < 0) return 1;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  getsockname(lfd, (struct sockaddr *)&ss, &sl);
  int port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                            : ((struct sockaddr_in *)&ss)->sin_port);
  if (o->port_fd >= 0) {
    char line[16];
    int len = snprintf(line, sizeof line, "%d\n", port);
    if (write_full(o->port_fd, line, (size_t)len) < 0) return 1;
    close(o->port_fd);
  } else {
    fprintf(stderr, "fabsock-bench server: listening on port %d\n", port);
  }
  for (;;) {
    struct pollfd p[3] = {{lfd, POLLIN, 0}, {stop_pipe[0], POLLIN, 0}, {o->ctl_fd, POLLIN, 0}};
    int n = poll(p, o->ctl_fd >= 0 ? 3 : 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      fprintf(stderr, "fabsock-bench server: poll: %s\n", strerror(errno));
      break;
    }
    if (p[1].revents || (o->ctl_fd >= 0 && p[2].revents)) break;
    if (p[0].revents) {
      int fd = accept(lfd, NULL, NULL); /* rsocket's preload has no accept4 */
      if (fd >= 0) {
        (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
        serve_accepted(fd, o->verbose);
      } else if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
        fprintf(stderr, "fabsock-bench server: accept: %s\n", strerror(errno));
    }
  }
  close(lfd);
  /* Let connection threads see their client's close (bounded). */
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += 3;
  pthread_mutex_lock(&srv_mu);
  while (srv_active > 0 && pthread_cond_timedwait(&srv_cv, &srv_mu, &dl) == 0) {}
  pthread_mutex_unlock(&srv_mu);
  return 0;
}
