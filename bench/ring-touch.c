/* ring-touch: what a shm ring's pages cost the first time they are written,
 * against every later pass, on this machine.
 *
 *   ring-touch [-r ROUNDS] [--json] [SIZE_KIB ...]   (default 256 1024 4096)
 *
 * For each size, ROUNDS times (default 5): a fresh sealed-size memfd mapped
 * shared, as fabric/shm maps a channel; the first write pass (memset: a
 * page fault and a zeroed page per 4 KiB), a second pass (memory speed),
 * and a read pass through a second mapping (the peer's faults on pages
 * that exist: the kernel maps up to 16 per fault).  Prints the median of
 * each in ms and the first pass's us per page.  Why the rings start small
 * and grow with the traffic (fabric/ring.h, SKIP): a 4 MiB ring written
 * once costs what copying tens of MiB through it does where faults are
 * dear (a VM).
 *
 * Then the same bytes written into another fresh memfd through its fd
 * (pwrite, 128 KiB at a time: the kernel copies through its own mapping,
 * as a sendfile into the memfd would), and after that through a mapping
 * of it (pages that exist, first touched by this process): whether the
 * first write's cost is the page (allocated and zeroed) or the mapping of
 * it (where a guest's page tables are shadowed, each first user access
 * traps whoever made the page).
 *
 * Last, what libfabsock does while a ring is new to an end (base/kcopy.h):
 * the same bytes written into a fresh memfd's mapping by the kernel
 * (process_vm_writev on this process, 128 KiB at a time), then read back
 * out of a second mapping by the kernel (process_vm_readv): the kernel
 * reaches the pages through its own mapping, so no user access traps. */
#define _GNU_SOURCE 1
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n)
{
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Write len bytes into a fresh memfd through the fd, then through a
 * mapping (ms each in out[0], out[1]); 0 or -1. */
static int round_fd(size_t len, double out[2])
{
  static unsigned char src[128 << 10];
  memset(src, 3, sizeof src);
  int fd = memfd_create("ring-touch", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)len) < 0)
    return -1;
  unsigned char *a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (a == MAP_FAILED) {
    close(fd);
    return -1;
  }
  int rc = 0;
  double t0 = now_ms();
  for (size_t off = 0; off < len && rc == 0; off += sizeof src) {
    size_t n = len - off < sizeof src ? len - off : sizeof src;
    if (pwrite(fd, src, n, (off_t)off) != (ssize_t)n)
      rc = -1;
  }
  double t1 = now_ms();
  memset(a, 4, len);
  double t2 = now_ms();
  out[0] = t1 - t0;
  out[1] = t2 - t1;
  munmap(a, len);
  close(fd);
  return rc;
}

/* A fresh memfd of len bytes mapped twice, shared (the two ends of a
 * ring): 0, or -1. */
static int two_maps(size_t len, unsigned char **a, unsigned char **b)
{
  int fd = memfd_create("ring-touch", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)len) < 0)
    return -1;
  *a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  *b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  return *a == MAP_FAILED || *b == MAP_FAILED ? -1 : 0;
}

/* Write len bytes into a fresh memfd's mapping by the kernel, then read
 * them out of a second mapping by the kernel (ms each in out[0], out[1]);
 * 0 or -1. */
static int round_kernel(size_t len, double out[2])
{
  static unsigned char src[128 << 10], dst[128 << 10];
  memset(src, 5, sizeof src);
  unsigned char *a, *b;
  if (two_maps(len, &a, &b) < 0)
    return -1;
  int rc = 0;
  pid_t self = getpid();
  double t0 = now_ms();
  for (size_t off = 0; off < len && rc == 0; off += sizeof src) {
    size_t n = len - off < sizeof src ? len - off : sizeof src;
    struct iovec l = { src, n }, r = { a + off, n };
    if (process_vm_writev(self, &l, 1, &r, 1, 0) != (ssize_t)n)
      rc = -1;
  }
  double t1 = now_ms();
  for (size_t off = 0; off < len && rc == 0; off += sizeof dst) {
    size_t n = len - off < sizeof dst ? len - off : sizeof dst;
    struct iovec l = { dst, n }, r = { b + off, n };
    if (process_vm_readv(self, &l, 1, &r, 1, 0) != (ssize_t)n || dst[n - 1] != 5)
      rc = -1;
  }
  double t2 = now_ms();
  out[0] = t1 - t0;
  out[1] = t2 - t1;
  munmap(a, len);
  munmap(b, len);
  return rc;
}

/* One round: first write, second write, peer's read, then round_fd's two
 * and round_kernel's two (ms); 0 or -1. */
static int round_once(size_t len, double out[7])
{
  unsigned char *a, *b;
  if (two_maps(len, &a, &b) < 0)
    return -1;
  double t0 = now_ms();
  memset(a, 1, len);
  double t1 = now_ms();
  memset(a, 2, len);
  double t2 = now_ms();
  volatile unsigned sum = 0;
  for (size_t i = 0; i < len; i += 4096)
    sum += b[i];
  double t3 = now_ms();
  out[0] = t1 - t0;
  out[1] = t2 - t1;
  out[2] = t3 - t2;
  munmap(a, len);
  munmap(b, len);
  if (sum != (unsigned)(len / 4096) * 2)
    return -1;
  return round_fd(len, out + 3) < 0 ? -1 : round_kernel(len, out + 5);
}

int main(int argc, char **argv)
{
  int rounds = 5, json = 0, nsz = 0;
  size_t sizes[16];
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-r") == 0 && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else if (strcmp(argv[i], "--json") == 0)
      json = 1;
    else if (argv[i][0] != '-' && nsz < 16 && atoi(argv[i]) > 0)
      sizes[nsz++] = (size_t)atoi(argv[i]) << 10;
    else {
      fprintf(stderr, "usage: ring-touch [-r ROUNDS] [--json] [SIZE_KIB ...]\n");
      return 2;
    }
  }
  if (rounds < 1 || rounds > 1000)
    rounds = 5;
  if (!nsz) {
    sizes[nsz++] = 256u << 10;
    sizes[nsz++] = 1u << 20;
    sizes[nsz++] = 4u << 20;
  }
  if (!json)
    printf("%-10s %14s %14s %14s %16s %14s %16s %14s %14s\n", "ring", "first write", "second write", "peer's read",
           "first, per page", "via the fd", "then mapped", "kernel write", "kernel read");
  for (int s = 0; s < nsz; s++) {
    double v[7][1000];
    for (int r = 0; r < rounds; r++) {
      double o[7];
      if (round_once(sizes[s], o) < 0) {
        perror("ring-touch");
        return 1;
      }
      for (int k = 0; k < 7; k++)
        v[k][r] = o[k];
    }
    double m[7];
    for (int k = 0; k < 7; k++)
      m[k] = median(v[k], rounds);
    double per_page_us = m[0] * 1e3 / (double)(sizes[s] / 4096);
    if (json)
      printf("{\"ring_kib\": %zu, \"first_ms\": %.3f, \"second_ms\": %.3f, \"peer_read_ms\": %.3f, "
             "\"first_us_per_page\": %.2f, \"fd_write_ms\": %.3f, \"then_mapped_ms\": %.3f, "
             "\"kernel_write_ms\": %.3f, \"kernel_read_ms\": %.3f}\n",
             sizes[s] >> 10, m[0], m[1], m[2], per_page_us, m[3], m[4], m[5], m[6]);
    else
      printf("%7zu KiB %11.3f ms %11.3f ms %11.3f ms %13.2f us %11.3f ms %13.3f ms %11.3f ms %11.3f ms\n", sizes[s] >> 10,
             m[0], m[1], m[2], per_page_us, m[3], m[4], m[5], m[6]);
  }
  return 0;
}
