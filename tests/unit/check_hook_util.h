/* Helpers shared by the hook unit tests (header-only). */
#ifndef CHECK_HOOK_UTIL_H
#define CHECK_HOOK_UTIL_H

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hooks/hook.h"
#include "base/log.h"
#include "tests/unit/check_run.h"

/* Deterministic PRNG (xorshift64*). */
static inline uint64_t rnd(uint64_t *s)
{
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}

/* Feed buf to one direction in chunks: chunk = 0 for random sizes in
 * [1, 2*avg], else fixed.  Returns the first non-zero result or 0. */
static inline int feed_split(struct fs_hookset *hs, int recv, const uint8_t *buf, size_t len,
                             size_t chunk, size_t avg, uint64_t *seed)
{
  size_t off = 0;
  int rc = 0;
  while (off < len) {
    size_t n = chunk ? chunk : 1 + rnd(seed) % (2 * avg);
    if (n > len - off)
      n = len - off;
    rc = recv ? fs_hook_recv(hs, buf + off, n) : fs_hook_send(hs, buf + off, n);
    if (rc)
      return rc;
    off += n;
  }
  return rc;
}

/* Capture what the library logs to fd 2 (it writes with one write per line). */
struct capture {
  int saved, rd;
};

static inline void capture_start(struct capture *c)
{
  int p[2];
  ck_assert_int_eq(pipe2(p, O_NONBLOCK), 0);
  c->saved = dup(2);
  dup2(p[1], 2);
  close(p[1]);
  c->rd = p[0];
}

/* Stop capturing; the text (NUL-terminated, truncated) lands in out. */
static inline void capture_end(struct capture *c, char *out, size_t outlen)
{
  dup2(c->saved, 2);
  close(c->saved);
  ssize_t n = read(c->rd, out, outlen - 1);
  out[n > 0 ? n : 0] = '\0';
  close(c->rd);
}

/* Write text to a fresh temporary file; returns its path (static buffer per
 * slot, slot 0..3). */
static inline const char *tmpfile_with(int slot, const void *text, size_t len)
{
  static char path[4][64];
  snprintf(path[slot], sizeof path[slot], "/tmp/check_hook.XXXXXX");
  int fd = mkstemp(path[slot]);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
  close(fd);
  return path[slot];
}

#endif
