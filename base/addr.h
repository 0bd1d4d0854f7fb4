/* Socket address helpers: IPv4 and IPv4-mapped IPv6 compare equal.
 *
 * Every function here reads and writes socket addresses with memcpy at the
 * fields' offsets, never through a cast to another struct type: callers hand
 * in sockaddr_storage, sockaddr_in6 or sockaddr_in objects as struct sockaddr
 * *, and reading one struct type through another is undefined behaviour that
 * gcc -O2 really exploits (fs_addr_eq once returned false for two identical
 * ::ffff:127.0.0.1 addresses, so no Java connection could upgrade).  Code
 * outside this module that needs the family, port or IP of an address uses
 * struct fs_addr_ip rather than casting. */
#ifndef FS_BASE_ADDR_H
#define FS_BASE_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* An IPv4 or IPv6 endpoint, IPv4-mapped IPv6 folded to IPv4 (family
 * AF_INET, the address in ip[0..3]).  family is 0 for anything else. */
struct fs_addr_ip {
  sa_family_t family;
  uint16_t port_be;   /* network byte order, as in the sockaddr */
  uint8_t ip[16];     /* 4 bytes for AF_INET, 16 for AF_INET6 */
};

/* Fill *out from a (any family; NULL gives family 0). */
void fs_addr_ip_of(const struct sockaddr *a, struct fs_addr_ip *out);

/* a's family, read without a type pun. */
sa_family_t fs_addr_family(const struct sockaddr *a);

/* Same address and port, treating ::ffff:a.b.c.d as a.b.c.d. */
bool fs_addr_eq(const struct sockaddr *a, const struct sockaddr *b);

/* Port in host order (0 for unknown families). */
uint16_t fs_addr_port(const struct sockaddr *a);

/* Set the port (host order); no-op for unknown families. */
void fs_addr_set_port(struct sockaddr *a, uint16_t port);

/* sizeof the family's sockaddr (IPv4 or IPv6: the only ones we track). */
size_t fs_addr_len(const struct sockaddr *a);

/* If a is IPv4-mapped IPv6, write the IPv4 form into out and return out;
 * else return a. */
const struct sockaddr *fs_addr_unmap(const struct sockaddr *a, struct sockaddr_storage *out);

/* True for 0.0.0.0 / :: */
bool fs_addr_is_any(const struct sockaddr *a);

/* A connection's peer as accept() wrote it or connect() was given it,
 * len bytes at src: copied into dst (the rest zeroed) and true if it is an
 * IPv4 or IPv6 address the kernel would report as is; false (dst left
 * alone) where only getpeername can tell: another family, a short len, or
 * a wildcard (connect(0.0.0.0) reaches the host by another address). */
bool fs_addr_take(struct sockaddr_storage *dst, const struct sockaddr *src, socklen_t len);

/* True for 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104: no other host
 * reaches such an address. */
bool fs_addr_is_loopback(const struct sockaddr *a);

/* "a.b.c.d:port" or "[v6]:port". */
void fs_addr_str(const struct sockaddr *a, char *buf, size_t len);

#endif
