/* The hook chain: spec syntax, hook shared objects (examples/hook_example.c,
 * tests/unit/hook_badabi.c), exactly-once in-order delivery through a chain. */
#include <limits.h>

#include "tests/unit/check_hook_util.h"
#include "hooks/hook_dpi.h"

static char example_so[PATH_MAX], badabi_so[PATH_MAX];

static void find_modules(void)
{
  const char *top = getenv("top_builddir");
  if (top == NULL)
    top = ".";
  snprintf(example_so, sizeof example_so, "%s/examples/.libs/hook_example.so", top);
  snprintf(badabi_so, sizeof badabi_so, "%s/tests/unit/.libs/hook_badabi.so", top);
}

START_TEST(empty_specs)
{
  static const char *const empty[] = { NULL, "", ";", " ; ;; ", "\t" };
  char err[256];
  for (unsigned i = 0; i < sizeof empty / sizeof empty[0]; i++) {
    struct fs_hookset *hs = (void *)1;
    ck_assert_int_eq(fs_hook_open(empty[i], NULL, NULL, &hs), 0);
    ck_assert_ptr_null(hs);
    ck_assert_int_eq(fs_hook_spec_check(empty[i], err, sizeof err), 0);
  }
  /* A NULL set passes everything. */
  ck_assert_int_eq(fs_hook_send(NULL, "x", 1), 0);
  ck_assert_int_eq(fs_hook_recv(NULL, "x", 1), 0);
  ck_assert_uint_eq(fs_hook_wake_hint(NULL), 0);
  ck_assert_int_eq(fs_hook_counts_msgs(NULL), 0);
  ck_assert_uint_eq(fs_hook_dpi_matches(NULL), 0);
  fs_hook_close(NULL);
}
END_TEST

START_TEST(bad_specs)
{
  static const struct { const char *spec, *err; } bad[] = {
    { "bogus", "unknown hook 'bogus' (frame, dpi, or a path to a .so)" },
    { "frame;nope:x=1", "unknown hook 'nope'" },
    { ":max=1", "hook 1: arguments without a hook name" },
    { "frame;frame;frame;frame;frame;frame;frame;frame;frame", "more than 8 hooks" },
    { "FRAME", "unknown hook 'FRAME'" },
    { "/nonexistent/hook.so", "hook /nonexistent/hook.so: no such readable file" },
  };
  char err[256], log[2048];
  for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_int_eq(fs_hook_spec_check(bad[i].spec, err, sizeof err), -EINVAL);
    ck_assert_msg(strncmp(err, bad[i].err, strlen(bad[i].err)) == 0, "%s -> %s", bad[i].spec, err);
  }
  char *longspec = malloc(FS_HOOK_SPEC_MAX + 2);
  memset(longspec, ';', FS_HOOK_SPEC_MAX + 1);
  longspec[FS_HOOK_SPEC_MAX + 1] = '\0';
  ck_assert_int_eq(fs_hook_spec_check(longspec, err, sizeof err), -EINVAL);
  longspec[FS_HOOK_SPEC_MAX] = '\0';
  ck_assert_int_eq(fs_hook_spec_check(longspec, err, sizeof err), 0);
  free(longspec);
  /* A bad spec used by every connection is logged once. */
  struct capture cap;
  struct fs_hookset *hs;
  capture_start(&cap);
  for (int i = 0; i < 5; i++)
    ck_assert_int_eq(fs_hook_open("frame:max=lots", NULL, NULL, &hs), -EINVAL);
  capture_end(&cap, log, sizeof log);
  ck_assert_ptr_nonnull(strstr(log, "hook: cannot set up hooks: frame: bad max 'lots'\n"));
  ck_assert_ptr_null(strchr(strchr(log, '\n') + 1, '\n'));
}
END_TEST

START_TEST(user_hook)
{
  char spec[PATH_MAX + 64], err[256];
  struct fs_hookset *hs;
  struct capture cap;
  char log[2048];
  snprintf(spec, sizeof spec, "%s:max_recv=1000", example_so);
  ck_assert_msg(access(example_so, R_OK) == 0, "%s missing (examples/Makefile.include)", example_so);
  ck_assert_int_eq(fs_hook_spec_check(spec, err, sizeof err), 0);
  /* Exactly once: 1000 bytes in random splits pass, one more closes. */
  uint64_t seed = 3;
  uint8_t buf[1000] = { 0 };
  for (int round = 0; round < 20; round++) {
    ck_assert_int_eq(fs_hook_open(spec, NULL, NULL, &hs), 0);
    ck_assert_int_eq(feed_split(hs, 1, buf, sizeof buf, round == 0, 40, &seed), 0);
    ck_assert_int_eq(fs_hook_send(hs, buf, sizeof buf), 0); /* no send quota */
    capture_start(&cap);
    errno = 4321;
    ck_assert_int_eq(fs_hook_recv(hs, "x", 1), -ECONNABORTED);
    ck_assert_int_eq(errno, 4321);
    capture_end(&cap, log, sizeof log);
    ck_assert_ptr_nonnull(strstr(log, "hook quota: fd -1: recv quota of 1000 bytes exceeded; closing (recv)"));
    ck_assert_int_eq(fs_hook_send(hs, "x", 1), -ECONNABORTED);
    fs_hook_close(hs);
  }
  /* The .so rejects its arguments: open fails with its error. */
  snprintf(spec, sizeof spec, "frame;%s:max_recv=lots", example_so);
  ck_assert_int_eq(fs_hook_open(spec, NULL, NULL, &hs), -EINVAL);
  ck_assert_ptr_null(hs);
  /* Missing and future-ABI modules. */
  ck_assert_int_eq(fs_hook_open("/nonexistent/hook.so", NULL, NULL, &hs), -ENOENT);
  ck_assert_msg(access(badabi_so, R_OK) == 0, "%s missing", badabi_so);
  capture_start(&cap);
  ck_assert_int_eq(fs_hook_open(badabi_so, NULL, NULL, &hs), -ELIBBAD);
  capture_end(&cap, log, sizeof log);
  ck_assert_ptr_nonnull(strstr(log, "built for hook ABI 2, this library has 1"));
  /* A .so that is not a hook. */
  ck_assert_int_eq(fs_hook_open("/dev/null/x.so", NULL, NULL, &hs), -ENOENT);
}
END_TEST

START_TEST(chain_exactly_once)
{
  /* frame + dpi + the example, over a stream of len16le frames with words in
   * them: counts from random splits equal the one-shot counts. */
  const char *pats = "abc\nbca\ncab\naaaa\n";
  const char *pf = tmpfile_with(0, pats, strlen(pats));
  char spec[PATH_MAX + 256];
  snprintf(spec, sizeof spec, "frame:header=len16le,max=200,action=close; dpi:patterns=%s,"
           "action=count,dir=both ; %s:max_send=10000000", pf, example_so);
  uint64_t seed = 99;
  size_t len = 0;
  uint8_t *buf = malloc(1 << 20);
  while (len < 500000) {
    unsigned n = (unsigned)(rnd(&seed) % 201);
    buf[len++] = (uint8_t)n;
    buf[len++] = (uint8_t)(n >> 8);
    for (unsigned i = 0; i < n; i++)
      buf[len++] = (uint8_t)('a' + rnd(&seed) % 3);
  }
  struct fs_stat_conn one = { 0 };
  struct fs_hookset *hs;
  ck_assert_int_eq(fs_hook_open(spec, NULL, &one, &hs), 0);
  ck_assert_int_eq(fs_hook_send(hs, buf, len), 0);
  uint64_t matches = fs_hook_dpi_matches(hs);
  fs_hook_close(hs);
  ck_assert_uint_gt(matches, 1000);
  for (size_t avg = 1; avg < 100000; avg *= 7) {
    struct fs_stat_conn st = { 0 };
    ck_assert_int_eq(fs_hook_open(spec, NULL, &st, &hs), 0);
    ck_assert_int_eq(feed_split(hs, 0, buf, len, 0, avg, &seed), 0);
    ck_assert_uint_eq(st.tx_msgs, one.tx_msgs);
    ck_assert_uint_eq(fs_hook_dpi_matches(hs), matches);
    fs_hook_close(hs);
  }
  free(buf);
  unlink(pf);
  fs_hook_dpi_cache_clear();
}
END_TEST

int main(void)
{
  find_modules();
  Suite *s = suite_create("hook");
  TCase *tc = tcase_create("chain");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, empty_specs);
  tcase_add_test(tc, bad_specs);
  tcase_add_test(tc, user_hook);
  tcase_add_test(tc, chain_exactly_once);
  suite_add_tcase(s, tc);
  return run_suite(s, false);
}
