/* Which pages of the test program's data and bss a call touched
 * (header-only, for the fork tests).
 *
 * The library's module state is linked into the test program, between
 * __data_start and _end.  After fork every page there is either absent or
 * shared with the parent; the first read of an absent one maps it, the first
 * write to any of them gives the process a copy of its own: each is a fault
 * (a 4 KiB copy for a write).  /proc/self/pagemap tells both apart (bit 63
 * present, bit 56 mapped by this process alone), with no privilege.
 * getrusage's fault counts do not serve: this kernel does not count a
 * child's copy-on-write faults there. */
#ifndef TESTS_UNIT_PAGEMAP_H
#define TESTS_UNIT_PAGEMAP_H

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

extern char __data_start[], _end[];

struct pm_snap {
  uintptr_t first;  /* first page's address */
  size_t n;         /* pages */
  uint64_t *bits;   /* per page: present (bit 63) and exclusive (bit 56) */
};

/* Take the state of every page of data and bss; 0, or -1 (and s->n 0). */
static inline int pm_take(struct pm_snap *s)
{
  s->first = (uintptr_t)__data_start & ~(uintptr_t)4095;
  s->n = ((uintptr_t)_end + 4095 - s->first) / 4096;
  if (s->bits == NULL)
    s->bits = calloc(s->n, sizeof *s->bits); /* the heap lies beyond _end */
  int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  ssize_t want = (ssize_t)(s->n * sizeof *s->bits);
  ssize_t got = fd >= 0 && s->bits ? pread(fd, s->bits, (size_t)want, (off_t)(s->first / 4096 * 8)) : -1;
  if (fd >= 0)
    close(fd);
  if (got != want) {
    s->n = 0;
    return -1;
  }
  for (size_t i = 0; i < s->n; i++)
    s->bits[i] &= (1ull << 63) | (1ull << 56);
  return 0;
}

/* Pages whose state differs between a and b (taken in this order), the
 * first of them in *where; -1 if either snapshot failed. */
static inline long pm_changed(const struct pm_snap *a, const struct pm_snap *b, uintptr_t *where)
{
  if (a->n == 0 || a->n != b->n)
    return -1;
  long n = 0;
  for (size_t i = 0; i < a->n; i++)
    if (a->bits[i] != b->bits[i] && n++ == 0 && where)
      *where = a->first + i * 4096;
  return n;
}

#endif
