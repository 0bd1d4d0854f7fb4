#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "base/addr.h"

const struct sockaddr *fs_addr_unmap(const struct sockaddr *a, struct sockaddr_storage *out)
{
  if (a->sa_family != AF_INET6)
    return a;
  const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)a;
  if (!IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
    return a;
  struct sockaddr_in *s4 = (struct sockaddr_in *)out;
  memset(s4, 0, sizeof *s4);
  s4->sin_family = AF_INET;
  s4->sin_port = s6->sin6_port;
  memcpy(&s4->sin_addr, &s6->sin6_addr.s6_addr[12], 4);
  return (const struct sockaddr *)s4;
}

bool fs_addr_eq(const struct sockaddr *a, const struct sockaddr *b)
{
  struct sockaddr_storage ta = { 0 }, tb = { 0 };
  a = fs_addr_unmap(a, &ta);
  b = fs_addr_unmap(b, &tb);
  if (a->sa_family != b->sa_family)
    return false;
  if (a->sa_family == AF_INET) {
    const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
    return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
  }
  if (a->sa_family == AF_INET6) {
    const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
    return x->sin6_port == y->sin6_port && memcmp(&x->sin6_addr, &y->sin6_addr, 16) == 0;
  }
  return false;
}

uint16_t fs_addr_port(const struct sockaddr *a)
{
  if (a->sa_family == AF_INET)
    return ntohs(((const struct sockaddr_in *)a)->sin_port);
  if (a->sa_family == AF_INET6)
    return ntohs(((const struct sockaddr_in6 *)a)->sin6_port);
  return 0;
}

void fs_addr_set_port(struct sockaddr *a, uint16_t port)
{
  if (a->sa_family == AF_INET)
    ((struct sockaddr_in *)a)->sin_port = htons(port);
  else if (a->sa_family == AF_INET6)
    ((struct sockaddr_in6 *)a)->sin6_port = htons(port);
}

size_t fs_addr_len(const struct sockaddr *a)
{
  return a->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

bool fs_addr_is_any(const struct sockaddr *a)
{
  if (a->sa_family == AF_INET)
    return ((const struct sockaddr_in *)a)->sin_addr.s_addr == htonl(INADDR_ANY);
  if (a->sa_family == AF_INET6)
    return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)a)->sin6_addr);
  return false;
}

void fs_addr_str(const struct sockaddr *a, char *buf, size_t len)
{
  char ip[INET6_ADDRSTRLEN] = "?";
  if (a->sa_family == AF_INET) {
    inet_ntop(AF_INET, &((const struct sockaddr_in *)a)->sin_addr, ip, sizeof ip);
    snprintf(buf, len, "%s:%u", ip, fs_addr_port(a));
  } else if (a->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)a)->sin6_addr, ip, sizeof ip);
    snprintf(buf, len, "[%s]:%u", ip, fs_addr_port(a));
  } else {
    snprintf(buf, len, "?");
  }
}
