/* Address specs: parsing (once, at config load) and matching (per connection). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "policy/cidr.h"

static const uint8_t fs_cidr_v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

static int fs_cidr_fail(char *why, size_t whylen, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

static int fs_cidr_fail(char *why, size_t whylen, const char *fmt, ...)
{
  if (why != NULL && whylen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
  }
  return -EINVAL;
}

size_t fs_cidr_max_ranges(const char *v, size_t n)
{
  size_t k = 1;
  for (size_t i = 0; i < n; i++)
    k += v[i] == ',';
  return k;
}

/* Decimal number of at most max at *pp; advances *pp.  Returns the value, or
 * -1 if there are no digits, -2 if it exceeds max (all digits consumed). */
static long fs_cidr_number(const char **pp, const char *end, long max)
{
  const char *p = *pp;
  long v = 0;
  bool big = false;
  if (p == end || *p < '0' || *p > '9')
    return -1;
  while (p < end && *p >= '0' && *p <= '9') {
    if (!big) {
      v = v * 10 + (*p - '0');
      big = v > max;
    }
    p++;
  }
  *pp = p;
  return big ? -2 : v;
}

static int fs_cidr_ports(const char *p, const char *end, struct fs_cidr_spec *out,
                         struct fs_cidr_range *ports, char *why, size_t whylen)
{
  bool any = false;
  uint32_t n = 0;
  if (p == end)
    return fs_cidr_fail(why, whylen, "empty port list after ':'");
  for (;;) {
    const char *start = p;
    if (*p == '*') {
      any = true;
      p++;
    } else {
      long lo = fs_cidr_number(&p, end, 65535), hi;
      if (lo == -1)
        return fs_cidr_fail(why, whylen, "bad port list (expected *, N, N-M or a comma list)");
      if (lo == -2)
        return fs_cidr_fail(why, whylen, "port %.*s out of range (0-65535)",
                            (int)(p - start > 12 ? 12 : p - start), start);
      hi = lo;
      if (p < end && *p == '-') {
        const char *hs = ++p;
        hi = fs_cidr_number(&p, end, 65535);
        if (hi == -1)
          return fs_cidr_fail(why, whylen, "bad port range (expected N-M)");
        if (hi == -2)
          return fs_cidr_fail(why, whylen, "port %.*s out of range (0-65535)",
                              (int)(p - hs > 12 ? 12 : p - hs), hs);
        if (lo > hi)
          return fs_cidr_fail(why, whylen, "port range %ld-%ld is reversed", lo, hi);
      }
      ports[n].lo = (uint16_t)lo;
      ports[n].hi = (uint16_t)hi;
      n++;
    }
    if (p == end)
      break;
    if (*p != ',')
      return fs_cidr_fail(why, whylen, "bad port list (expected *, N, N-M or a comma list)");
    if (++p == end)
      return fs_cidr_fail(why, whylen, "bad port list (trailing ',')");
  }
  out->nports = any ? 0 : n;
  out->ports = any || n == 0 ? NULL : ports;
  return 0;
}

int fs_cidr_parse(const char *v, size_t n, struct fs_cidr_spec *out,
                  struct fs_cidr_range *ports, char *why, size_t whylen)
{
  const char *p = v, *end = v + n;
  char buf[INET6_ADDRSTRLEN + 1];
  unsigned max = 0;

  memset(out, 0, sizeof *out);
  if (n == 0)
    return fs_cidr_fail(why, whylen, "empty address (expected * or ADDR[/PREFIX][:PORTS])");
  if (*p == '*') {
    p++;
    if (p == end)
      return 0;
    if (*p != ':')
      return fs_cidr_fail(why, whylen, "expected * or *:PORTS");
    return fs_cidr_ports(p + 1, end, out, ports, why, whylen);
  }
  if (*p == '[') {
    const char *close = memchr(p, ']', n);
    size_t alen;
    if (close == NULL)
      return fs_cidr_fail(why, whylen, "missing ']' after IPv6 address");
    alen = (size_t)(close - p - 1);
    if (alen == 0 || alen >= sizeof buf)
      return fs_cidr_fail(why, whylen, "bad IPv6 address");
    memcpy(buf, p + 1, alen);
    buf[alen] = '\0';
    if (inet_pton(AF_INET6, buf, out->addr) != 1)
      return fs_cidr_fail(why, whylen, "bad IPv6 address '%s'", buf);
    out->family = AF_INET6;
    max = 128;
    p = close + 1;
  } else {
    const char *a = p;
    size_t alen;
    while (p < end && *p != '/' && *p != ':')
      p++;
    alen = (size_t)(p - a);
    if (alen > 0 && alen < sizeof buf) {
      memcpy(buf, a, alen);
      buf[alen] = '\0';
    } else {
      buf[0] = '\0';
    }
    if (buf[0] == '\0' || inet_pton(AF_INET, buf, out->addr) != 1) {
      const char *c = memchr(v, ':', n);
      if (c != NULL && memchr(c + 1, ':', (size_t)(end - c - 1)) != NULL)
        return fs_cidr_fail(why, whylen, "IPv6 addresses go in brackets: [ADDR]/PREFIX:PORTS");
      return fs_cidr_fail(why, whylen, "bad IPv4 address (expected a.b.c.d)");
    }
    out->family = AF_INET;
    max = 32;
  }
  out->prefix = (uint8_t)max;
  if (p < end && *p == '/') {
    const char *ps = ++p;
    long pre = fs_cidr_number(&p, end, (long)max);
    if (pre == -1)
      return fs_cidr_fail(why, whylen, "bad prefix (expected /0 to /%u)", max);
    if (pre == -2)
      return fs_cidr_fail(why, whylen, "prefix /%.*s is longer than %u",
                          (int)(p - ps > 12 ? 12 : p - ps), ps, max);
    out->prefix = (uint8_t)pre;
  }
  /* Host bits past the prefix are ignored, as in a routing table. */
  for (unsigned bit = out->prefix; bit < 128; bit++)
    out->addr[bit / 8] &= (uint8_t)~(0x80u >> (bit % 8));
  if (out->family == AF_INET6 && out->prefix >= 96 &&
      memcmp(out->addr, fs_cidr_v4mapped, 12) == 0) {
    memmove(out->addr, out->addr + 12, 4);
    memset(out->addr + 4, 0, 12);
    out->family = AF_INET;
    out->prefix = (uint8_t)(out->prefix - 96);
  }
  if (p == end)
    return 0;
  if (*p != ':')
    return fs_cidr_fail(why, whylen, "unexpected '%c' after the address (expected /PREFIX or :PORTS)",
                        *p >= 0x20 && *p < 0x7f ? *p : '?');
  return fs_cidr_ports(p + 1, end, out, ports, why, whylen);
}

bool fs_cidr_match(const struct fs_cidr_spec *s, const struct sockaddr *sa)
{
  uint8_t a[16];
  uint16_t port;
  int family;

  if (s->family == 0 && s->nports == 0)
    return true;
  if (sa == NULL)
    return false;
  /* Copy fields, not the whole struct: the caller's buffer is only as long as its family needs. */
  if (sa->sa_family == AF_INET) {
    family = AF_INET;
    memcpy(a, (const char *)sa + offsetof(struct sockaddr_in, sin_addr), 4);
    memcpy(&port, (const char *)sa + offsetof(struct sockaddr_in, sin_port), 2);
  } else if (sa->sa_family == AF_INET6) {
    memcpy(a, (const char *)sa + offsetof(struct sockaddr_in6, sin6_addr), 16);
    memcpy(&port, (const char *)sa + offsetof(struct sockaddr_in6, sin6_port), 2);
    family = AF_INET6;
    if (memcmp(a, fs_cidr_v4mapped, 12) == 0) {
      memmove(a, a + 12, 4);
      family = AF_INET;
    }
  } else {
    return false;
  }
  if (s->family != 0) {
    unsigned full = s->prefix / 8, rest = s->prefix % 8;
    if (s->family != family || memcmp(a, s->addr, full) != 0)
      return false;
    if (rest != 0 && ((a[full] ^ s->addr[full]) & (uint8_t)(0xff00u >> rest)) != 0)
      return false;
  }
  if (s->nports != 0) {
    port = ntohs(port);
    for (uint32_t i = 0; i < s->nports; i++)
      if (port >= s->ports[i].lo && port <= s->ports[i].hi)
        return true;
    return false;
  }
  return true;
}
