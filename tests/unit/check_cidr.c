/* Unit tests for policy/cidr.c: address specs of fabsock.conf(5). */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "policy/cidr.h"
#include "tests/unit/check_run.h"

static struct sockaddr_storage ss;

static const struct sockaddr *sa(const char *addr, int port)
{
  memset(&ss, 0, sizeof ss);
  if (addr == NULL)
    return NULL;
  if (strchr(addr, ':') != NULL) {
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons((uint16_t)port);
    ck_assert_int_eq(inet_pton(AF_INET6, addr, &s6->sin6_addr), 1);
  } else {
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    s4->sin_family = AF_INET;
    s4->sin_port = htons((uint16_t)port);
    ck_assert_int_eq(inet_pton(AF_INET, addr, &s4->sin_addr), 1);
  }
  return (const struct sockaddr *)&ss;
}

/* Whether addr:port falls in spec (which must parse). */
static int hits(const char *spec, const char *addr, int port)
{
  struct fs_cidr_spec s;
  struct fs_cidr_range ports[64];
  char why[128];
  ck_assert_uint_le(fs_cidr_max_ranges(spec, strlen(spec)), 64);
  ck_assert_msg(fs_cidr_parse(spec, strlen(spec), &s, ports, why, sizeof why) == 0, "%s: %s", spec, why);
  return fs_cidr_match(&s, sa(addr, port));
}

START_TEST(cidr_v4)
{
  ck_assert(hits("0.0.0.0/0", "1.2.3.4", 1));
  ck_assert(hits("0.0.0.0/0", "255.255.255.255", 65535));
  ck_assert(!hits("0.0.0.0/0", "::1", 1));            /* IPv4 rules never match IPv6 */
  ck_assert(hits("0.0.0.0/0", "::ffff:1.2.3.4", 1));  /* ... but do match v4-mapped */
  ck_assert(hits("10.1.2.3/32", "10.1.2.3", 5));
  ck_assert(!hits("10.1.2.3/32", "10.1.2.4", 5));
  ck_assert(hits("10.1.2.3", "10.1.2.3", 5));         /* no prefix: /32 */
  ck_assert(!hits("10.1.2.3", "10.1.2.2", 5));
  ck_assert(hits("10.0.0.0/8", "10.255.0.1", 5));
  ck_assert(!hits("10.0.0.0/8", "11.0.0.0", 5));
  ck_assert(hits("10.9.9.9/8", "10.0.0.1", 5));       /* host bits ignored */
  ck_assert(hits("192.168.1.128/25", "192.168.1.200", 5));
  ck_assert(!hits("192.168.1.128/25", "192.168.1.127", 5));
  ck_assert(hits("192.168.0.0/23", "192.168.1.1", 5));
  ck_assert(!hits("192.168.0.0/23", "192.168.2.1", 5));
  ck_assert(hits("128.0.0.0/1", "200.0.0.0", 5));
  ck_assert(!hits("128.0.0.0/1", "127.255.255.255", 5));
  ck_assert(hits("10.0.0.0/8", "::ffff:10.2.3.4", 5));
  ck_assert(!hits("10.0.0.0/8", "::ffff:11.2.3.4", 5));
  ck_assert(!hits("10.0.0.0/8", "::a02:304", 5));     /* v4-compatible is not v4-mapped */
  ck_assert(!hits("10.0.0.0/8", NULL, 0));
}
END_TEST

START_TEST(cidr_v6)
{
  ck_assert(hits("[::]/0", "::1", 1));
  ck_assert(hits("[::]/0", "ffff::1", 1));
  ck_assert(!hits("[::]/0", "1.2.3.4", 1));
  ck_assert(!hits("[::]/0", "::ffff:1.2.3.4", 1)); /* mapped counts as IPv4 */
  ck_assert(hits("[::1]/128", "::1", 1));
  ck_assert(hits("[::1]", "::1", 1));
  ck_assert(!hits("[::1]/128", "::2", 1));
  ck_assert(hits("[fe80::]/10", "fe80::1234", 1));
  ck_assert(hits("[fe80::]/10", "febf::1", 1));
  ck_assert(!hits("[fe80::]/10", "fec0::1", 1));
  ck_assert(hits("[2001:db8::]/32", "2001:db8:ffff::1", 1));
  ck_assert(!hits("[2001:db8::]/32", "2001:db9::1", 1));
  ck_assert(hits("[2001:db8::1:0]/127", "2001:db8::1:1", 1));
  ck_assert(!hits("[2001:db8::1:0]/127", "2001:db8::1:2", 1));
  /* A v4-mapped rule is an IPv4 rule (prefix - 96). */
  ck_assert(hits("[::ffff:10.0.0.0]/104", "10.7.7.7", 1));
  ck_assert(hits("[::ffff:10.0.0.0]/104", "::ffff:10.7.7.7", 1));
  ck_assert(!hits("[::ffff:10.0.0.0]/104", "11.7.7.7", 1));
  ck_assert(hits("[::ffff:1.2.3.4]", "1.2.3.4", 1));
  ck_assert(hits("[::ffff:0.0.0.0]/96", "9.9.9.9", 1));
  ck_assert(!hits("[::ffff:0.0.0.0]/80", "9.9.9.9", 1)); /* shorter prefix stays IPv6 */
  ck_assert(hits("[::ffff:0.0.0.0]/80", "::1", 1));
}
END_TEST

START_TEST(ports)
{
  ck_assert(hits("*", "1.2.3.4", 0));
  ck_assert(hits("*", NULL, 0));
  ck_assert(hits("*:*", NULL, 0));
  ck_assert(!hits("*:80", NULL, 0));
  ck_assert(hits("*:80", "1.2.3.4", 80));
  ck_assert(hits("*:80", "::1", 80));
  ck_assert(!hits("*:80", "1.2.3.4", 81));
  ck_assert(hits("*:0", "1.2.3.4", 0));
  ck_assert(hits("*:65535", "1.2.3.4", 65535));
  ck_assert(hits("*:0-65535", "1.2.3.4", 31337));
  ck_assert(hits("1.2.3.4:1000-2000", "1.2.3.4", 1000));
  ck_assert(hits("1.2.3.4:1000-2000", "1.2.3.4", 2000));
  ck_assert(!hits("1.2.3.4:1000-2000", "1.2.3.4", 999));
  ck_assert(!hits("1.2.3.4:1000-2000", "1.2.3.4", 2001));
  ck_assert(!hits("1.2.3.4:1000-2000", "1.2.3.5", 1500));
  ck_assert(hits("1.2.3.0/24:22,80,8000-8100", "1.2.3.9", 8050));
  ck_assert(hits("1.2.3.0/24:22,80,8000-8100", "1.2.3.9", 22));
  ck_assert(!hits("1.2.3.0/24:22,80,8000-8100", "1.2.3.9", 23));
  ck_assert(hits("1.2.3.4:80,*", "1.2.3.4", 5));       /* '*' in a list: any port */
  ck_assert(hits("[::1]/128:80", "::1", 80));
  ck_assert(!hits("[::1]/128:80", "::1", 81));
  ck_assert(hits("[::1]:7-7", "::1", 7));
  ck_assert(hits("1.2.3.4:5", "::ffff:1.2.3.4", 5));
  ck_assert(hits("1.2.3.4/32:005", "1.2.3.4", 5));
}
END_TEST

START_TEST(parsed_form)
{
  struct fs_cidr_spec s;
  struct fs_cidr_range pr[8];
  char why[128];
  ck_assert_int_eq(fs_cidr_parse("10.1.2.3/12:1,5-9", 17, &s, pr, why, sizeof why), 0);
  ck_assert_int_eq(s.family, AF_INET);
  ck_assert_int_eq(s.prefix, 12);
  ck_assert_int_eq(s.addr[0], 10);
  ck_assert_int_eq(s.addr[1], 0); /* host bits cleared */
  ck_assert_uint_eq(s.nports, 2);
  ck_assert_int_eq(s.ports[1].lo, 5);
  ck_assert_int_eq(s.ports[1].hi, 9);
  ck_assert_int_eq(fs_cidr_parse("[::ffff:10.0.0.0]/104", 21, &s, pr, why, sizeof why), 0);
  ck_assert_int_eq(s.family, AF_INET);
  ck_assert_int_eq(s.prefix, 8);
  ck_assert_int_eq(fs_cidr_parse("*", 1, &s, pr, why, sizeof why), 0);
  ck_assert_int_eq(s.family, 0);
  ck_assert_uint_eq(s.nports, 0);
  /* Only the first n bytes are read. */
  ck_assert_int_eq(fs_cidr_parse("1.2.3.4/33", 7, &s, pr, why, sizeof why), 0);
  ck_assert_int_eq(fs_cidr_parse("1.2.3.4/33", 10, &s, pr, why, sizeof why), -EINVAL);
  ck_assert_str_eq(why, "prefix /33 is longer than 32");
  ck_assert_int_eq(fs_cidr_parse("[::]/999999999999", 17, &s, pr, why, sizeof why), -EINVAL);
  ck_assert_str_eq(why, "prefix /999999999999 is longer than 128");
  ck_assert_uint_eq(fs_cidr_max_ranges("*:1,2,3", 7), 3);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("cidr");
  TCase *tc = tcase_create("cidr");
  tcase_add_test(tc, cidr_v4);
  tcase_add_test(tc, cidr_v6);
  tcase_add_test(tc, ports);
  tcase_add_test(tc, parsed_form);
  suite_add_tcase(s, tc);
  return run_suite(s, false);
}
