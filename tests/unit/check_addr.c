/* Unit tests for base/addr: IPv4, IPv6 and IPv4-mapped IPv6 endpoints compare,
 * unmap, print and carry ports as the kernel's addresses do.  The addresses
 * are written the way callers write them (a sockaddr_in6 or sockaddr_in
 * inside a sockaddr_storage) and passed as struct sockaddr *: the build's -O2
 * once turned fs_addr_eq's type puns into "two identical ::ffff:127.0.0.1
 * differ", which kept every Java connection off the fabric. */
#include <arpa/inet.h>
#include <check.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <string.h>

#include "base/addr.h"
#include "tests/unit/check_run.h"

/* Fill *ss with "ip" (either family, by its spelling) and port. */
static const struct sockaddr *mk(struct sockaddr_storage *ss, const char *ip, uint16_t port)
{
  memset(ss, 0, sizeof *ss);
  if (strchr(ip, ':')) {
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(port);
    ck_assert_int_eq(inet_pton(AF_INET6, ip, &s6->sin6_addr), 1);
  } else {
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    s4->sin_family = AF_INET;
    s4->sin_port = htons(port);
    ck_assert_int_eq(inet_pton(AF_INET, ip, &s4->sin_addr), 1);
  }
  return (const struct sockaddr *)ss;
}

START_TEST(t_eq_v4mapped)
{
  struct sockaddr_storage a, b;
  /* The Java case: both ends of a dual-stack connection are v4-mapped. */
  ck_assert(fs_addr_eq(mk(&a, "::ffff:127.0.0.1", 41000), mk(&b, "::ffff:127.0.0.1", 41000)));
  ck_assert(fs_addr_eq(mk(&a, "::ffff:127.0.0.1", 41000), mk(&b, "127.0.0.1", 41000)));
  ck_assert(fs_addr_eq(mk(&a, "127.0.0.1", 41000), mk(&b, "::ffff:127.0.0.1", 41000)));
  ck_assert(!fs_addr_eq(mk(&a, "::ffff:127.0.0.1", 41000), mk(&b, "::ffff:127.0.0.1", 41001)));
  ck_assert(!fs_addr_eq(mk(&a, "::ffff:127.0.0.1", 41000), mk(&b, "::ffff:127.0.0.2", 41000)));
  ck_assert(!fs_addr_eq(mk(&a, "::ffff:127.0.0.1", 41000), mk(&b, "::1", 41000)));
}
END_TEST

START_TEST(t_eq_plain)
{
  struct sockaddr_storage a, b;
  ck_assert(fs_addr_eq(mk(&a, "10.1.2.3", 80), mk(&b, "10.1.2.3", 80)));
  ck_assert(!fs_addr_eq(mk(&a, "10.1.2.3", 80), mk(&b, "10.1.2.4", 80)));
  ck_assert(fs_addr_eq(mk(&a, "fe80::1", 80), mk(&b, "fe80::1", 80)));
  ck_assert(!fs_addr_eq(mk(&a, "fe80::1", 80), mk(&b, "fe80::2", 80)));
  /* ::a.b.c.d (v4-compatible) is not v4-mapped: an IPv6 address. */
  ck_assert(!fs_addr_eq(mk(&a, "::10.1.2.3", 80), mk(&b, "10.1.2.3", 80)));
  /* Other families never compare equal, not even to themselves. */
  memset(&a, 0, sizeof a);
  a.ss_family = AF_UNIX;
  ck_assert(!fs_addr_eq((struct sockaddr *)&a, (struct sockaddr *)&a));
}
END_TEST

START_TEST(t_unmap)
{
  struct sockaddr_storage a, out;
  const struct sockaddr *s = mk(&a, "::ffff:192.0.2.7", 5555);
  const struct sockaddr *u = fs_addr_unmap(s, &out);
  ck_assert_ptr_eq(u, (struct sockaddr *)&out);
  ck_assert_int_eq(fs_addr_family(u), AF_INET);
  ck_assert_int_eq(fs_addr_port(u), 5555);
  ck_assert_uint_eq(fs_addr_len(u), sizeof(struct sockaddr_in));
  char buf[64];
  fs_addr_str(u, buf, sizeof buf);
  ck_assert_str_eq(buf, "192.0.2.7:5555");
  /* Anything else comes back as it was. */
  s = mk(&a, "2001:db8::1", 7);
  ck_assert_ptr_eq(fs_addr_unmap(s, &out), s);
  s = mk(&a, "192.0.2.7", 7);
  ck_assert_ptr_eq(fs_addr_unmap(s, &out), s);
}
END_TEST

START_TEST(t_ip_of)
{
  struct sockaddr_storage a;
  struct fs_addr_ip k;
  fs_addr_ip_of(mk(&a, "::ffff:1.2.3.4", 9), &k);
  ck_assert_int_eq(k.family, AF_INET);
  ck_assert_int_eq(ntohs(k.port_be), 9);
  static const uint8_t want4[16] = { 1, 2, 3, 4 };
  ck_assert_mem_eq(k.ip, want4, 16);
  fs_addr_ip_of(mk(&a, "2001:db8::9", 10), &k);
  ck_assert_int_eq(k.family, AF_INET6);
  ck_assert_int_eq(k.ip[0], 0x20);
  ck_assert_int_eq(k.ip[15], 9);
  fs_addr_ip_of(NULL, &k);
  ck_assert_int_eq(k.family, 0);
}
END_TEST

START_TEST(t_port_any_str)
{
  struct sockaddr_storage a;
  struct sockaddr *s = (struct sockaddr *)mk(&a, "::1", 1);
  fs_addr_set_port(s, 65535);
  ck_assert_int_eq(fs_addr_port(s), 65535);
  ck_assert_int_eq(ntohs(((struct sockaddr_in6 *)&a)->sin6_port), 65535);
  char buf[64];
  fs_addr_str(s, buf, sizeof buf);
  ck_assert_str_eq(buf, "[::1]:65535");
  s = (struct sockaddr *)mk(&a, "127.0.0.1", 1);
  fs_addr_set_port(s, 8080);
  ck_assert_int_eq(ntohs(((struct sockaddr_in *)&a)->sin_port), 8080);
  ck_assert_uint_eq(fs_addr_len(s), sizeof(struct sockaddr_in));
  ck_assert(fs_addr_is_any(mk(&a, "0.0.0.0", 1)));
  ck_assert(fs_addr_is_any(mk(&a, "::", 1)));
  ck_assert(!fs_addr_is_any(mk(&a, "::ffff:0.0.0.0", 1)));
  ck_assert(!fs_addr_is_any(mk(&a, "127.0.0.1", 1)));
  ck_assert(!fs_addr_is_any(mk(&a, "::1", 1)));
}
END_TEST

/* Loopback: no other host reaches it (no rdma listener for it). */
START_TEST(t_loopback)
{
  struct sockaddr_storage a;
  const char *yes[] = { "127.0.0.1", "127.255.0.9", "::1", "::ffff:127.0.0.1" };
  const char *no[] = { "0.0.0.0", "::", "10.0.2.15", "128.0.0.1", "::2", "::ffff:10.0.0.1", "fe80::1" };
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
    ck_assert_msg(fs_addr_is_loopback(mk(&a, yes[i], 1)), "%s", yes[i]);
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
    ck_assert_msg(!fs_addr_is_loopback(mk(&a, no[i], 1)), "%s", no[i]);
}
END_TEST

/* The peer accept wrote or connect was given stands for getpeername's
 * answer, except where the kernel's could differ. */
START_TEST(t_take)
{
  struct sockaddr_storage src, dst, keep;
  memset(&keep, 0x5a, sizeof keep);
  const char *yes[] = { "127.0.0.1", "10.1.2.3", "::1", "::ffff:127.0.0.1", "fe80::1" };
  for (unsigned i = 0; i < sizeof yes / sizeof *yes; i++) {
    const struct sockaddr *a = mk(&src, yes[i], 4242);
    memcpy(&dst, &keep, sizeof dst);
    ck_assert(fs_addr_take(&dst, a, (socklen_t)fs_addr_len(a)));
    ck_assert(fs_addr_eq((struct sockaddr *)&dst, a));
    ck_assert_uint_eq(fs_addr_port((struct sockaddr *)&dst), 4242);
    ck_assert_uint_eq(((unsigned char *)&dst)[sizeof dst - 1], 0); /* the rest zeroed */
    ck_assert(!fs_addr_take(&dst, a, (socklen_t)fs_addr_len(a) - 1)); /* short */
  }
  /* Wildcards: connect(0.0.0.0) reaches the host by another address. */
  const char *no[] = { "0.0.0.0", "::", "::ffff:0.0.0.0" };
  for (unsigned i = 0; i < sizeof no / sizeof *no; i++) {
    const struct sockaddr *a = mk(&src, no[i], 4242);
    memcpy(&dst, &keep, sizeof dst);
    ck_assert(!fs_addr_take(&dst, a, (socklen_t)fs_addr_len(a)));
    ck_assert_int_eq(memcmp(&dst, &keep, sizeof dst), 0); /* left alone */
  }
  struct sockaddr_un un = { .sun_family = AF_UNIX };
  ck_assert(!fs_addr_take(&dst, (struct sockaddr *)&un, sizeof un));
  ck_assert(!fs_addr_take(&dst, NULL, 0));
}
END_TEST

int main(void)
{
  Suite *s = suite_create("addr");
  TCase *tc = tcase_create("addr");
  tcase_add_test(tc, t_eq_v4mapped);
  tcase_add_test(tc, t_eq_plain);
  tcase_add_test(tc, t_unmap);
  tcase_add_test(tc, t_ip_of);
  tcase_add_test(tc, t_port_any_str);
  tcase_add_test(tc, t_loopback);
  tcase_add_test(tc, t_take);
  suite_add_tcase(s, tc);
  return run_suite(s, false);
}
