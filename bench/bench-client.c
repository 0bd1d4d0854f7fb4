/* fabsock-bench client: the three network tests, measured on the client
 * side (protocol in bench-proto.h). */
#include "bench/bench.h"
#include "bench/bench-proto.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The server's addresses (getaddrinfo order); dial() starts at the last one
 * that worked. */
struct target {
  struct sockaddr_storage ss[8];
  socklen_t sl[8];
  int n;
  _Atomic int good;
};

static int resolve(const struct bench_opts *o, struct target *t, char *err, size_t errlen) {
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res, *ai;
  const char *host = o->host ? o->host : "127.0.0.1";
  int rc = getaddrinfo(host, o->port, &hints, &res);
  if (rc != 0) {
    snprintf(err, errlen, "%s port %s: %s", host, o->port, gai_strerror(rc));
    return -1;
  }
  t->n = 0;
  for (ai = res; ai && t->n < 8; ai = ai->ai_next) {
    memcpy(&t->ss[t->n], ai->ai_addr, ai->ai_addrlen);
    t->sl[t->n++] = ai->ai_addrlen;
  }
  atomic_store(&t->good, 0);
  freeaddrinfo(res);
  return 0;
}

/* A connected TCP_NODELAY socket to the target, or -1 with errno. */
static int dial(struct target *t) {
  int first = atomic_load(&t->good), e = ECONNREFUSED;
  for (int k = 0; k < t->n; k++) {
    int i = (first + k) % t->n;
    /* No SOCK_CLOEXEC in the type: rsocket's preload takes only a bare
     * SOCK_STREAM and silently falls back to kernel TCP for anything else. */
    int fd = socket(t->ss[i].ss_family, SOCK_STREAM, 0);
    if (fd < 0) {
      e = errno;
      continue;
    }
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC); /* best effort (rsocket has no F_SETFD) */
    nodelay(fd);
    if (connect(fd, (const struct sockaddr *)&t->ss[i], t->sl[i]) == 0) {
      if (i != first) atomic_store(&t->good, i);
      return fd;
    }
    e = errno;
    close(fd);
    if (e == EADDRNOTAVAIL || e == EMFILE || e == ENFILE) break; /* local trouble */
  }
  errno = e;
  return -1;
}

/* The hello, preceded by its frame header when framed: returns its length
 * (HELLO_LEN or FRAME_HDR + HELLO_LEN); h has room for both. */
static size_t make_hello(const struct bench_opts *o, unsigned char *h, int test, uint64_t size,
                         uint64_t seq) {
  size_t f = o->framed ? FRAME_HDR : 0;
  memset(h, 0, f + HELLO_LEN);
  if (f) put32(h, HELLO_LEN);
  memcpy(h + f, "FSBENCH1", 8);
  put32(h + f + 8, (uint32_t)test);
  put64(h + f + 16, size);
  put64(h + f + 24, seq);
  return f + HELLO_LEN;
}

/* Payload bytes (--fill): constant, random, or random lowercase letters. */
static void fill(const struct bench_opts *o, unsigned char *buf, uint64_t size, unsigned char c) {
  uint64_t x = 0x9e3779b97f4a7c15ull ^ size;
  if (o->fill == FILL_CONST) {
    memset(buf, c, size);
    return;
  }
  for (uint64_t i = 0; i < size; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    buf[i] = o->fill == FILL_TEXT ? (unsigned char)('a' + (x >> 32) % 26) : (unsigned char)(x >> 24);
  }
}

/* Read one reply (framed: check its header); 0 or -1 with r->err set. */
static int read_reply(const struct bench_opts *o, int fd, unsigned char *reply, const char *what,
                      struct bench_result *r) {
  unsigned char h[FRAME_HDR + REPLY_LEN];
  size_t f = o->framed ? FRAME_HDR : 0;
  ssize_t got = read_full(fd, h, f + REPLY_LEN);
  if (got != (ssize_t)(f + REPLY_LEN)) {
    snprintf(r->err, sizeof r->err, "no %s reply: %s", what, got ? strerror(errno) : "EOF");
    return -1;
  }
  if (f && get32(h) != REPLY_LEN) {
    snprintf(r->err, sizeof r->err, "%s reply: bad frame header", what);
    return -1;
  }
  memcpy(reply, h + f, REPLY_LEN);
  return 0;
}

#define FAIL(...) do { snprintf(r->err, sizeof r->err, __VA_ARGS__); goto out; } while (0)

static int run_pingpong(const struct bench_opts *o, struct target *tg, uint64_t size,
                        double secs, struct bench_result *r) {
  unsigned char hello[FRAME_HDR + HELLO_LEN];
  unsigned char *tx = malloc(size), *rx = malloc(size);
  size_t cap = o->iters ? o->iters : 65536, n = 0;
  uint64_t *rtt = malloc(cap * sizeof *rtt);
  size_t at = o->framed ? FRAME_HDR : 0; /* where the stamp goes */
  int fd = -1;
  if (!tx || !rx || !rtt) FAIL("out of memory");
  if (o->framed && size < 16) FAIL("framed ping-pong messages must be >= 16 bytes");
  fill(o, tx, size, 0xa5);
  if (o->framed) put32(tx, (uint32_t)(size - FRAME_HDR));
  if ((fd = dial(tg)) < 0) FAIL("connect: %s", strerror(errno));
  size_t hl = make_hello(o, hello, T_PINGPONG, size, 0);
  if (write_full(fd, hello, hl) < 0) FAIL("write hello: %s", strerror(errno));

  uint64_t t_begin = bench_now_ns(), i = 0, measure_from = 0, t_measure = 0;
  uint64_t warm_ns = (uint64_t)(o->warmup_time * 1e9), secs_ns = (uint64_t)(secs * 1e9);
  uint64_t cap_ns = secs_ns * 4 > 2000000000u ? secs_ns * 4 : 2000000000u;
  uint64_t min_n = size <= 65536 ? 1000 : 100; /* enough for a p99 of small messages */
  for (;; i++) {
    uint64_t t0 = bench_now_ns();
    if (!t_measure) { /* warm-up: >= warmup_iters and >= warmup_time, never > 1 s */
      uint64_t el = t0 - t_begin;
      if ((i >= o->warmup_iters && el >= warm_ns) || el >= 1000000000u) {
        t_measure = t0;
        measure_from = i;
      }
    } else {
      uint64_t el = t0 - t_measure, done = i - measure_from;
      if (o->iters ? done >= o->iters
                   : ((el >= secs_ns && done >= min_n) || (el >= cap_ns && done >= 10)))
        break;
    }
    if (size >= at + 8) memcpy(tx + at, &i, 8);
    else tx[0] = (unsigned char)i;
    if (size >= at + 16) {
      uint64_t x = ~i;
      memcpy(tx + size - 8, &x, 8);
    }
    if (write_full(fd, tx, size) < 0) FAIL("write: %s", strerror(errno));
    ssize_t got = read_full(fd, rx, size);
    if (got <= 0) FAIL("read: %s", got == 0 ? "server closed the connection" : strerror(errno));
    uint64_t t1 = bench_now_ns();
    if (memcmp(rx, tx, size < at + 8 ? size : at + 8) != 0 ||
        (size >= at + 16 && memcmp(rx + size - 8, tx + size - 8, 8) != 0))
      FAIL("echo corrupted at round trip %llu", (unsigned long long)i);
    if (t_measure) {
      if (n == cap) {
        uint64_t *bigger = realloc(rtt, 2 * cap * sizeof *rtt);
        if (!bigger) FAIL("out of memory");
        rtt = bigger;
        cap *= 2;
      }
      rtt[n++] = t1 - t0;
    }
  }
  bench_lat_stats(rtt, n, &r->lat);
  r->secs = (bench_now_ns() - t_measure) / 1e9;
  r->ok = 1;
out:
  if (fd >= 0) close(fd);
  free(tx);
  free(rx);
  free(rtt);
  return r->ok ? 0 : -1;
}

static int run_stream(const struct bench_opts *o, struct target *tg, uint64_t size,
                      double secs, struct bench_result *r) {
  unsigned char hello[FRAME_HDR + HELLO_LEN], reply[REPLY_LEN];
  unsigned char *buf = malloc(size);
  uint64_t seq = 0, sent = 0;
  size_t kind_at = o->framed ? FRAME_HDR : 0;
  int fd = -1;
  if (size < STREAM_HDR) FAIL("stream messages must be >= %d bytes", STREAM_HDR);
  if (o->framed && size - FRAME_HDR > UINT32_MAX) FAIL("framed messages must be < 4 GiB");
  if (!buf) FAIL("out of memory");
  fill(o, buf, size, 0x3c);
  if (o->framed) put32(buf, (uint32_t)(size - FRAME_HDR));
  if ((fd = dial(tg)) < 0) FAIL("connect: %s", strerror(errno));
  size_t hl = make_hello(o, hello, T_STREAM, size, 0);
  if (write_full(fd, hello, hl) < 0) FAIL("write hello: %s", strerror(errno));

#define SEND(kind)                                        \
  do {                                                    \
    buf[kind_at] = (kind);                                \
    put64(buf + 8, seq++);                                \
    if (write_full(fd, buf, size) < 0)                    \
      FAIL("write: %s", strerror(errno));                 \
    sent += size;                                         \
  } while (0)
  double warm = o->warmup_time < 1.0 ? o->warmup_time : 1.0;
  uint64_t t0 = bench_now_ns(), lim = (uint64_t)(warm * 1e9);
  while (bench_now_ns() - t0 < lim) SEND(K_DATA);
  SEND(K_SYNC);
  if (read_reply(o, fd, reply, "sync", r) < 0) goto out;
  if (get64(reply) != sent) FAIL("server counted %llu bytes, %llu were sent",
                                 (unsigned long long)get64(reply), (unsigned long long)sent);

  sent = 0;
  t0 = bench_now_ns();
  lim = (uint64_t)(secs * 1e9);
  while (bench_now_ns() - t0 < lim) SEND(K_DATA);
  SEND(K_END);
  if (read_reply(o, fd, reply, "end", r) < 0) goto out;
  uint64_t t1 = bench_now_ns();
#undef SEND
  if (get64(reply) != sent) FAIL("server counted %llu bytes, %llu were sent",
                                 (unsigned long long)get64(reply), (unsigned long long)sent);
  r->bytes = get64(reply);
  r->secs = (t1 - t0) / 1e9; /* first write to the receiver's acknowledgement */
  r->rate = r->bytes / r->secs / 1e9;
  r->rx_cpu = get64(reply + 16) / 1e9;
  r->ok = 1;
out:
  if (fd >= 0) close(fd);
  free(buf);
  return r->ok ? 0 : -1;
}

struct cr_thread {
  const struct bench_opts *o;
  struct target *tg;
  uint64_t t_measure, t_end, count, seq0;
  char err[128];
};

static void *connrate_thread(void *arg) {
  struct cr_thread *t = arg;
  unsigned char h[FRAME_HDR + HELLO_LEN], rep[FRAME_HDR + HELLO_LEN];
  size_t f = t->o->framed ? FRAME_HDR : 0;
  for (uint64_t seq = t->seq0;; seq++) {
    uint64_t now = bench_now_ns();
    if (now >= t->t_end) break;
    int fd = dial(t->tg);
    if (fd < 0) {
      snprintf(t->err, sizeof t->err, "connect: %s", strerror(errno));
      break;
    }
    size_t hl = make_hello(t->o, h, T_CONNRATE, HELLO_LEN, seq);
    if (write_full(fd, h, hl) < 0) {
      snprintf(t->err, sizeof t->err, "write: %s", strerror(errno));
      close(fd);
      break;
    }
    ssize_t got = read_full(fd, rep, hl);
    close(fd);
    if (got != (ssize_t)hl || (f && get32(rep) != HELLO_LEN) || memcmp(rep + f, "FSBENCHR", 8) ||
        get64(rep + f + 24) != seq) {
      snprintf(t->err, sizeof t->err, "bad reply: %s",
               got < 0 ? strerror(errno) : got == 0 ? "EOF instead of the reply" : "corrupted");
      break;
    }
    if (now >= t->t_measure) t->count++;
  }
  return NULL;
}

static int run_connrate(const struct bench_opts *o, struct target *tg, double secs,
                        struct bench_result *r) {
  int nt = o->conn_threads > 0 ? o->conn_threads : 1;
  struct cr_thread *th = calloc((size_t)nt, sizeof *th);
  pthread_t *tid = calloc((size_t)nt, sizeof *tid);
  int started = 0;
  if (!th || !tid) FAIL("out of memory");
  double warm = o->warmup_time < 0.1 ? o->warmup_time : 0.1; /* connections are new anyway */
  uint64_t t0 = bench_now_ns() + (uint64_t)(warm * 1e9);
  for (int i = 0; i < nt; i++) {
    th[i] = (struct cr_thread){.o = o, .tg = tg, .t_measure = t0,
                               .t_end = t0 + (uint64_t)(secs * 1e9),
                               .seq0 = (uint64_t)i << 40};
    if (pthread_create(&tid[i], NULL, connrate_thread, &th[i]) != 0) break;
    started++;
  }
  for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
  if (started < nt) FAIL("pthread_create failed");
  for (int i = 0; i < nt; i++) {
    if (th[i].err[0]) FAIL("%s", th[i].err);
    r->count += th[i].count;
  }
  r->secs = secs;
  r->rate = r->count / secs;
  r->ok = 1;
out:
  free(th);
  free(tid);
  return r->ok ? 0 : -1;
}

int bench_client_one(const struct bench_opts *o, int test, uint64_t size, double secs,
                     struct bench_result *r) {
  static struct target tg;
  memset(r, 0, sizeof *r);
  r->test = test;
  r->size = size;
  signal(SIGPIPE, SIG_IGN);
  if (resolve(o, &tg, r->err, sizeof r->err) < 0) return -1;
  switch (test) {
  case T_PINGPONG: return run_pingpong(o, &tg, size, secs, r);
  case T_STREAM: return run_stream(o, &tg, size, secs, r);
  case T_CONNRATE: return run_connrate(o, &tg, secs, r);
  default: snprintf(r->err, sizeof r->err, "unknown test %d", test); return -1;
  }
}
