/* Socket address helpers.  Every access is a memcpy at a field's offset
 * (see addr.h for why): no sockaddr is read through another struct type. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "base/addr.h"

#define FS_ADDR_GET(dst, a, type, field) memcpy(&(dst), (const char *)(a) + offsetof(type, field), sizeof(dst))
#define FS_ADDR_PUT(a, type, field, src) memcpy((char *)(a) + offsetof(type, field), &(src), sizeof(src))

static const uint8_t fs_addr_v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

sa_family_t fs_addr_family(const struct sockaddr *a)
{
  sa_family_t f = 0;
  if (a)
    FS_ADDR_GET(f, a, struct sockaddr, sa_family);
  return f;
}

void fs_addr_ip_of(const struct sockaddr *a, struct fs_addr_ip *out)
{
  memset(out, 0, sizeof *out);
  sa_family_t f = fs_addr_family(a);
  if (f == AF_INET) {
    out->family = AF_INET;
    FS_ADDR_GET(out->port_be, a, struct sockaddr_in, sin_port);
    memcpy(out->ip, (const char *)a + offsetof(struct sockaddr_in, sin_addr), 4);
  } else if (f == AF_INET6) {
    FS_ADDR_GET(out->port_be, a, struct sockaddr_in6, sin6_port);
    memcpy(out->ip, (const char *)a + offsetof(struct sockaddr_in6, sin6_addr), 16);
    out->family = AF_INET6;
    if (memcmp(out->ip, fs_addr_v4mapped, sizeof fs_addr_v4mapped) == 0) {
      out->family = AF_INET;
      memmove(out->ip, out->ip + 12, 4);
      memset(out->ip + 4, 0, 12);
    }
  }
}

const struct sockaddr *fs_addr_unmap(const struct sockaddr *a, struct sockaddr_storage *out)
{
  struct fs_addr_ip k;
  if (fs_addr_family(a) != AF_INET6)
    return a;
  fs_addr_ip_of(a, &k);
  if (k.family != AF_INET)
    return a;
  struct sockaddr_in s4;
  memset(&s4, 0, sizeof s4);
  s4.sin_family = AF_INET;
  s4.sin_port = k.port_be;
  memcpy(&s4.sin_addr, k.ip, 4);
  memset(out, 0, sizeof *out);
  memcpy(out, &s4, sizeof s4);
  return (const struct sockaddr *)out;
}

bool fs_addr_eq(const struct sockaddr *a, const struct sockaddr *b)
{
  struct fs_addr_ip x, y;
  fs_addr_ip_of(a, &x);
  fs_addr_ip_of(b, &y);
  return x.family != 0 && memcmp(&x, &y, sizeof x) == 0;
}

uint16_t fs_addr_port(const struct sockaddr *a)
{
  uint16_t p = 0;
  sa_family_t f = fs_addr_family(a);
  if (f == AF_INET)
    FS_ADDR_GET(p, a, struct sockaddr_in, sin_port);
  else if (f == AF_INET6)
    FS_ADDR_GET(p, a, struct sockaddr_in6, sin6_port);
  return ntohs(p);
}

void fs_addr_set_port(struct sockaddr *a, uint16_t port)
{
  uint16_t p = htons(port);
  sa_family_t f = fs_addr_family(a);
  if (f == AF_INET)
    FS_ADDR_PUT(a, struct sockaddr_in, sin_port, p);
  else if (f == AF_INET6)
    FS_ADDR_PUT(a, struct sockaddr_in6, sin6_port, p);
}

size_t fs_addr_len(const struct sockaddr *a)
{
  return fs_addr_family(a) == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

/* k's address is all zeros (0.0.0.0, ::, or ::ffff:0.0.0.0 unmapped). */
static bool fs_addr_ip_zero(const struct fs_addr_ip *k)
{
  static const uint8_t zero[16];
  return k->family != 0 && memcmp(k->ip, zero, k->family == AF_INET ? 4 : 16) == 0;
}

bool fs_addr_is_any(const struct sockaddr *a)
{
  struct fs_addr_ip k;
  fs_addr_ip_of(a, &k);
  if (k.family == AF_INET && fs_addr_family(a) == AF_INET6)
    return false; /* ::ffff:0.0.0.0 is not the IPv6 wildcard */
  return fs_addr_ip_zero(&k);
}

bool fs_addr_take(struct sockaddr_storage *dst, const struct sockaddr *src, socklen_t len)
{
  if (!src || len < sizeof(sa_family_t))
    return false;
  sa_family_t f = fs_addr_family(src);
  if ((f != AF_INET && f != AF_INET6) || len < fs_addr_len(src) || len > sizeof *dst)
    return false;
  struct fs_addr_ip k;
  fs_addr_ip_of(src, &k);
  if (fs_addr_ip_zero(&k))
    return false; /* any wildcard, ::ffff:0.0.0.0 too */
  memset(dst, 0, sizeof *dst);
  memcpy(dst, src, fs_addr_len(src));
  return true;
}

bool fs_addr_is_loopback(const struct sockaddr *a)
{
  static const uint8_t one[16] = { [15] = 1 };
  struct fs_addr_ip k;
  fs_addr_ip_of(a, &k);
  if (k.family == AF_INET)
    return k.ip[0] == 127;
  return k.family == AF_INET6 && memcmp(k.ip, one, 16) == 0;
}

void fs_addr_str(const struct sockaddr *a, char *buf, size_t len)
{
  char ip[INET6_ADDRSTRLEN] = "?";
  uint8_t raw[16];
  sa_family_t f = fs_addr_family(a);
  if (f == AF_INET) {
    memcpy(raw, (const char *)a + offsetof(struct sockaddr_in, sin_addr), 4);
    inet_ntop(AF_INET, raw, ip, sizeof ip);
    snprintf(buf, len, "%s:%u", ip, fs_addr_port(a));
  } else if (f == AF_INET6) {
    memcpy(raw, (const char *)a + offsetof(struct sockaddr_in6, sin6_addr), 16);
    inet_ntop(AF_INET6, raw, ip, sizeof ip);
    snprintf(buf, len, "[%s]:%u", ip, fs_addr_port(a));
  } else {
    snprintf(buf, len, "?");
  }
}
