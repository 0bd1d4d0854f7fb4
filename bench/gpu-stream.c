/* gpu-stream: GPU device memory through a TCP connection, two processes.
 *
 * A CUDA application that moves device data over a socket either stages it
 * itself (cuMemcpyDtoH into a pinned buffer, send; recv, cuMemcpyHtoD: works on
 * any socket) or hands the device pointer to send()/recv(), which only works
 * under libfabsock (the kernel answers EFAULT).  This program measures one of
 * the two (--mode stage|direct), device memory at both ends:
 *   stream:   the client sends --bytes in messages of SIZE, the server receives
 *             them and answers one byte; GB/s, median of --rounds.  The
 *             server then checks its device buffer against the pattern.
 *   pingpong: SIZE bytes each way (the server echoes from device memory);
 *             round trip p50/p99.
 * Staging is what a plain application writes: one pinned buffer, chunks of at
 * most 4 MiB, copy then send (recv then copy), no overlap.
 * --mode floor: the device copies alone, no socket, one process: a stream
 * byte's DtoH and HtoD through the pinned buffer; a round trip's two of each.
 *
 * fork() happens before either process loads the driver (CUDA cannot be used
 * in a child forked after cuInit).  Exit 0; 1 on a wrong byte or a failed
 * call; 3 when the socket refuses device memory (EFAULT: plain TCP and
 * --mode direct); 77 with "# SKIP ..." without a driver or a device.
 * Output: a table, or with --json one JSON object per measurement. */
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/stats.h"
#include "tests/gpu/cudrv.h"

enum { T_STREAM = 1, T_PINGPONG = 2, T_END = 3 };
enum { CHUNK = 4u << 20 };

/* Control header, client to server, before each phase (host byte order: both
 * ends are this program on one host). */
struct hdr {
  uint32_t test, pad;
  uint64_t size, count;
};

static bool direct, floor_only;
static unsigned char *pin; /* stage mode: the pinned bounce buffer (CHUNK bytes) */

static void die(const char *what, int err)
{
  fprintf(stderr, "gpu-stream: %s: %s\n", what, strerror(err));
  exit(err == EFAULT ? 3 : 1);
}

static void cu_check(fs_cu_result r, const char *what)
{
  if (r != 0) {
    fprintf(stderr, "gpu-stream: %s: %d %s\n", what, r, cu_err(r));
    exit(1);
  }
}

static void send_all(int fd, const void *p, size_t n)
{
  for (size_t d = 0; d < n;) {
    ssize_t w = send(fd, (const char *)p + d, n - d, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      die("send", errno);
    d += (size_t)w;
  }
}

static void recv_all(int fd, void *p, size_t n)
{
  for (size_t d = 0; d < n;) {
    ssize_t r = recv(fd, (char *)p + d, n - d, 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      die("recv", r < 0 ? errno : EPIPE);
    d += (size_t)r;
  }
}

/* One message of n bytes from device memory at dev. */
static void dsend(int fd, fs_cu_ptr dev, size_t n)
{
  if (direct) {
    send_all(fd, (const void *)(uintptr_t)dev, n);
    return;
  }
  for (size_t d = 0; d < n;) {
    size_t c = n - d < CHUNK ? n - d : CHUNK;
    cu_check(cu.cuMemcpyDtoH_v2(pin, dev + d, c), "cuMemcpyDtoH");
    send_all(fd, pin, c);
    d += c;
  }
}

static void drecv(int fd, fs_cu_ptr dev, size_t n)
{
  if (direct) {
    recv_all(fd, (void *)(uintptr_t)dev, n);
    return;
  }
  for (size_t d = 0; d < n;) {
    size_t c = n - d < CHUNK ? n - d : CHUNK;
    recv_all(fd, pin, c);
    cu_check(cu.cuMemcpyHtoD_v2(dev + d, pin, c), "cuMemcpyHtoD");
    d += c;
  }
}

static int open_cuda(void)
{
  if (cudrv_open() != 0)
    return -1;
  if (!direct || floor_only)
    cu_check(cu.cuMemHostAlloc((void **)&pin, CHUNK, 0), "cuMemHostAlloc");
  return 0;
}

static int server(int lfd, size_t max)
{
  int fd = accept(lfd, NULL, NULL);
  if (fd < 0)
    die("accept", errno);
  close(lfd);
  if (open_cuda() != 0)
    return 77;
  fs_cu_ptr dev;
  cu_check(cu.cuMemAlloc_v2(&dev, max), "cuMemAlloc");
  unsigned char *want = malloc(max), *got = malloc(max);
  if (!want || !got)
    die("malloc", ENOMEM);
  for (;;) {
    struct hdr h;
    recv_all(fd, &h, sizeof h);
    if (h.test == T_END)
      return 0;
    if (h.size == 0 || h.size > max)
      die("header", EPROTO);
    if (h.test == T_STREAM) {
      memset(got, 0, h.size); /* a round that delivers nothing must not pass */
      cu_check(cu.cuMemcpyHtoD_v2(dev, got, h.size), "cuMemcpyHtoD");
      for (uint64_t i = 0; i < h.count; i++)
        drecv(fd, dev, h.size);
      cu_check(cu.cuMemcpyDtoH_v2(got, dev, h.size), "cuMemcpyDtoH");
      pattern(want, h.size, h.size);
      char ok = memcmp(want, got, h.size) == 0 ? 'y' : 'n';
      send_all(fd, &ok, 1);
    } else {
      for (uint64_t i = 0; i < h.count; i++) {
        drecv(fd, dev, h.size);
        dsend(fd, dev, h.size);
      }
    }
  }
}

struct result { /* a stream's (gbps > 0) or a ping-pong's */
  size_t size;
  double gbps;         /* stream */
  struct lat_stats st; /* pingpong */
};

static const char *mode_name(void)
{
  return floor_only ? "floor" : direct ? "direct" : "stage";
}

static void report(const struct result *r, bool json, const char *label)
{
  if (json) {
    if (r->gbps > 0)
      printf("{\"label\":\"%s\",\"mode\":\"%s\",\"test\":\"stream\",\"size\":%zu,\"gbps\":%.3f}\n",
             label, mode_name(), r->size, r->gbps);
    else
      printf("{\"label\":\"%s\",\"mode\":\"%s\",\"test\":\"pingpong\",\"size\":%zu,\"n\":%llu,"
             "\"p50_us\":%.2f,\"p99_us\":%.2f,\"mean_us\":%.2f}\n",
             label, mode_name(), r->size, (unsigned long long)r->st.n, r->st.p50_us,
             r->st.p99_us, r->st.mean_us);
  } else if (r->gbps > 0) {
    printf("%-8s %-6s stream   %10zu  %8.2f GB/s\n", label, mode_name(), r->size,
           r->gbps);
  } else {
    printf("%-8s %-6s pingpong %10zu  p50 %8.1f us  p99 %8.1f us  (n=%llu)\n", label,
           mode_name(), r->size, r->st.p50_us, r->st.p99_us,
           (unsigned long long)r->st.n);
  }
  fflush(stdout);
}

/* The copies alone (--mode floor): what staging costs without any socket. */
static int floor_run(const size_t *sizes, int ns, const size_t *pps, int np, size_t max,
                     size_t total, int rounds, int pp_iters, bool json, const char *label)
{
  if (open_cuda() != 0)
    return 77;
  fs_cu_ptr dev;
  cu_check(cu.cuMemAlloc_v2(&dev, max), "cuMemAlloc");
  for (int i = 0; i < ns; i++) {
    size_t s = sizes[i];
    uint64_t count = total / s > 4 ? total / s : 4;
    double gb[64];
    for (int r = -1; r < rounds; r++) {
      uint64_t t0 = bench_now_ns();
      for (uint64_t k = 0; k < count; k++)
        for (size_t d = 0; d < s; d += CHUNK) {
          size_t c = s - d < CHUNK ? s - d : CHUNK;
          cu_check(cu.cuMemcpyDtoH_v2(pin, dev + d, c), "cuMemcpyDtoH");
          cu_check(cu.cuMemcpyHtoD_v2(dev + d, pin, c), "cuMemcpyHtoD");
        }
      if (r >= 0)
        gb[r] = (double)s * (double)count / (double)(bench_now_ns() - t0);
    }
    struct result res = { s, bench_median(gb, (size_t)rounds), { 0 } };
    report(&res, json, label);
  }
  uint64_t *v = malloc(sizeof *v * (size_t)pp_iters);
  if (!v)
    die("malloc", ENOMEM);
  for (int i = 0; i < np; i++) {
    size_t s = pps[i];
    int warm = pp_iters / 10 > 100 ? pp_iters / 10 : 100;
    for (int k = 0; k < warm + pp_iters; k++) {
      uint64_t t0 = bench_now_ns();
      for (int side = 0; side < 2; side++)
        for (size_t d = 0; d < s; d += CHUNK) {
          size_t c = s - d < CHUNK ? s - d : CHUNK;
          cu_check(cu.cuMemcpyDtoH_v2(pin, dev + d, c), "cuMemcpyDtoH");
          cu_check(cu.cuMemcpyHtoD_v2(dev + d, pin, c), "cuMemcpyHtoD");
        }
      if (k >= warm)
        v[k - warm] = bench_now_ns() - t0;
    }
    struct result res = { s, 0, { 0 } };
    bench_lat_stats(v, (size_t)pp_iters, &res.st);
    report(&res, json, label);
  }
  free(v);
  return 0;
}

static size_t parse_size(const char *s)
{
  char *e;
  unsigned long long v = strtoull(s, &e, 10);
  switch (*e) {
  case 'k': case 'K': v <<= 10; e++; break;
  case 'm': case 'M': v <<= 20; e++; break;
  case 'g': case 'G': v <<= 30; e++; break;
  }
  if (*e || v == 0) {
    fprintf(stderr, "gpu-stream: bad size '%s'\n", s);
    exit(2);
  }
  return (size_t)v;
}

static int list(const char *s, size_t *out, int max)
{
  int n = 0;
  char *c = strdup(s), *save = NULL;
  for (char *t = strtok_r(c, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save))
    out[n++] = parse_size(t);
  free(c);
  return n;
}

int main(int argc, char **argv)
{
  static const struct option lo[] = {
      {"mode", required_argument, 0, 'm'}, {"sizes", required_argument, 0, 's'},
      {"pp-sizes", required_argument, 0, 'p'}, {"bytes", required_argument, 0, 'b'},
      {"rounds", required_argument, 0, 'r'}, {"pp-iters", required_argument, 0, 'n'},
      {"label", required_argument, 0, 'l'}, {"json", no_argument, 0, 'j'},
      {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  const char *sizes_s = "64k,1m,4m,16m,64m", *pp_s = "64,4k,64k,1m", *label = "run";
  size_t total = 1u << 30;
  int rounds = 3, pp_iters = 2000, o;
  bool json = false;
  while ((o = getopt_long(argc, argv, "m:s:p:b:r:n:l:jh", lo, NULL)) != -1) {
    switch (o) {
    case 'm':
      direct = strcmp(optarg, "direct") == 0;
      floor_only = strcmp(optarg, "floor") == 0;
      break;
    case 's': sizes_s = optarg; break;
    case 'p': pp_s = optarg; break;
    case 'b': total = parse_size(optarg); break;
    case 'r': rounds = atoi(optarg) > 0 ? atoi(optarg) : 1; break;
    case 'n': pp_iters = atoi(optarg) > 0 ? atoi(optarg) : 1; break;
    case 'l': label = optarg; break;
    case 'j': json = true; break;
    default:
      printf("usage: gpu-stream [--mode stage|direct|floor] [--sizes 64k,1m,...] [--pp-sizes 64,...]\n"
             "       [--bytes PER_ROUND] [--rounds N] [--pp-iters N] [--label L] [--json]\n");
      return o == 'h' ? 0 : 2;
    }
  }
  if (rounds > 64)
    rounds = 64;
  size_t sizes[16], pps[16], max = 0;
  int ns = list(sizes_s, sizes, 16), np = list(pp_s, pps, 16);
  for (int i = 0; i < ns; i++)
    max = sizes[i] > max ? sizes[i] : max;
  for (int i = 0; i < np; i++)
    max = pps[i] > max ? pps[i] : max;

  if (floor_only)
    return floor_run(sizes, ns, pps, np, max, total, rounds, pp_iters, json, label);
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  socklen_t al = sizeof a;
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, 1) != 0 ||
      getsockname(lfd, (struct sockaddr *)&a, &al) != 0)
    die("listen", errno);
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0)
    die("fork", errno);
  if (pid == 0)
    _exit(server(lfd, max));
  close(lfd);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
    die("connect", errno);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (open_cuda() != 0) {
    close(fd);
    waitpid(pid, NULL, 0);
    return 77;
  }
  fs_cu_ptr dev;
  unsigned char *host = malloc(max);
  if (!host)
    die("malloc", ENOMEM);
  cu_check(cu.cuMemAlloc_v2(&dev, max), "cuMemAlloc");
  int rc = 0;
  for (int i = 0; i < ns; i++) {
    size_t s = sizes[i];
    pattern(host, s, s);
    cu_check(cu.cuMemcpyHtoD_v2(dev, host, s), "cuMemcpyHtoD");
    uint64_t count = total / s > 4 ? total / s : 4;
    double gb[64];
    for (int r = -1; r < rounds; r++) { /* round -1 warms up (and lets the upgrade happen) */
      struct hdr h = { T_STREAM, 0, s, count };
      uint64_t t0 = bench_now_ns();
      send_all(fd, &h, sizeof h);
      for (uint64_t k = 0; k < count; k++)
        dsend(fd, dev, s);
      char ok;
      recv_all(fd, &ok, 1);
      uint64_t t1 = bench_now_ns();
      if (ok != 'y') {
        fprintf(stderr, "gpu-stream: %zu-byte stream: the server's device buffer is wrong\n", s);
        rc = 1;
      }
      if (r >= 0)
        gb[r] = (double)s * (double)count / (double)(t1 - t0);
    }
    struct result res = { s, bench_median(gb, (size_t)rounds), { 0 } };
    report(&res, json, label);
  }
  uint64_t *ns_v = malloc(sizeof *ns_v * (size_t)pp_iters);
  if (!ns_v)
    die("malloc", ENOMEM);
  for (int i = 0; i < np; i++) {
    size_t s = pps[i];
    pattern(host, s, s + 1);
    cu_check(cu.cuMemcpyHtoD_v2(dev, host, s), "cuMemcpyHtoD");
    int warm = pp_iters / 10 > 100 ? pp_iters / 10 : 100;
    struct hdr h = { T_PINGPONG, 0, s, (uint64_t)(warm + pp_iters) };
    send_all(fd, &h, sizeof h);
    for (int k = 0; k < warm + pp_iters; k++) {
      uint64_t t0 = bench_now_ns();
      dsend(fd, dev, s);
      drecv(fd, dev, s);
      if (k >= warm)
        ns_v[k - warm] = bench_now_ns() - t0;
    }
    unsigned char *back = malloc(s);
    cu_check(cu.cuMemcpyDtoH_v2(back, dev, s), "cuMemcpyDtoH");
    if (memcmp(back, host, s) != 0) {
      fprintf(stderr, "gpu-stream: %zu-byte ping-pong came back wrong\n", s);
      rc = 1;
    }
    free(back);
    struct result res = { s, 0, { 0 } };
    bench_lat_stats(ns_v, (size_t)pp_iters, &res.st);
    report(&res, json, label);
  }
  struct hdr end = { T_END, 0, 0, 0 };
  send_all(fd, &end, sizeof end);
  close(fd);
  int st;
  if (waitpid(pid, &st, 0) == pid && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
    fprintf(stderr, "gpu-stream: the server failed (status %d)\n", st);
    rc = 1;
  }
  return rc;
}
