/* Value parsers for fabsock.conf(5) keys and FABSOCK_* variables. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "policy/value.h"

int fs_value_failf(char *why, size_t whylen, const char *fmt, ...)
{
  if (why != NULL && whylen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
  }
  return -EINVAL;
}

const char *fs_value_show(const char *v, size_t n, char *buf, size_t size)
{
  size_t i, k = n;
  if (size == 0)
    return buf;
  if (k > size - 1) /* keep room for "..." */
    k = size > 4 ? size - 4 : 0;
  for (i = 0; i < k; i++)
    buf[i] = v[i] >= 0x20 && v[i] < 0x7f ? v[i] : '?';
  if (k < n && size > 4)
    memcpy(buf + i, "...", 3), i += 3;
  buf[i] = '\0';
  return buf;
}

/* Decimal digits only (no sign, no space).  -1: not a number, -2: > max. */
static int fs_value_u64(const char **pp, uint64_t max, uint64_t *out)
{
  const char *p = *pp;
  uint64_t v = 0;
  bool big = false;
  if (*p < '0' || *p > '9')
    return -1;
  for (; *p >= '0' && *p <= '9'; p++) {
    unsigned d = (unsigned)(*p - '0');
    if (v > (max - d) / 10)
      big = true;
    else
      v = v * 10 + d;
  }
  *pp = p;
  if (big)
    return -2;
  *out = v;
  return 0;
}

int fs_value_fabric(const char *v, enum fs_fabric *out, char *why, size_t whylen)
{
  static const char *const names[] = { "auto", "rdma", "shm", "tcp" };
  for (int i = 0; i < 4; i++)
    if (strcmp(v, names[i]) == 0) {
      *out = (enum fs_fabric)i;
      return 0;
    }
  return fs_value_failf(why, whylen, "expected auto, rdma, shm or tcp");
}

int fs_value_bytes(const char *v, uint64_t *out, char *why, size_t whylen)
{
  const char *p = v;
  uint64_t n, mul = 1;
  int rc;
  if (strcmp(v, "never") == 0) {
    *out = FS_POLICY_UPGRADE_NEVER;
    return 0;
  }
  rc = fs_value_u64(&p, UINT64_MAX, &n);
  if (rc == -1)
    return fs_value_failf(why, whylen, "expected a byte count (N, NK, NM, NG) or never");
  if (rc == -2)
    return fs_value_failf(why, whylen, "too large");
  switch (*p) {
  case 'k': case 'K': mul = 1ull << 10; p++; break;
  case 'm': case 'M': mul = 1ull << 20; p++; break;
  case 'g': case 'G': mul = 1ull << 30; p++; break;
  default: break;
  }
  if (*p != '\0')
    return fs_value_failf(why, whylen, "expected a byte count (N, NK, NM, NG) or never");
  if (n > UINT64_MAX / mul)
    return fs_value_failf(why, whylen, "too large");
  *out = n * mul;
  return 0;
}

int fs_value_spin(const char *v, int32_t *spin_us, bool *busy, char *why, size_t whylen)
{
  const char *p = v;
  uint64_t n;
  int rc;
  if (strcmp(v, "adaptive") == 0) {
    *spin_us = FS_POLICY_SPIN_ADAPTIVE;
    *busy = false;
    return 0;
  }
  if (strcmp(v, "busy") == 0) {
    *spin_us = FS_POLICY_SPIN_ADAPTIVE;
    *busy = true;
    return 0;
  }
  rc = fs_value_u64(&p, INT32_MAX, &n);
  if (rc == -2)
    return fs_value_failf(why, whylen, "too large (at most %d microseconds)", INT32_MAX);
  if (rc < 0 || *p != '\0')
    return fs_value_failf(why, whylen, "expected adaptive, busy or microseconds");
  *spin_us = (int32_t)n;
  *busy = false;
  return 0;
}

int fs_value_timeout(const char *v, uint32_t *out, char *why, size_t whylen)
{
  const char *p = v;
  uint64_t n;
  int rc = fs_value_u64(&p, UINT32_MAX, &n);
  if (rc == -2)
    return fs_value_failf(why, whylen, "too large (at most %u ms)", UINT32_MAX);
  if (rc < 0 || *p != '\0')
    return fs_value_failf(why, whylen, "expected milliseconds");
  if (n == 0)
    return fs_value_failf(why, whylen, "must be at least 1 ms");
  *out = (uint32_t)n;
  return 0;
}

int fs_value_bool(const char *v, bool *out, char *why, size_t whylen)
{
  if (strcmp(v, "0") == 0 || strcmp(v, "1") == 0) {
    *out = v[0] == '1';
    return 0;
  }
  return fs_value_failf(why, whylen, "expected 0 or 1");
}

int fs_value_hooks(const char *v, size_t n, char *dst, char *why, size_t whylen)
{
  if (n >= FS_POLICY_HOOKS_MAX)
    return fs_value_failf(why, whylen, "hook spec longer than %d bytes", FS_POLICY_HOOKS_MAX - 1);
  if (memchr(v, '\0', n) != NULL)
    return fs_value_failf(why, whylen, "NUL byte in hook spec");
  if (dst != NULL) {
    memcpy(dst, v, n);
    dst[n] = '\0';
  }
  return 0;
}
