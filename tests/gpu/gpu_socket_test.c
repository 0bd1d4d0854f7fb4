/* Device buffers through real TCP sockets, for a machine with a GPU; run it
 * under LD_PRELOAD=libfabsock.so (tests/gpu/run.sh does).
 *
 * The program is a plain CUDA application: it dlopen()s the driver, allocates
 * device memory with the driver API and hands device pointers to send() and
 * recv() on a loopback TCP connection.  Plain kernel TCP fails such calls with
 * EFAULT; libfabsock stages them.  So a device transfer that fails with EFAULT
 * is "ok" without libfabsock in LD_PRELOAD (tests/gpu/run.sh --plain: the
 * kernel's baseline) and a failure under it.  Without a driver or a device:
 * "1..0 # SKIP ...", exit 0.
 *
 * Covers: sizes 1 B .. 256 MiB (GPU_TEST_MAX_MB lowers the top), device to
 * device, device to host, host to device, managed and pinned memory, and a
 * buffer freed and allocated again (usually at the same address, with new
 * contents: a registration cache keyed by address alone would send stale
 * bytes).  Checksums compare what arrived with what was sent. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "tests/gpu/cudrv.h"

static bool preloaded; /* libfabsock is in LD_PRELOAD: device buffers must work */

struct xfer {
  int fd;
  const char *buf;
  size_t n, done;
  int err;
};

static void *sender(void *arg)
{
  struct xfer *x = arg;
  while (x->done < x->n) {
    ssize_t w = send(x->fd, x->buf + x->done, x->n - x->done, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      x->err = errno;
      break;
    }
    x->done += (size_t)w;
  }
  shutdown(x->fd, SHUT_WR);
  return NULL;
}

static int connected_pair(int *cfd, int *sfd)
{
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  socklen_t al = sizeof a;
  if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 1) != 0 ||
      getsockname(l, (struct sockaddr *)&a, &al) != 0)
    return -1;
  *cfd = socket(AF_INET, SOCK_STREAM, 0);
  if (*cfd < 0 || connect(*cfd, (struct sockaddr *)&a, sizeof a) != 0)
    return -1;
  *sfd = accept(l, NULL, NULL);
  close(l);
  return *sfd < 0 ? -1 : 0;
}

/* Send n bytes from src and receive them into dst over a fresh connection.
 * Returns 0, or the errno of the side that failed in *serr / *rerr. */
static int recv_flags, recv_calls; /* the receiving loop's flags; how many recv calls it made */

static int transfer(const void *src, void *dst, size_t n, int *serr, int *rerr, double *secs)
{
  int cfd, sfd;
  *serr = *rerr = 0;
  if (connected_pair(&cfd, &sfd) != 0) {
    *serr = errno;
    return -1;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  struct xfer x = { cfd, src, n, 0, 0 };
  pthread_t th;
  pthread_create(&th, NULL, sender, &x);
  size_t got = 0;
  recv_calls = 0;
  while (got < n) {
    recv_calls++;
    ssize_t r = recv(sfd, (char *)dst + got, n - got, recv_flags);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      *rerr = r < 0 ? errno : EPIPE; /* EOF before n bytes: the sender failed */
      break;
    }
    got += (size_t)r;
  }
  close(sfd); /* unblocks a sender stuck on a receiver that gave up */
  pthread_join(th, NULL);
  close(cfd);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  *secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  *serr = x.err;
  return (*serr || *rerr) ? -1 : 0;
}

enum kind { HOST, DEVICE, MANAGED, PINNED };
static const char *kind_name[] = { "host", "device", "managed", "pinned" };

struct buf {
  enum kind k;
  void *p; /* what send/recv get */
  size_t n;
};

static int buf_alloc(struct buf *b, enum kind k, size_t n)
{
  fs_cu_ptr d = 0;
  fs_cu_result r = 0;
  b->k = k;
  b->n = n;
  switch (k) {
  case HOST: b->p = malloc(n); return b->p ? 0 : -1;
  case DEVICE: r = cu.cuMemAlloc_v2(&d, n); b->p = (void *)(uintptr_t)d; break;
  case MANAGED: r = cu.cuMemAllocManaged(&d, n, 1 /* CU_MEM_ATTACH_GLOBAL */); b->p = (void *)(uintptr_t)d; break;
  case PINNED: r = cu.cuMemHostAlloc(&b->p, n, 0); break;
  }
  if (r != 0)
    printf("# allocating %zu bytes of %s memory: %d %s\n", n, kind_name[k], r, cu_err(r));
  return r == 0 ? 0 : -1;
}

static void buf_free(struct buf *b)
{
  switch (b->k) {
  case HOST: free(b->p); break;
  case DEVICE: case MANAGED: cu.cuMemFree_v2((fs_cu_ptr)(uintptr_t)b->p); break;
  case PINNED: cu.cuMemFreeHost(b->p); break;
  }
}

static int buf_put(struct buf *b, const void *host, size_t n)
{
  if (b->k != DEVICE) {
    memcpy(b->p, host, n);
    return 0;
  }
  return cu.cuMemcpyHtoD_v2((fs_cu_ptr)(uintptr_t)b->p, host, n) == 0 ? 0 : -1;
}

static int buf_get(struct buf *b, void *host, size_t n)
{
  if (b->k != DEVICE) {
    memcpy(host, b->p, n);
    return 0;
  }
  return cu.cuMemcpyDtoH_v2(host, (fs_cu_ptr)(uintptr_t)b->p, n) == 0 ? 0 : -1;
}

static unsigned char *hsrc, *hdst;

/* A CPU touching device memory (e.g. a fabric memcpy()ing a device pointer
 * that was not classified) is SIGSEGV: say so in TAP rather than vanish.
 * (No fork per transfer: CUDA cannot be used in a child after fork.) */
static void on_segv(int sig)
{
  static const char msg[] =
      "Bail out! SIGSEGV: the CPU touched device memory (a data path without fs_gpu_classify?)\n";
  (void)sig;
  /* the raw system call: write() may be libfabsock's, mid-crash */
  long w = syscall(SYS_write, 1, msg, sizeof msg - 1);
  (void)w;
  _exit(1);
}

/* One TAP line: src (kind a) -> socket -> dst (kind b), n bytes. */
static void check_pair(struct buf *s, struct buf *d, size_t n, uint64_t seed, const char *what)
{
  pattern(hsrc, n, seed);
  memset(hdst, 0, n);
  if (buf_put(s, hsrc, n) != 0 || buf_put(d, hdst, n) != 0) {
    tap(0, NULL, "%s %zu bytes %s -> %s: setup copies failed", what, n, kind_name[s->k], kind_name[d->k]);
    return;
  }
  int serr, rerr;
  double secs = 0;
  int rc = transfer(s->p, d->p, n, &serr, &rerr, &secs);
  if (rc != 0) {
    char why[128];
    snprintf(why, sizeof why, "send: %s, recv: %s", serr ? strerror(serr) : "ok",
             rerr ? strerror(rerr) : "ok");
    bool efault = serr == EFAULT || rerr == EFAULT;
    if (efault && !preloaded && (s->k == DEVICE || d->k == DEVICE))
      tap(1, NULL, "%s %zu bytes %s -> %s refused by the kernel (%s), as expected without libfabsock",
          what, n, kind_name[s->k], kind_name[d->k], why);
    else
      tap(0, NULL, "%s %zu bytes %s -> %s (%s)", what, n, kind_name[s->k], kind_name[d->k], why);
    return;
  }
  if (buf_get(d, hdst, n) != 0) {
    tap(0, NULL, "%s %zu bytes: reading the result back failed", what, n);
    return;
  }
  uint64_t want = fnv(hsrc, n), got = fnv(hdst, n);
  tap(want == got, NULL, "%s %zu bytes %s -> %s checksum %016llx%s%016llx (%.1f MB/s)", what, n,
      kind_name[s->k], kind_name[d->k], (unsigned long long)got, want == got ? " == " : " != ",
      (unsigned long long)want, secs > 0 ? (double)n / secs / 1e6 : 0.0);
}

int main(void)
{
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (cudrv_open() != 0)
    return 0;
  signal(SIGSEGV, on_segv);
  signal(SIGBUS, on_segv);
  preloaded = getenv("LD_PRELOAD") && strstr(getenv("LD_PRELOAD"), "libfabsock");
  size_t max = 256u << 20;
  const char *mm = getenv("GPU_TEST_MAX_MB");
  if (mm && atoi(mm) > 0)
    max = (size_t)atoi(mm) << 20;
  static const size_t all[] = { 1, 2, 4095, 4096, 65537, 1u << 20, (4u << 20) + 1, 16u << 20,
                                (64u << 20) + 3, 256u << 20 };
  size_t sizes[16];
  int ns = 0;
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i] <= max)
      sizes[ns++] = all[i];
  hsrc = malloc(max);
  hdst = malloc(max);
  if (!hsrc || !hdst) {
    printf("1..0 # SKIP cannot allocate %zu bytes of host memory\n", max);
    return 0;
  }
  printf("1..%d\n", ns + 9);
  printf("# driver %s; LD_PRELOAD=%s\n", cu.name, getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "");

  /* control: host memory must always work */
  struct buf hs, hd, ds, dd;
  size_t mid = (1u << 20) + 1;
  if (buf_alloc(&hs, HOST, max) || buf_alloc(&hd, HOST, max)) {
    printf("Bail out! host allocation\n");
    return 1;
  }
  check_pair(&hs, &hd, mid, 1, "control");

  for (int i = 0; i < ns; i++) {
    if (buf_alloc(&ds, DEVICE, sizes[i]) || buf_alloc(&dd, DEVICE, sizes[i])) {
      tap(0, NULL, "device allocation of %zu bytes", sizes[i]);
      continue;
    }
    check_pair(&ds, &dd, sizes[i], sizes[i], "size");
    buf_free(&ds);
    buf_free(&dd);
  }

  /* one side device, the other host */
  if (buf_alloc(&ds, DEVICE, mid) == 0) {
    check_pair(&ds, &hd, mid, 2, "one-sided");
    check_pair(&hs, &ds, mid, 3, "one-sided");
    buf_free(&ds);
  } else {
    tap(0, NULL, "one-sided: device allocation");
    tap(0, NULL, "one-sided: device allocation");
  }

  /* managed and pinned memory are host-accessible: the kernel path works */
  struct buf ms, md, ps, pd;
  if (buf_alloc(&ms, MANAGED, mid) == 0 && buf_alloc(&md, MANAGED, mid) == 0) {
    check_pair(&ms, &md, mid, 4, "managed");
    buf_free(&ms);
    buf_free(&md);
  } else {
    tap(0, NULL, "managed allocation");
  }
  if (buf_alloc(&ps, PINNED, mid) == 0 && buf_alloc(&pd, PINNED, mid) == 0) {
    check_pair(&ps, &pd, mid, 5, "pinned");
    buf_free(&ps);
    buf_free(&pd);
  } else {
    tap(0, NULL, "pinned allocation");
  }

  /* MSG_WAITALL into device memory: one call returns all of it, as the
   * kernel's would (a staged receive must not stop at what has arrived);
   * larger than two staging buffers where the test's size allows */
  size_t wn = max >= (9u << 20) + 1 ? (9u << 20) + 1 : mid;
  if (buf_alloc(&ds, DEVICE, wn) == 0 && buf_alloc(&dd, DEVICE, wn) == 0) {
    recv_flags = MSG_WAITALL;
    check_pair(&ds, &dd, wn, 8, "waitall");
    tap(recv_calls == 1 || !preloaded, NULL, "waitall: %d recv call(s) for %zu bytes", recv_calls, wn);
    recv_flags = 0;
    buf_free(&ds);
    buf_free(&dd);
  } else {
    tap(0, NULL, "waitall: device allocation");
    tap(0, NULL, "waitall: device allocation");
  }

  /* free and allocate again: new contents (probably) at the same address */
  size_t rn = 8u << 20;
  if (buf_alloc(&ds, DEVICE, rn) == 0 && buf_alloc(&dd, DEVICE, rn) == 0) {
    check_pair(&ds, &dd, rn, 6, "before-realloc");
    void *old = ds.p;
    buf_free(&ds);
    if (buf_alloc(&ds, DEVICE, rn) == 0) {
      printf("# reallocated at the %s address (%p -> %p)\n", ds.p == old ? "same" : "another", old, ds.p);
      check_pair(&ds, &dd, rn, 7, "after-realloc");
      buf_free(&ds);
    } else {
      tap(0, NULL, "after-realloc: device allocation");
    }
    buf_free(&dd);
  } else {
    tap(0, NULL, "before-realloc: device allocation");
    tap(0, NULL, "after-realloc: device allocation");
  }
  buf_free(&hs);
  buf_free(&hd);
  return tap_failed ? 1 : 0;
}
