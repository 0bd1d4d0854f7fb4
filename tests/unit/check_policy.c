/* Unit tests for policy/: fabsock.conf(5) parsing, FABSOCK_* overrides, matching. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>
#include <unistd.h>

#include "base/hmac.h"
#include "policy/policy.h"
#include "tests/unit/check_run.h"

/* ---- helpers ---------------------------------------------------------- */

static char errbuf[512];

static struct fs_policy *parse_ok(const char *text)
{
  struct fs_policy *p = NULL;
  int rc = fs_policy_parse(text, strlen(text), "t.conf", &p, errbuf, sizeof errbuf);
  ck_assert_msg(rc == 0, "parse of <%s> failed: %s", text, errbuf);
  ck_assert_ptr_nonnull(p);
  return p;
}

/* Parse must fail with exactly this message. */
static void parse_err(const char *text, const char *want)
{
  struct fs_policy *p = (struct fs_policy *)1;
  int rc = fs_policy_parse(text, strlen(text), "t.conf", &p, errbuf, sizeof errbuf);
  ck_assert_msg(rc == -EINVAL, "parse of <%s> gave %d, want -EINVAL", text, rc);
  ck_assert_ptr_null(p);
  ck_assert_str_eq(errbuf, want);
}

static struct sockaddr_storage ss_l, ss_r;

static const struct sockaddr *sa(struct sockaddr_storage *ss, const char *addr, int port)
{
  memset(ss, 0, sizeof *ss);
  if (addr == NULL)
    return NULL;
  if (strchr(addr, ':') != NULL) {
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons((uint16_t)port);
    ck_assert_int_eq(inet_pton(AF_INET6, addr, &s6->sin6_addr), 1);
  } else {
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    s4->sin_family = AF_INET;
    s4->sin_port = htons((uint16_t)port);
    ck_assert_int_eq(inet_pton(AF_INET, addr, &s4->sin_addr), 1);
  }
  return (const struct sockaddr *)ss;
}

static struct fs_policy_action act;

static const struct fs_policy_action *m(const struct fs_policy *p, const char *prog, int dir,
                                        const char *laddr, int lport, const char *raddr, int rport)
{
  struct fs_policy_query q = { prog, (enum fs_dir)dir, sa(&ss_l, laddr, lport), sa(&ss_r, raddr, rport) };
  memset(&act, 0xa5, sizeof act);
  fs_policy_match(p, &q, &act);
  return &act;
}

/* ---- defaults and keys ------------------------------------------------ */

START_TEST(defaults_empty)
{
  const char *texts[] = { "", "\n\n", "# only a comment\n", "   \t  \n  # x\r\n", "\r\n" };
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    struct fs_policy *p = parse_ok(texts[i]);
    const struct fs_policy_action *a = m(p, "prog", FS_DIR_CONNECT, "1.2.3.4", 1, "5.6.7.8", 2);
    ck_assert_int_eq(a->fabric, FS_FABRIC_AUTO);
    ck_assert_uint_eq(a->upgrade_bytes, FS_POLICY_UPGRADE_DEFAULT);
    ck_assert_int_eq(a->spin_us, FS_POLICY_SPIN_ADAPTIVE);
    ck_assert(!a->busy_poll);
    ck_assert_uint_eq(a->timeout_ms, 1000);
    ck_assert(a->any_uid); /* peers of other users: allowed unless uid=same */
    ck_assert_str_eq(a->hooks, "");
    ck_assert_uint_eq(fs_policy_rule_count(p), 0);
    fs_policy_free(p);
  }
  /* NULL policy and NULL query are tolerated. */
  fs_policy_match(NULL, NULL, &act);
  ck_assert_uint_eq(act.timeout_ms, 1000);
  fs_policy_free(NULL);
}
END_TEST

START_TEST(default_every_key)
{
  struct fs_policy *p = parse_ok("default fabric=rdma upgrade=4K spin=25 timeout=77 uid=any "
                                 "hooks=\"frame magic=0xfeed; max=1M\"\n");
  const struct fs_policy_action *a = m(p, "x", FS_DIR_ACCEPT, NULL, 0, NULL, 0);
  ck_assert_int_eq(a->fabric, FS_FABRIC_RDMA);
  ck_assert_uint_eq(a->upgrade_bytes, 4096);
  ck_assert_int_eq(a->spin_us, 25);
  ck_assert(!a->busy_poll);
  ck_assert_uint_eq(a->timeout_ms, 77);
  ck_assert(a->any_uid);
  ck_assert_str_eq(a->hooks, "frame magic=0xfeed; max=1M");
  fs_policy_free(p);

  /* Later default lines override earlier ones key by key. */
  p = parse_ok("default fabric=shm timeout=5\ndefault fabric=tcp\n");
  a = m(p, "x", FS_DIR_ACCEPT, NULL, 0, NULL, 0);
  ck_assert_int_eq(a->fabric, FS_FABRIC_TCP);
  ck_assert_uint_eq(a->timeout_ms, 5);
  fs_policy_free(p);
}
END_TEST

START_TEST(values)
{
  static const struct { const char *text; uint64_t up; } ups[] = {
    { "upgrade=0", 0 }, { "upgrade=1", 1 }, { "upgrade=2k", 2048 }, { "upgrade=3M", 3u << 20 },
    { "upgrade=5g", 5ull << 30 }, { "upgrade=never", FS_POLICY_UPGRADE_NEVER },
    { "upgrade=18446744073709551614", 18446744073709551614ull }, { "upgrade=17179869183G", 17179869183ull << 30 },
  };
  for (size_t i = 0; i < sizeof ups / sizeof ups[0]; i++) {
    char text[128];
    snprintf(text, sizeof text, "default %s", ups[i].text);
    struct fs_policy *p = parse_ok(text);
    ck_assert_uint_eq(m(p, "x", 1, NULL, 0, NULL, 0)->upgrade_bytes, ups[i].up);
    fs_policy_free(p);
  }
  struct fs_policy *p = parse_ok("default spin=busy\nrule program=a spin=0\nrule program=b spin=adaptive\n"
                                 "rule program=c spin=2147483647\nrule program=d fabric=auto\n"
                                 "rule program=e fabric=shm uid=same timeout=4294967295\n");
  ck_assert(m(p, "x", 1, NULL, 0, NULL, 0)->busy_poll);
  ck_assert(!m(p, "a", 1, NULL, 0, NULL, 0)->busy_poll);
  ck_assert_int_eq(act.spin_us, 0);
  ck_assert(!m(p, "b", 1, NULL, 0, NULL, 0)->busy_poll);
  ck_assert_int_eq(act.spin_us, FS_POLICY_SPIN_ADAPTIVE);
  ck_assert_int_eq(m(p, "c", 1, NULL, 0, NULL, 0)->spin_us, 2147483647);
  ck_assert(m(p, "d", 1, NULL, 0, NULL, 0)->busy_poll); /* inherits default spin=busy */
  ck_assert_int_eq(act.fabric, FS_FABRIC_AUTO);
  ck_assert_int_eq(m(p, "e", 1, NULL, 0, NULL, 0)->fabric, FS_FABRIC_SHM);
  ck_assert_uint_eq(act.timeout_ms, 4294967295u);
  ck_assert(!act.any_uid);
  ck_assert(m(p, "d", 1, NULL, 0, NULL, 0)->any_uid); /* the default: any */
  fs_policy_free(p);
}
END_TEST

START_TEST(rule_inherits_defaults)
{
  struct fs_policy *p = parse_ok("rule program=a fabric=shm\n"
                                 "default upgrade=1K hooks=dpi timeout=9\n" /* applies to rules above too */
                                 "rule program=b hooks=\"\" upgrade=never\n");
  const struct fs_policy_action *a = m(p, "a", 1, NULL, 0, NULL, 0);
  ck_assert_int_eq(a->fabric, FS_FABRIC_SHM);
  ck_assert_uint_eq(a->upgrade_bytes, 1024);
  ck_assert_str_eq(a->hooks, "dpi");
  a = m(p, "b", 1, NULL, 0, NULL, 0);
  ck_assert_int_eq(a->fabric, FS_FABRIC_AUTO);
  ck_assert_str_eq(a->hooks, "");
  ck_assert_uint_eq(a->upgrade_bytes, FS_POLICY_UPGRADE_NEVER);
  ck_assert_uint_eq(a->timeout_ms, 9);
  ck_assert_uint_eq(fs_policy_rule_count(p), 2);
  fs_policy_free(p);
}
END_TEST

START_TEST(quoting)
{
  struct fs_policy *p = parse_ok("rule program=\"my prog\" hooks=\"a \\\"b\\\" \\\\c; #d\" # trailing comment\n"
                                 "rule program=x#y hooks=bare;semi\n"
                                 "rule program=q hooks=\"\"\n");
  ck_assert_str_eq(m(p, "my prog", 1, NULL, 0, NULL, 0)->hooks, "a \"b\" \\c; #d");
  ck_assert_str_eq(m(p, "x#y", 1, NULL, 0, NULL, 0)->hooks, "bare;semi");
  ck_assert_str_eq(m(p, "q", 1, NULL, 0, NULL, 0)->hooks, "");
  fs_policy_free(p);

  /* Longest hook spec: FS_POLICY_HOOKS_MAX - 1 bytes. */
  char text[1200], spec[FS_POLICY_HOOKS_MAX + 1];
  memset(spec, 'h', sizeof spec);
  spec[FS_POLICY_HOOKS_MAX - 1] = '\0';
  snprintf(text, sizeof text, "default hooks=\"%s\"", spec);
  p = parse_ok(text);
  ck_assert_str_eq(m(p, "x", 1, NULL, 0, NULL, 0)->hooks, spec);
  fs_policy_free(p);
}
END_TEST

/* ---- errors, exact file:line ------------------------------------------ */

START_TEST(errors)
{
  static const struct { const char *text, *err; } cases[] = {
    { "bogus x=1", "t.conf:1: unknown statement 'bogus' (expected default or rule)" },
    { "\n\nrules", "t.conf:3: unknown statement 'rules' (expected default or rule)" },
    { "rule\nrule foo=1", "t.conf:2: unknown key 'foo'" },
    { "rule =1", "t.conf:1: unknown key ''" },
    { "rule fabric", "t.conf:1: expected KEY=VALUE, got 'fabric'" },
    { "rule fabric=shm fabric=tcp", "t.conf:1: fabric given twice" },
    { "rule program=a program=b", "t.conf:1: program given twice" },
    { "default program=x", "t.conf:1: program is a match key: not allowed in a default statement" },
    { "default remote=*", "t.conf:1: remote is a match key: not allowed in a default statement" },
    { "rule fabric=fast", "t.conf:1: fabric: bad value 'fast': expected auto, rdma, shm or tcp" },
    { "rule fabric=", "t.conf:1: fabric: bad value '': expected auto, rdma, shm or tcp" },
    { "rule fabric=TCP", "t.conf:1: fabric: bad value 'TCP': expected auto, rdma, shm or tcp" },
    { "rule dir=both", "t.conf:1: dir: bad value 'both': expected connect, accept or any" },
    { "rule program=", "t.conf:1: program: bad value '': expected a glob" },
    { "rule uid=root", "t.conf:1: uid: bad value 'root': expected same or any" },
    { "rule upgrade=1T", "t.conf:1: upgrade: bad value '1T': expected a byte count (N, NK, NM, NG) or never" },
    { "rule upgrade=-1", "t.conf:1: upgrade: bad value '-1': expected a byte count (N, NK, NM, NG) or never" },
    { "rule upgrade=1KB", "t.conf:1: upgrade: bad value '1KB': expected a byte count (N, NK, NM, NG) or never" },
    { "rule upgrade=18446744073709551616", "t.conf:1: upgrade: bad value '18446744073709551616': too large" },
    { "rule upgrade=17179869184G", "t.conf:1: upgrade: bad value '17179869184G': too large" },
    { "rule spin=fast", "t.conf:1: spin: bad value 'fast': expected adaptive, busy or microseconds" },
    { "rule spin=2147483648", "t.conf:1: spin: bad value '2147483648': too large (at most 2147483647 microseconds)" },
    { "rule spin=1.5", "t.conf:1: spin: bad value '1.5': expected adaptive, busy or microseconds" },
    { "rule timeout=0", "t.conf:1: timeout: bad value '0': must be at least 1 ms" },
    { "rule timeout=4294967296", "t.conf:1: timeout: bad value '4294967296': too large (at most 4294967295 ms)" },
    { "rule timeout= 5", "t.conf:1: timeout: bad value '': expected milliseconds" },
    { "rule hooks=\"abc", "t.conf:1: hooks: unterminated quote" },
    { "rule hooks=\"abc\\", "t.conf:1: hooks: unterminated quote" },
    { "rule hooks=\"abc\nrule", "t.conf:1: hooks: unterminated quote" },
    { "rule hooks=\"a\\nb\"", "t.conf:1: hooks: bad escape '\\n' (only \\\" and \\\\)" },
    { "rule hooks=\"a\"b", "t.conf:1: hooks: text after the closing quote" },
    { "rule hooks=a\"b\"", "t.conf:1: hooks: '\"' inside an unquoted value (quote the whole value)" },
    { "rule\n#\n\nrule remote=1.2.3.4/33", "t.conf:4: remote: bad value '1.2.3.4/33': prefix /33 is longer than 32" },
    { "rule local=[::1]/129", "t.conf:1: local: bad value '[::1]/129': prefix /129 is longer than 128" },
    { "rule remote=1.2.3.4/", "t.conf:1: remote: bad value '1.2.3.4/': bad prefix (expected /0 to /32)" },
    { "rule remote=1.2.3.4/x", "t.conf:1: remote: bad value '1.2.3.4/x': bad prefix (expected /0 to /32)" },
    { "rule remote=1.2.3", "t.conf:1: remote: bad value '1.2.3': bad IPv4 address (expected a.b.c.d)" },
    { "rule remote=1.2.3.256", "t.conf:1: remote: bad value '1.2.3.256': bad IPv4 address (expected a.b.c.d)" },
    { "rule remote=host.example", "t.conf:1: remote: bad value 'host.example': bad IPv4 address (expected a.b.c.d)" },
    { "rule remote=", "t.conf:1: remote: bad value '': empty address (expected * or ADDR[/PREFIX][:PORTS])" },
    { "rule remote=::1", "t.conf:1: remote: bad value '::1': IPv6 addresses go in brackets: [ADDR]/PREFIX:PORTS" },
    { "rule remote=[::1", "t.conf:1: remote: bad value '[::1': missing ']' after IPv6 address" },
    { "rule remote=[]", "t.conf:1: remote: bad value '[]': bad IPv6 address" },
    { "rule remote=[1.2.3.4]", "t.conf:1: remote: bad value '[1.2.3.4]': bad IPv6 address '1.2.3.4'" },
    { "rule remote=[::1]x", "t.conf:1: remote: bad value '[::1]x': unexpected 'x' after the address (expected /PREFIX or :PORTS)" },
    { "rule remote=*x", "t.conf:1: remote: bad value '*x': expected * or *:PORTS" },
    { "rule remote=1.2.3.4:", "t.conf:1: remote: bad value '1.2.3.4:': empty port list after ':'" },
    { "rule remote=1.2.3.4:65536", "t.conf:1: remote: bad value '1.2.3.4:65536': port 65536 out of range (0-65535)" },
    { "rule remote=*:1-99999", "t.conf:1: remote: bad value '*:1-99999': port 99999 out of range (0-65535)" },
    { "rule remote=*:90-80", "t.conf:1: remote: bad value '*:90-80': port range 90-80 is reversed" },
    { "rule remote=*:80,", "t.conf:1: remote: bad value '*:80,': bad port list (trailing ',')" },
    { "rule remote=*:80,,81", "t.conf:1: remote: bad value '*:80,,81': bad port list (expected *, N, N-M or a comma list)" },
    { "rule remote=*:80-", "t.conf:1: remote: bad value '*:80-': bad port range (expected N-M)" },
    { "rule remote=*:http", "t.conf:1: remote: bad value '*:http': bad port list (expected *, N, N-M or a comma list)" },
    { "rule remote=*:-5", "t.conf:1: remote: bad value '*:-5': bad port list (expected *, N, N-M or a comma list)" },
    { "rule fabric=\"\x01\x7f\"", "t.conf:1: fabric: bad value '?" "?': expected auto, rdma, shm or tcp" },
    { "rule fabric=\xff\xfe", "t.conf:1: fabric: bad value '?" "?': expected auto, rdma, shm or tcp" },
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    parse_err(cases[i].text, cases[i].err);
}
END_TEST

START_TEST(errors_structural)
{
  /* NUL bytes, overlong lines, overlong hooks, CRLF line counting, filename NULL. */
  struct fs_policy *p = NULL;
  static const char nul[] = "rule\nrule fabric=shm\0 x\n";
  ck_assert_int_eq(fs_policy_parse(nul, sizeof nul - 1, "n.conf", &p, errbuf, sizeof errbuf), -EINVAL);
  ck_assert_str_eq(errbuf, "n.conf:2: NUL byte in line");
  ck_assert_ptr_null(p);
  ck_assert_int_eq(fs_policy_parse("#\0", 2, NULL, &p, errbuf, sizeof errbuf), -EINVAL);
  ck_assert_str_eq(errbuf, "(config):1: NUL byte in line");

  char *big = malloc(5000);
  memset(big, ' ', 5000);
  memcpy(big, "rule\r\n# ", 8);
  ck_assert_int_eq(fs_policy_parse(big, 8 + 4096 - 2, "b", &p, errbuf, sizeof errbuf), 0); /* 4096-byte line */
  fs_policy_free(p);
  ck_assert_int_eq(fs_policy_parse(big, 8 + 4096 - 1, "b", &p, errbuf, sizeof errbuf), -EINVAL);
  ck_assert_str_eq(errbuf, "b:2: line too long (more than 4096 bytes)");
  free(big);

  char text[1200];
  char spec[FS_POLICY_HOOKS_MAX + 1];
  memset(spec, 'h', sizeof spec);
  spec[FS_POLICY_HOOKS_MAX] = '\0';
  snprintf(text, sizeof text, "\r\n\r\nrule hooks=%s\r\n", spec);
  char want[200];
  snprintf(want, sizeof want, "t.conf:3: hooks: bad value '%.76s...': hook spec longer than 511 bytes", spec);
  parse_err(text, want); /* values in messages are cut to 76 bytes */

  /* err may be NULL or tiny; out NULL is refused. */
  ck_assert_int_eq(fs_policy_parse("x", 1, "f", &p, NULL, 0), -EINVAL);
  ck_assert_int_eq(fs_policy_parse("x", 1, "f", &p, errbuf, 4), -EINVAL);
  ck_assert_str_eq(errbuf, "f:1");
  ck_assert_int_eq(fs_policy_parse("", 0, "f", NULL, errbuf, sizeof errbuf), -EINVAL);
  ck_assert_int_eq(fs_policy_parse(NULL, 0, "f", &p, errbuf, sizeof errbuf), 0);
  fs_policy_free(p);
}
END_TEST

START_TEST(too_many_rules)
{
  size_t n = 10001, len = 0;
  char *text = malloc(n * 32);
  for (size_t i = 0; i < n; i++)
    len += (size_t)sprintf(text + len, "rule remote=*:%zu fabric=shm\n", i % 65536);
  struct fs_policy *p = NULL;
  /* 10000 rules are fine ... */
  size_t cut = 0;
  for (size_t i = 0; i < 10000; i++)
    cut = (size_t)((char *)memchr(text + cut, '\n', len - cut) - text) + 1;
  ck_assert_int_eq(fs_policy_parse(text, cut, "r", &p, errbuf, sizeof errbuf), 0);
  ck_assert_uint_eq(fs_policy_rule_count(p), 10000);
  ck_assert_int_eq(m(p, "x", 1, NULL, 0, "1.1.1.1", 9999)->fabric, FS_FABRIC_SHM);
  ck_assert_int_eq(m(p, "x", 1, NULL, 0, "1.1.1.1", 10000)->fabric, FS_FABRIC_AUTO);
  fs_policy_free(p);
  /* ... the 10001st is not (comments and defaults do not count). */
  ck_assert_int_eq(fs_policy_parse(text, len, "r", &p, errbuf, sizeof errbuf), -EINVAL);
  ck_assert_str_eq(errbuf, "r:10001: too many rules (at most 10000)");
  free(text);
}
END_TEST

/* ---- matching --------------------------------------------------------- */

START_TEST(local_and_dir)
{
  struct fs_policy *p = parse_ok("rule dir=accept local=*:80 fabric=shm\n"
                                 "rule dir=connect remote=127.0.0.0/8 fabric=rdma\n"
                                 "rule dir=any local=[::1] fabric=tcp\n");
  ck_assert_int_eq(m(p, "x", FS_DIR_ACCEPT, "1.1.1.1", 80, "2.2.2.2", 5)->fabric, FS_FABRIC_SHM);
  ck_assert_int_eq(m(p, "x", FS_DIR_CONNECT, "1.1.1.1", 80, "2.2.2.2", 5)->fabric, FS_FABRIC_AUTO);
  ck_assert_int_eq(m(p, "x", FS_DIR_CONNECT, "1.1.1.1", 80, "127.0.0.1", 5)->fabric, FS_FABRIC_RDMA);
  ck_assert_int_eq(m(p, "x", FS_DIR_ACCEPT, "1.1.1.1", 81, "127.0.0.1", 5)->fabric, FS_FABRIC_AUTO);
  ck_assert_int_eq(m(p, "x", FS_DIR_ACCEPT, "::1", 81, "::2", 5)->fabric, FS_FABRIC_TCP);
  ck_assert_int_eq(m(p, "x", FS_DIR_CONNECT, "::1", 81, "::2", 5)->fabric, FS_FABRIC_TCP);
  ck_assert_int_eq(m(p, "x", FS_DIR_CONNECT, NULL, 0, NULL, 0)->fabric, FS_FABRIC_AUTO);
  /* A non-IP address matches only '*'. */
  struct sockaddr_storage un = { .ss_family = AF_UNIX };
  struct fs_policy_query q = { "x", FS_DIR_ACCEPT, (struct sockaddr *)&un, NULL };
  fs_policy_match(p, &q, &act);
  ck_assert_int_eq(act.fabric, FS_FABRIC_AUTO);
  fs_policy_free(p);
}
END_TEST

START_TEST(first_match_wins)
{
  struct fs_policy *p = parse_ok("rule remote=10.1.0.0/16 fabric=tcp\n"
                                 "rule remote=10.0.0.0/8 fabric=rdma upgrade=1M\n"
                                 "rule fabric=shm\n"
                                 "rule fabric=auto\n");
  ck_assert_int_eq(m(p, "x", 1, NULL, 0, "10.1.2.3", 1)->fabric, FS_FABRIC_TCP);
  ck_assert_uint_eq(act.upgrade_bytes, FS_POLICY_UPGRADE_DEFAULT); /* the first rule's unset keys do not fall through */
  ck_assert_int_eq(m(p, "x", 1, NULL, 0, "10.2.2.3", 1)->fabric, FS_FABRIC_RDMA);
  ck_assert_uint_eq(act.upgrade_bytes, 1u << 20);
  ck_assert_int_eq(m(p, "x", 1, NULL, 0, "11.2.2.3", 1)->fabric, FS_FABRIC_SHM);
  ck_assert_int_eq(m(p, "x", 1, NULL, 0, NULL, 0)->fabric, FS_FABRIC_SHM);
  fs_policy_free(p);
}
END_TEST

START_TEST(program_globs)
{
  struct fs_policy *p = parse_ok("rule program=nginx fabric=shm\n"
                                 "rule program=redis-* fabric=rdma\n"
                                 "rule program=\"?ython[23]\" fabric=tcp\n"
                                 "rule program=[!a-m]*.bin timeout=5\n");
  ck_assert_int_eq(m(p, "nginx", 1, NULL, 0, NULL, 0)->fabric, FS_FABRIC_SHM);
  ck_assert_int_eq(m(p, "nginx2", 1, NULL, 0, NULL, 0)->fabric, FS_FABRIC_AUTO);
  ck_assert_int_eq(m(p, "redis-server", 1, NULL, 0, NULL, 0)->fabric, FS_FABRIC_RDMA);
  ck_assert_int_eq(m(p, "redis-", 1, NULL, 0, NULL, 0)->fabric, FS_FABRIC_RDMA);
  ck_assert_int_eq(m(p, "redis", 1, NULL, 0, NULL, 0)->fabric, FS_FABRIC_AUTO);
  ck_assert_int_eq(m(p, "python3", 1, NULL, 0, NULL, 0)->fabric, FS_FABRIC_TCP);
  ck_assert_int_eq(m(p, "jython2", 1, NULL, 0, NULL, 0)->fabric, FS_FABRIC_TCP);
  ck_assert_int_eq(m(p, "python4", 1, NULL, 0, NULL, 0)->fabric, FS_FABRIC_AUTO);
  ck_assert_uint_eq(m(p, "zz.bin", 1, NULL, 0, NULL, 0)->timeout_ms, 5);
  ck_assert_uint_eq(m(p, "az.bin", 1, NULL, 0, NULL, 0)->timeout_ms, 1000);
  ck_assert_int_eq(m(p, NULL, 1, NULL, 0, NULL, 0)->fabric, FS_FABRIC_AUTO);
  fs_policy_free(p);
}
END_TEST

/* ---- environment ------------------------------------------------------ */

static const char *env_vals[16][2];

static const char *env_get(const char *name)
{
  for (int i = 0; i < 16 && env_vals[i][0] != NULL; i++)
    if (strcmp(env_vals[i][0], name) == 0)
      return env_vals[i][1];
  return NULL;
}

static void env_set(const char *const *kv)
{
  memset(env_vals, 0, sizeof env_vals);
  for (int i = 0; kv[2 * i] != NULL; i++) {
    env_vals[i][0] = kv[2 * i];
    env_vals[i][1] = kv[2 * i + 1];
  }
}

START_TEST(env_overrides)
{
  struct fs_policy *p = parse_ok("default upgrade=1M timeout=10 hooks=filehook\n"
                                 "rule program=a fabric=shm upgrade=5 spin=7\n"
                                 "rule program=b fabric=tcp\n");
  const char *kv[] = { "FABSOCK_UPGRADE_BYTES", "2K", "FABSOCK_SPIN_US", "33", "FABSOCK_TIMEOUT_MS", "44",
                       "FABSOCK_ANY_UID", "1", "FABSOCK_HOOKS", "frame max=1K", "FABSOCK_LOG", "debug", NULL };
  env_set(kv);
  ck_assert_int_eq(fs_policy_apply_env(p, env_get, errbuf, sizeof errbuf), 0);
  const struct fs_policy_action *a = m(p, "x", 1, NULL, 0, NULL, 0);
  ck_assert_uint_eq(a->upgrade_bytes, 2048);
  ck_assert_int_eq(a->spin_us, 33);
  ck_assert_uint_eq(a->timeout_ms, 44);
  ck_assert(a->any_uid);
  ck_assert_str_eq(a->hooks, "frame max=1K");
  a = m(p, "a", 1, NULL, 0, NULL, 0); /* rules override the environment */
  ck_assert_int_eq(a->fabric, FS_FABRIC_SHM);
  ck_assert_uint_eq(a->upgrade_bytes, 5);
  ck_assert_int_eq(a->spin_us, 7);
  ck_assert_uint_eq(a->timeout_ms, 44);

  /* Busy poll and spin; empty values are ignored except FABSOCK_HOOKS. */
  const char *kv2[] = { "FABSOCK_SPIN_US", "busy", "FABSOCK_TIMEOUT_MS", "", "FABSOCK_HOOKS", "", NULL };
  env_set(kv2);
  ck_assert_int_eq(fs_policy_apply_env(p, env_get, errbuf, sizeof errbuf), 0);
  a = m(p, "x", 1, NULL, 0, NULL, 0);
  ck_assert(a->busy_poll);
  ck_assert_uint_eq(a->timeout_ms, 44);
  ck_assert_str_eq(a->hooks, "");
  const char *kv3[] = { "FABSOCK_SPIN_US", "adaptive", "FABSOCK_BUSY_POLL", "1", NULL };
  env_set(kv3);
  ck_assert_int_eq(fs_policy_apply_env(p, env_get, errbuf, sizeof errbuf), 0);
  ck_assert(m(p, "x", 1, NULL, 0, NULL, 0)->busy_poll);
  ck_assert_int_eq(act.spin_us, FS_POLICY_SPIN_ADAPTIVE);
  ck_assert(!m(p, "a", 1, NULL, 0, NULL, 0)->busy_poll); /* rule spin=7 clears it */
  const char *kv4[] = { "FABSOCK_BUSY_POLL", "0", "FABSOCK_ANY_UID", "0", "FABSOCK_UPGRADE_BYTES", "never", NULL };
  env_set(kv4);
  ck_assert_int_eq(fs_policy_apply_env(p, env_get, errbuf, sizeof errbuf), 0);
  ck_assert(!m(p, "x", 1, NULL, 0, NULL, 0)->busy_poll);
  ck_assert(!act.any_uid);
  ck_assert_uint_eq(act.upgrade_bytes, FS_POLICY_UPGRADE_NEVER);
  fs_policy_free(p);
}
END_TEST

START_TEST(env_transport_forces)
{
  static const struct { const char *v; int f; } t[] = {
    { "tcp", FS_FABRIC_TCP }, { "shm", FS_FABRIC_SHM }, { "rdma", FS_FABRIC_RDMA }, { "auto", FS_FABRIC_AUTO },
  };
  for (size_t i = 0; i < 4; i++) {
    struct fs_policy *p = parse_ok("default fabric=rdma\nrule program=a fabric=shm upgrade=3\nrule program=b fabric=tcp\n");
    const char *kv[] = { "FABSOCK_TRANSPORT", t[i].v, NULL };
    env_set(kv);
    ck_assert_int_eq(fs_policy_apply_env(p, env_get, errbuf, sizeof errbuf), 0);
    ck_assert_int_eq(m(p, "a", 1, NULL, 0, NULL, 0)->fabric, t[i].f);
    ck_assert_uint_eq(act.upgrade_bytes, 3); /* only the fabric is forced */
    ck_assert_int_eq(m(p, "b", 1, NULL, 0, NULL, 0)->fabric, t[i].f);
    ck_assert_int_eq(m(p, "x", 1, NULL, 0, NULL, 0)->fabric, t[i].f);
    fs_policy_free(p);
  }
}
END_TEST

/* FABSOCK_KCOPY, read once at the first policy lookup: 0 turns kernel
 * copies into new shm rings off; unset, 1 or anything else (warned) on. */
static int kcopy_env(const char *v, bool want)
{
  if (v)
    setenv("FABSOCK_KCOPY", v, 1);
  else
    unsetenv("FABSOCK_KCOPY");
  return fs_policy_kcopy() == want ? 0 : 1;
}
static int kcopy_unset(void) { return kcopy_env(NULL, true); }
static int kcopy_zero(void) { return kcopy_env("0", false); }
static int kcopy_one(void) { return kcopy_env("1", true); }
static int kcopy_junk(void) { return kcopy_env("yes please", true); }

START_TEST(env_kcopy)
{
  ck_in_child(kcopy_unset);
  ck_in_child(kcopy_zero);
  ck_in_child(kcopy_one);
  ck_in_child(kcopy_junk);
}
END_TEST

START_TEST(env_errors)
{
  static const struct { const char *name, *val, *err; } cases[] = {
    { "FABSOCK_TRANSPORT", "ib", "FABSOCK_TRANSPORT: bad value 'ib': expected auto, rdma, shm or tcp" },
    { "FABSOCK_UPGRADE_BYTES", "lots", "FABSOCK_UPGRADE_BYTES: bad value 'lots': expected a byte count (N, NK, NM, NG) or never" },
    { "FABSOCK_UPGRADE_BYTES", " 5", "FABSOCK_UPGRADE_BYTES: bad value ' 5': expected a byte count (N, NK, NM, NG) or never" },
    { "FABSOCK_SPIN_US", "-1", "FABSOCK_SPIN_US: bad value '-1': expected adaptive, busy or microseconds" },
    { "FABSOCK_BUSY_POLL", "yes", "FABSOCK_BUSY_POLL: bad value 'yes': expected 0 or 1" },
    { "FABSOCK_TIMEOUT_MS", "0", "FABSOCK_TIMEOUT_MS: bad value '0': must be at least 1 ms" },
    { "FABSOCK_TIMEOUT_MS", "1s", "FABSOCK_TIMEOUT_MS: bad value '1s': expected milliseconds" },
    { "FABSOCK_ANY_UID", "2", "FABSOCK_ANY_UID: bad value '2': expected 0 or 1" },
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct fs_policy *p = parse_ok("default timeout=7\n");
    /* A good variable before the bad one must not be half-applied. */
    const char *kv[] = { "FABSOCK_HOOKS", "h", "FABSOCK_TRANSPORT", "tcp", cases[i].name, cases[i].val, NULL };
    if (strcmp(cases[i].name, "FABSOCK_TRANSPORT") == 0)
      kv[2] = "FABSOCK_X";
    env_set(kv);
    ck_assert_int_eq(fs_policy_apply_env(p, env_get, errbuf, sizeof errbuf), -EINVAL);
    ck_assert_str_eq(errbuf, cases[i].err);
    const struct fs_policy_action *a = m(p, "x", 1, NULL, 0, NULL, 0);
    ck_assert_int_eq(a->fabric, FS_FABRIC_AUTO);
    ck_assert_str_eq(a->hooks, "");
    ck_assert_uint_eq(a->timeout_ms, 7);
    fs_policy_free(p);
  }
  char longhooks[600];
  memset(longhooks, 'k', sizeof longhooks - 1);
  longhooks[sizeof longhooks - 1] = '\0';
  struct fs_policy *p = parse_ok("");
  const char *kv[] = { "FABSOCK_HOOKS", longhooks, NULL };
  env_set(kv);
  ck_assert_int_eq(fs_policy_apply_env(p, env_get, errbuf, sizeof errbuf), -EINVAL);
  ck_assert(strstr(errbuf, "FABSOCK_HOOKS: bad value 'kkkk") == errbuf);
  ck_assert(strstr(errbuf, "...': hook spec longer than 511 bytes") != NULL);
  ck_assert_int_eq(fs_policy_apply_env(NULL, env_get, errbuf, sizeof errbuf), -EINVAL);
  fs_policy_free(p);
}
END_TEST

/* ---- rdma_key --------------------------------------------------------- */

static char keydir[] = "/tmp/check_policy_key.XXXXXX";

static const char *keyfile(const char *name, const char *text, mode_t mode)
{
  static char path[8][128];
  static int n;
  char *f = path[n++ % 8];
  snprintf(f, sizeof path[0], "%s/%s", keydir, name);
  FILE *o = fopen(f, "w");
  ck_assert_ptr_nonnull(o);
  fputs(text, o);
  fclose(o);
  ck_assert_int_eq(chmod(f, mode), 0);
  return f;
}

START_TEST(rdma_key)
{
  ck_assert_ptr_nonnull(mkdtemp(keydir));
  const char *good = keyfile("good", "0123456789abcdef-secret\n", 0600);
  const char *same = keyfile("same", "0123456789abcdef-secret \r\n\n", 0400);
  const char *other = keyfile("other", "0123456789abcdef-secreT\n", 0600);
  const char *open_to_group = keyfile("group", "0123456789abcdef-secret\n", 0640);
  const char *shorty = keyfile("short", "0123456789abcde\n", 0600);
  char text[512];

  /* the key is the SHA-256 of the file less its trailing white space */
  uint8_t want[FS_HMAC_LEN];
  struct fs_hmac_sha s;
  fs_hmac_sha_init(&s);
  fs_hmac_sha_update(&s, "0123456789abcdef-secret", 23);
  fs_hmac_sha_final(&s, want);
  snprintf(text, sizeof text, "default rdma_key=%s\nrule remote=10.0.0.0/8 rdma_key=none\nrule remote=10.1.0.0/16 rdma_key=%s\n"
           "rule remote=192.168.0.0/16 rdma_key=%s\n", good, other, same);
  struct fs_policy *p = parse_ok(text);
  const struct fs_policy_action *a = m(p, "x", 1, NULL, 0, "172.16.0.1", 80);
  ck_assert(a->has_key);
  ck_assert_mem_eq(a->key, want, FS_HMAC_LEN);
  a = m(p, "x", 1, NULL, 0, "10.1.0.1", 80); /* first match: none */
  ck_assert(!a->has_key);
  a = m(p, "x", 1, NULL, 0, "192.168.1.1", 80);
  ck_assert(a->has_key);
  ck_assert_mem_eq(a->key, want, FS_HMAC_LEN);
  fs_policy_free(p);
  snprintf(text, sizeof text, "rule rdma_key=%s\n", other);
  p = parse_ok(text);
  a = m(p, "x", 1, NULL, 0, "192.168.1.1", 80);
  ck_assert(a->has_key);
  ck_assert(memcmp(a->key, want, FS_HMAC_LEN) != 0);
  fs_policy_free(p);

  /* bad key files are config errors: the process stays on tcp (fabsock.conf(5)) */
  struct { const char *path, *why; } bad[] = {
    { open_to_group, "group or others may read or write it (chmod 600)" },
    { shorty, "a key needs at least 16 bytes" },
    { "relative/key", "expected none or an absolute path" },
    { "/nonexistent/fabsock.key", "No such file or directory" },
    { "/tmp", "not a regular file" },
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char err[512];
    snprintf(text, sizeof text, "default rdma_key=%s\n", bad[i].path);
    snprintf(err, sizeof err, "t.conf:1: rdma_key: bad value '%s': %s", bad[i].path, bad[i].why);
    parse_err(text, err);
  }

  /* FABSOCK_RDMA_KEY_FILE sets the default */
  p = parse_ok("");
  const char *kv[] = { "FABSOCK_RDMA_KEY_FILE", good, NULL };
  env_set(kv);
  ck_assert_int_eq(fs_policy_apply_env(p, env_get, errbuf, sizeof errbuf), 0);
  a = m(p, "x", 2, NULL, 0, NULL, 0);
  ck_assert(a->has_key);
  ck_assert_mem_eq(a->key, want, FS_HMAC_LEN);
  fs_policy_free(p);
  p = parse_ok("");
  const char *kv2[] = { "FABSOCK_RDMA_KEY_FILE", shorty, NULL };
  env_set(kv2);
  ck_assert_int_eq(fs_policy_apply_env(p, env_get, errbuf, sizeof errbuf), -EINVAL);
  snprintf(text, sizeof text, "FABSOCK_RDMA_KEY_FILE: bad value '%s': a key needs at least 16 bytes", shorty);
  ck_assert_str_eq(errbuf, text);
  ck_assert(!m(p, "x", 2, NULL, 0, NULL, 0)->has_key);
  fs_policy_free(p);
  const char *names[] = { "good", "same", "other", "group", "short" };
  for (size_t i = 0; i < 5; i++) {
    snprintf(text, sizeof text, "%s/%s", keydir, names[i]);
    unlink(text);
  }
  rmdir(keydir);
}
END_TEST

START_TEST(fabric_names)
{
  ck_assert_str_eq(fs_fabric_name(FS_FABRIC_AUTO), "auto");
  ck_assert_str_eq(fs_fabric_name(FS_FABRIC_RDMA), "rdma");
  ck_assert_str_eq(fs_fabric_name(FS_FABRIC_SHM), "shm");
  ck_assert_str_eq(fs_fabric_name(FS_FABRIC_TCP), "tcp");
  ck_assert_str_eq(fs_fabric_name(4), "unknown");
  ck_assert_str_eq(fs_fabric_name(-1), "unknown");
}
END_TEST

/* ---- hostile input ---------------------------------------------------- */

START_TEST(hostile_random)
{
  static const char *const frags[] = {
    "rule ", "default ", "program=", "dir=", "local=", "remote=", "fabric=", "upgrade=", "spin=",
    "timeout=", "uid=", "hooks=", "\"", "\\", "[", "]", "::", ":", "/", "-", ",", "*", "#", "\n",
    "\r\n", " ", "\t", "=", "1", "65535", "99999999999999999999", "10.0.0.0", "[::1]", "shm",
    "busy", "never", "4K", "\0", "\xff",
  };
  unsigned seed = 12345;
  char *buf = malloc(8192);
  for (int iter = 0; iter < 20000; iter++) {
    size_t len = 0, want = (size_t)(rand_r(&seed) % 600);
    bool raw = iter % 3 == 0;
    while (len < want) {
      if (raw) {
        buf[len++] = (char)rand_r(&seed);
      } else {
        const char *f = frags[rand_r(&seed) % (sizeof frags / sizeof frags[0])];
        size_t n = f[0] == '\0' ? 1 : strlen(f);
        memcpy(buf + len, f, n);
        len += n;
      }
    }
    struct fs_policy *p = NULL;
    int rc = fs_policy_parse(buf, len, "h", &p, errbuf, sizeof errbuf);
    if (rc == 0) {
      m(p, "x", 1 + iter % 2, "10.0.0.1", iter % 65536, "::1", 80);
      m(p, "x", 1, NULL, 0, "::ffff:10.0.0.1", 80);
      fs_policy_free(p);
    } else {
      ck_assert_int_eq(rc, -EINVAL);
      ck_assert_ptr_null(p);
      ck_assert(strncmp(errbuf, "h:", 2) == 0);
    }
  }
  free(buf);

  /* 1 MiB of one huge line, and 1 MiB of newlines. */
  size_t big = 1 << 20;
  buf = malloc(big);
  memset(buf, 'A', big);
  struct fs_policy *p = NULL;
  ck_assert_int_eq(fs_policy_parse(buf, big, "h", &p, errbuf, sizeof errbuf), -EINVAL);
  ck_assert_str_eq(errbuf, "h:1: line too long (more than 4096 bytes)");
  memset(buf, '\n', big);
  ck_assert_int_eq(fs_policy_parse(buf, big, "h", &p, errbuf, sizeof errbuf), 0);
  fs_policy_free(p);
  free(buf);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("policy");
  TCase *tc = tcase_create("parse");
  tcase_add_test(tc, defaults_empty);
  tcase_add_test(tc, default_every_key);
  tcase_add_test(tc, values);
  tcase_add_test(tc, rule_inherits_defaults);
  tcase_add_test(tc, quoting);
  tcase_add_test(tc, errors);
  tcase_add_test(tc, errors_structural);
  tcase_add_test(tc, too_many_rules);
  suite_add_tcase(s, tc);
  tc = tcase_create("match");
  tcase_add_test(tc, local_and_dir);
  tcase_add_test(tc, first_match_wins);
  tcase_add_test(tc, program_globs);
  tcase_add_test(tc, fabric_names);
  suite_add_tcase(s, tc);
  tc = tcase_create("env");
  tcase_add_test(tc, env_overrides);
  tcase_add_test(tc, env_transport_forces);
  tcase_add_test(tc, env_errors);
  tcase_add_test(tc, env_kcopy);
  tcase_add_test(tc, rdma_key);
  suite_add_tcase(s, tc);
  tc = tcase_create("hostile");
  tcase_add_test(tc, hostile_random);
  tcase_set_timeout(tc, 120);
  suite_add_tcase(s, tc);

  return run_suite(s, false);
}
