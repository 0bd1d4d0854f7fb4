/* Address specs of fabsock.conf(5): `*` or ADDR[/PREFIX][:PORTS].
 *
 *   ADDR   IPv4 dotted quad, or IPv6 in brackets ([::1]); `*` = any address
 *   PREFIX leading bits that must match (default: all of them)
 *   PORTS  `*` | N | N-M | a comma list of those
 *
 * IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) are IPv4 on both sides: in a
 * spec (with a prefix of at least 96) and in a queried socket address. */
#ifndef FS_POLICY_CIDR_H
#define FS_POLICY_CIDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct fs_cidr_range {
  uint16_t lo, hi;
};

struct fs_cidr_spec {
  uint8_t family;   /* 0: any address; AF_INET; AF_INET6 */
  uint8_t prefix;   /* significant leading bits of addr */
  uint8_t addr[16]; /* IPv4 in the first 4 bytes; bits past prefix are zero */
  uint32_t nports;  /* 0: any port */
  const struct fs_cidr_range *ports;
};
/* family == 0 && nports == 0 is `*`, the only spec that matches a missing
 * (NULL) or non-IP address. */

/* Upper bound on the port ranges the text v[0..n) can hold: size of the
 * ports array to hand to fs_cidr_parse(). */
size_t fs_cidr_max_ranges(const char *v, size_t n);

/* Parse v[0..n) into *out, port ranges into ports[] (out->ports points there).
 * Returns 0, or -EINVAL with a short reason in why. */
int fs_cidr_parse(const char *v, size_t n, struct fs_cidr_spec *out,
                  struct fs_cidr_range *ports, char *why, size_t whylen);

/* Whether sa (AF_INET, AF_INET6 or NULL) falls in s.  Pure, no allocation. */
bool fs_cidr_match(const struct fs_cidr_spec *s, const struct sockaddr *sa);

#endif
