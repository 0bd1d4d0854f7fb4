/* Shared helpers for the integration test programs; see common.h. */
#include "tests/progs/common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *it_prog = "itprog";

void it_die(int code, const char *fmt, ...)
{
  int e = errno;
  va_list ap;
  size_t len = strlen(fmt);
  fprintf(stderr, "%s: ", it_prog);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  if (len && fmt[len - 1] == ':')
    fprintf(stderr, " %s (%s)", strerror(e), it_errname(e));
  fputc('\n', stderr);
  exit(code);
}

void it_msg(const char *fmt, ...)
{
  va_list ap;
  fprintf(stderr, "%s: ", it_prog);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

const char *it_errname(int e)
{
  static __thread char buf[16];
  const char *n;
  if (e == 0)
    return "E0";
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  n = strerrorname_np(e);
  if (n)
    return n;
#else
  (void)n;
#endif
  snprintf(buf, sizeof buf, "E%d", e);
  return buf;
}

uint64_t it_size(const char *s)
{
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  switch (*end) {
  case 'k': case 'K': v <<= 10; end++; break;
  case 'm': case 'M': v <<= 20; end++; break;
  case 'g': case 'G': v <<= 30; end++; break;
  default: break;
  }
  if (end == s || *end)
    it_die(2, "bad size '%s'", s);
  return v;
}

uint64_t it_now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void it_sleep_us(unsigned us)
{
  struct timespec ts = { us / 1000000, (long)(us % 1000000) * 1000 };
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
}

static socklen_t fill_addr(int v6, const char *host, int port, struct sockaddr_storage *ss)
{
  memset(ss, 0, sizeof *ss);
  if (v6) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
    a->sin6_family = AF_INET6;
    a->sin6_port = htons((uint16_t)port);
    if (inet_pton(AF_INET6, host ? host : "::1", &a->sin6_addr) != 1)
      it_die(2, "bad IPv6 address '%s'", host);
    return sizeof *a;
  } else {
    struct sockaddr_in *a = (struct sockaddr_in *)ss;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    /* IT_HOST: run over an interface with a fabric behind it (the rdma VM) */
    const char *def = getenv("IT_HOST") && *getenv("IT_HOST") ? getenv("IT_HOST") : "127.0.0.1";
    if (inet_pton(AF_INET, host ? host : def, &a->sin_addr) != 1)
      it_die(2, "bad IPv4 address '%s'", host);
    return sizeof *a;
  }
}

int it_listen(int v6, const char *host, int port, int backlog, int *bound_port)
{
  struct sockaddr_storage ss;
  socklen_t len = fill_addr(v6, host, port, &ss);
  int one = 1;
  int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    it_die(2, "socket:");
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)&ss, len) < 0)
    it_die(2, "bind port %d:", port);
  if (listen(fd, backlog) < 0)
    it_die(2, "listen:");
  len = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
    it_die(2, "getsockname:");
  if (bound_port)
    *bound_port = ntohs(v6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
  return fd;
}

int it_connect(int v6, const char *host, int port)
{
  struct sockaddr_storage ss;
  socklen_t len = fill_addr(v6, host, port, &ss);
  int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
  int r;
  if (fd < 0)
    return -1;
  do
    r = connect(fd, (struct sockaddr *)&ss, len);
  while (r < 0 && errno == EINTR);
  if (r < 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

void it_write_file(const char *path, const char *text)
{
  char tmp[4096];
  FILE *f;
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  f = fopen(tmp, "w");
  if (!f)
    it_die(2, "fopen %s:", tmp);
  fputs(text, f);
  if (fclose(f) != 0 || rename(tmp, path) != 0)
    it_die(2, "write %s:", path);
}

void it_write_port(const char *path, int port)
{
  char buf[32];
  snprintf(buf, sizeof buf, "%d\n", port);
  it_write_file(path, buf);
}

ssize_t it_write_all(int fd, const void *buf, size_t n)
{
  const char *p = buf;
  size_t done = 0;
  while (done < n) {
    ssize_t r = write(fd, p + done, n - done);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    done += (size_t)r;
  }
  return (ssize_t)done;
}

ssize_t it_read_full(int fd, void *buf, size_t n)
{
  char *p = buf;
  size_t done = 0;
  while (done < n) {
    ssize_t r = read(fd, p + done, n - done);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    if (r == 0)
      break;
    done += (size_t)r;
  }
  return (ssize_t)done;
}

/* splitmix64: one 64-bit word per step. */
static uint64_t splitmix(uint64_t *s)
{
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void it_gen_init(struct it_gen *g, uint64_t seed)
{
  g->state = seed * 0x2545f4914f6cdd1dull + 1;
  g->word = 0;
  g->used = 8;
}

void it_gen_fill(struct it_gen *g, void *buf, size_t n)
{
  unsigned char *p = buf;
  while (n && g->used < 8) {
    *p++ = (unsigned char)(g->word >> (8 * g->used++));
    n--;
  }
  while (n >= 8) {
    uint64_t w = splitmix(&g->state); /* little-endian byte order as above */
    for (int i = 0; i < 8; i++)
      p[i] = (unsigned char)(w >> (8 * i));
    p += 8;
    n -= 8;
  }
  if (n) {
    g->word = splitmix(&g->state);
    g->used = 0;
    while (n--)
      *p++ = (unsigned char)(g->word >> (8 * g->used++));
  }
}

uint64_t it_rand(uint64_t *s)
{
  return splitmix(s);
}

/* CRC-32 (IEEE), slicing-by-8: fast enough to stay out of the way of a
 * loopback transfer. */
static uint32_t crc_tab[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
    crc_tab[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 8; t++)
      crc_tab[t][i] = (crc_tab[t - 1][i] >> 8) ^ crc_tab[0][crc_tab[t - 1][i] & 0xff];
}

uint32_t it_crc32(uint32_t crc, const void *buf, size_t n)
{
  const unsigned char *p = buf;
  pthread_once(&crc_once, crc_init);
  crc = ~crc;
  while (n >= 8) {
    uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
    uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
    crc = crc_tab[7][lo & 0xff] ^ crc_tab[6][(lo >> 8) & 0xff] ^ crc_tab[5][(lo >> 16) & 0xff] ^
          crc_tab[4][lo >> 24] ^ crc_tab[3][hi & 0xff] ^ crc_tab[2][(hi >> 8) & 0xff] ^
          crc_tab[1][(hi >> 16) & 0xff] ^ crc_tab[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--)
    crc = crc_tab[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return ~crc;
}

static size_t first_diff(const unsigned char *a, const unsigned char *b, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i])
      return i;
  return n;
}

int it_echo_roundtrip(int fd, uint64_t n, uint64_t seed, size_t chunk, char *err, size_t errlen)
{
  struct it_gen tx, rx;
  unsigned char *out = malloc(chunk), *in = malloc(chunk), *want = malloc(chunk);
  size_t out_len = 0, out_off = 0;
  uint64_t sent = 0, got = 0;
  int rc = -1;

  if (!out || !in || !want) {
    snprintf(err, errlen, "out of memory");
    goto done;
  }
  it_gen_init(&tx, seed);
  it_gen_init(&rx, seed);
  while (got < n) {
    struct pollfd p = { .fd = fd, .events = POLLIN };
    if (sent < n || out_off < out_len)
      p.events |= POLLOUT;
    int pr = poll(&p, 1, it_poll_ms());
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr <= 0) {
      snprintf(err, errlen, "poll %s after sent=%llu got=%llu of %llu", pr == 0 ? "timeout" : it_errname(errno),
               (unsigned long long)sent, (unsigned long long)got, (unsigned long long)n);
      goto done;
    }
    if (p.revents & POLLOUT) {
      if (out_off == out_len && sent < n) {
        out_len = (size_t)(n - sent < chunk ? n - sent : chunk);
        it_gen_fill(&tx, out, out_len);
        out_off = 0;
        sent += out_len;
      }
      if (out_off < out_len) {
        ssize_t w = send(fd, out + out_off, out_len - out_off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0)
          out_off += (size_t)w;
        else if (w < 0 && errno != EAGAIN && errno != EINTR) {
          snprintf(err, errlen, "send: %s", it_errname(errno));
          goto done;
        }
      }
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      size_t want_n = (size_t)(n - got < chunk ? n - got : chunk);
      ssize_t r = recv(fd, in, want_n, MSG_DONTWAIT);
      if (r == 0) {
        snprintf(err, errlen, "unexpected EOF after %llu of %llu echoed bytes", (unsigned long long)got,
                 (unsigned long long)n);
        goto done;
      }
      if (r < 0) {
        if (errno == EAGAIN || errno == EINTR)
          continue;
        snprintf(err, errlen, "recv: %s after %llu bytes", it_errname(errno), (unsigned long long)got);
        goto done;
      }
      it_gen_fill(&rx, want, (size_t)r);
      size_t d = first_diff(in, want, (size_t)r);
      if (d < (size_t)r) {
        snprintf(err, errlen, "echo mismatch at offset %llu", (unsigned long long)(got + d));
        goto done;
      }
      got += (uint64_t)r;
    }
  }
  rc = 0;
done:
  free(out);
  free(in);
  free(want);
  return rc;
}

int it_echo_finish(int fd, char *err, size_t errlen)
{
  char c;
  ssize_t r;
  if (shutdown(fd, SHUT_WR) < 0) {
    snprintf(err, errlen, "shutdown: %s", it_errname(errno));
    return -1;
  }
  /* The fd may be non-blocking: wait for the EOF with poll(). */
  for (;;) {
    struct pollfd p = { .fd = fd, .events = POLLIN };
    int pr = poll(&p, 1, it_poll_ms());
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr == 0) {
      snprintf(err, errlen, "after shutdown no EOF within %d ms", it_poll_ms());
      return -1;
    }
    r = recv(fd, &c, 1, MSG_DONTWAIT);
    if (r < 0 && (errno == EINTR || errno == EAGAIN))
      continue; /* EAGAIN after POLLIN is spurious but legal: poll again */
    break;
  }
  if (r != 0) {
    snprintf(err, errlen, "after shutdown expected EOF, got %s", r > 0 ? "data" : it_errname(errno));
    return -1;
  }
  return 0;
}

int it_poll_ms(void)
{
  static int ms;
  if (!ms) {
    const char *e = getenv("FABSOCK_IT_POLL_MS");
    ms = e && atoi(e) > 0 ? atoi(e) : 15000; /* generous: the machine may be busy */
  }
  return ms;
}

void it_hold(const char *path)
{
  char ready[4096];
  struct stat st;
  if (!path || !*path)
    return;
  snprintf(ready, sizeof ready, "%s.ready", path);
  it_write_file(ready, "ready\n");
  for (int i = 0; i < 3000 && stat(path, &st) != 0; i++)
    it_sleep_us(10000);
}

char *it_stream_client(int port, uint64_t n, uint64_t *first, const char *hold, int *fd)
{
  if (!port || !n)
    it_die(2, "client needs -p and -n");
  if (!*first || *first > n)
    *first = n / 2;
  char *buf = malloc(n);
  if (!buf)
    it_die(2, "out of memory");
  struct it_gen g;
  it_gen_init(&g, 42);
  it_gen_fill(&g, buf, n);
  *fd = it_connect(0, NULL, port);
  if (*fd < 0)
    it_die(2, "connect:");
  it_hold(hold);
  if (it_write_all(*fd, buf, *first) < 0)
    it_die(1, "send:");
  return buf;
}

bool it_stream_server_first(int fd, uint64_t rfirst, uint64_t *bytes, uint32_t *crc)
{
  char *buf = malloc(rfirst ? rfirst : 1);
  if (!buf)
    it_die(2, "out of memory");
  ssize_t got = it_read_full(fd, buf, rfirst);
  if (got < 0)
    it_die(1, "recv:");
  *crc = it_crc32(*crc, buf, (size_t)got);
  *bytes += (uint64_t)got;
  free(buf);
  return (uint64_t)got == rfirst;
}

int it_count_fds(void)
{
  return it_fd_snapshot(NULL, 0);
}

int it_fd_snapshot(unsigned char *open_fds, int max)
{
  int n = 0;
  if (open_fds)
    memset(open_fds, 0, (size_t)max);
  DIR *d = opendir("/proc/self/fd");
  if (!d)
    it_die(2, "opendir /proc/self/fd:");
  int self = dirfd(d);
  struct dirent *e;
  while ((e = readdir(d))) {
    int fd = atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == self)
      continue;
    n++;
    if (open_fds && fd >= 0 && fd < max)
      open_fds[fd] = 1;
  }
  closedir(d);
  return n;
}

void it_fd_report_new(const unsigned char *before, int max, FILE *out)
{
  unsigned char *now = malloc((size_t)max);
  if (!now)
    it_die(2, "out of memory");
  it_fd_snapshot(now, max);
  for (int fd = 0; fd < max; fd++) {
    if (!now[fd] || before[fd])
      continue;
    char path[64], target[256];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    target[n > 0 ? n : 0] = 0;
    fprintf(out, "new descriptor %d: %s\n", fd, target);
  }
  free(now);
}
