/* Socket address helpers: IPv4 and IPv4-mapped IPv6 compare equal. */
#ifndef FS_BASE_ADDR_H
#define FS_BASE_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Same address and port, treating ::ffff:a.b.c.d as a.b.c.d. */
bool fs_addr_eq(const struct sockaddr *a, const struct sockaddr *b);

/* Port in host order (0 for unknown families). */
uint16_t fs_addr_port(const struct sockaddr *a);

/* Set the port (host order); no-op for unknown families. */
void fs_addr_set_port(struct sockaddr *a, uint16_t port);

/* sizeof the family's sockaddr (IPv4 or IPv6: the only ones we track). */
size_t fs_addr_len(const struct sockaddr *a);

/* If a is IPv4-mapped IPv6, write the IPv4 form into out and return it. */
const struct sockaddr *fs_addr_unmap(const struct sockaddr *a, struct sockaddr_storage *out);

/* True for 0.0.0.0 / :: */
bool fs_addr_is_any(const struct sockaddr *a);

/* "a.b.c.d:port" or "[v6]:port". */
void fs_addr_str(const struct sockaddr *a, char *buf, size_t len);

#endif
