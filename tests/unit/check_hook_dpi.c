/* Built-in dpi hook: pattern file parsing, the Aho-Corasick scanner against a
 * naive matcher (dense and compact layouts, any chunk split), actions. */
#include "tests/unit/check_hook_util.h"
#include "hooks/hook_ac.h"
#include "hooks/hook_dpi.h"

static int parse(const char *text, struct fs_hook_dpi_patterns **ps, char *err)
{
  return fs_hook_dpi_patterns_parse(text, strlen(text), "f", ps, err, 256);
}

START_TEST(pattern_escapes)
{
  struct fs_hook_dpi_patterns *ps;
  char err[256];
  ck_assert_int_eq(parse("# comment\n\nabc\n\\x41\\x42\\\\\r\n\\x0a\\x00z\n  sp \n#x\n\\x23x", &ps, err), 0);
  ck_assert_uint_eq(ps->n, 5);
  ck_assert_uint_eq(ps->pat[0].len, 3);
  ck_assert_mem_eq(ps->pat[0].p, "abc", 3);
  ck_assert_uint_eq(ps->pat[1].len, 3);
  ck_assert_mem_eq(ps->pat[1].p, "AB\\", 3);
  ck_assert_uint_eq(ps->pat[2].len, 3);
  ck_assert_mem_eq(ps->pat[2].p, "\n\0z", 3);
  ck_assert_uint_eq(ps->pat[3].len, 5);
  ck_assert_mem_eq(ps->pat[3].p, "  sp ", 5);
  ck_assert_mem_eq(ps->pat[4].p, "#x", 2);
  ck_assert_uint_eq(ps->line[0], 3);
  ck_assert_uint_eq(ps->line[3], 6);
  ck_assert_uint_eq(ps->line[4], 8);
  fs_hook_dpi_patterns_free(ps);
}
END_TEST

START_TEST(pattern_errors)
{
  static const struct { const char *text, *err; } bad[] = {
    { "ok\n\\q\n", "f:2: bad escape '\\q' (use \\xNN or \\\\)" },
    { "\\x4\n", "f:1: bad escape" },
    { "a\\x4g", "f:1: bad escape" },
    { "abc\\", "f:1: bad escape" },
    { "\\", "f:1: bad escape" },
    { "\\X41", "f:1: bad escape" },
  };
  struct fs_hook_dpi_patterns *ps = NULL;
  char err[256];
  for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_int_eq(parse(bad[i].text, &ps, err), -EINVAL);
    ck_assert_msg(strncmp(err, bad[i].err, strlen(bad[i].err)) == 0, "%s", err);
  }
  /* Lengths: 4096 bytes (even escaped) is fine, 4097 is not. */
  char *big = malloc(4 * 4097 + 2);
  memset(big, 'a', 4096);
  big[4096] = '\0';
  ck_assert_int_eq(parse(big, &ps, err), 0);
  fs_hook_dpi_patterns_free(ps);
  for (int i = 0; i < 4096; i++)
    memcpy(big + 4 * i, "\\x41", 4);
  big[4 * 4096] = '\0';
  ck_assert_int_eq(parse(big, &ps, err), 0);
  ck_assert_uint_eq(ps->pat[0].len, 4096);
  fs_hook_dpi_patterns_free(ps);
  strcpy(big + 4 * 4096, "a");
  ck_assert_int_eq(parse(big, &ps, err), -EINVAL);
  ck_assert_str_eq(err, "f:1: pattern longer than 4096 bytes");
  free(big);
  /* Counts: 100000 patterns are fine, one more is not. */
  size_t n = 100001 * 7;
  char *many = malloc(n + 1), *p = many;
  for (int i = 0; i < 100001; i++)
    p += sprintf(p, "%06d\n", i);
  ck_assert_int_eq(fs_hook_dpi_patterns_parse(many, n - 7, "f", &ps, err, sizeof err), 0);
  ck_assert_uint_eq(ps->n, 100000);
  fs_hook_dpi_patterns_free(ps);
  ck_assert_int_eq(fs_hook_dpi_patterns_parse(many, n, "f", &ps, err, sizeof err), -EINVAL);
  ck_assert_str_eq(err, "f:100001: more than 100000 patterns");
  free(many);
}
END_TEST

START_TEST(empty_and_file_errors)
{
  struct fs_hook_dpi_patterns *ps;
  char err[256], spec[300];
  ck_assert_int_eq(parse("", &ps, err), 0);
  ck_assert_uint_eq(ps->n, 0);
  fs_hook_dpi_patterns_free(ps);
  ck_assert_int_eq(parse("# nothing\n\n\r\n", &ps, err), 0);
  ck_assert_uint_eq(ps->n, 0);
  fs_hook_dpi_patterns_free(ps);
  /* An empty file is a valid set that matches nothing. */
  const char *path = tmpfile_with(0, "", 0);
  snprintf(spec, sizeof spec, "dpi:patterns=%s,action=close,dir=both", path);
  struct fs_hookset *hs;
  ck_assert_int_eq(fs_hook_open(spec, NULL, NULL, &hs), 0);
  ck_assert_int_eq(fs_hook_recv(hs, "anything", 8), 0);
  ck_assert_uint_eq(fs_hook_dpi_matches(hs), 0);
  fs_hook_close(hs);
  unlink(path);
  /* Missing file, directory, bad file: spec check and open both refuse. */
  ck_assert_int_eq(fs_hook_spec_check("dpi:patterns=/nonexistent/x", err, sizeof err), -EINVAL);
  ck_assert_str_eq(err, "/nonexistent/x: No such file or directory");
  ck_assert_int_eq(fs_hook_open("dpi:patterns=/nonexistent/x", NULL, NULL, &hs), -ENOENT);
  ck_assert_int_eq(fs_hook_spec_check("dpi:patterns=/tmp", err, sizeof err), -EINVAL);
  ck_assert_str_eq(err, "/tmp: not a regular file");
  path = tmpfile_with(0, "a\nb\\yc\n", 7);
  snprintf(spec, sizeof spec, "dpi:patterns=%s", path);
  ck_assert_int_eq(fs_hook_spec_check(spec, err, sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, ":2: bad escape"));
  ck_assert_int_eq(fs_hook_open(spec, NULL, NULL, &hs), -EINVAL);
  unlink(path);
  ck_assert_int_eq(fs_hook_spec_check("dpi:action=close", err, sizeof err), -EINVAL);
  ck_assert_str_eq(err, "dpi: patterns=FILE is required");
  ck_assert_int_eq(fs_hook_spec_check("dpi:patterns=x,action=drop", err, sizeof err), -EINVAL);
  ck_assert_int_eq(fs_hook_spec_check("dpi:patterns=x,dir=sideways", err, sizeof err), -EINVAL);
  ck_assert_int_eq(fs_hook_spec_check("dpi:patterns=x,level=3", err, sizeof err), -EINVAL);
}
END_TEST

/* Matches of pats in text, every (pattern, end) once; duplicates count once. */
static uint64_t naive(const struct fs_hook_ac_pattern *pats, uint32_t n, const uint8_t *t, size_t len)
{
  uint64_t c = 0;
  for (uint32_t i = 0; i < n; i++) {
    int dup = 0;
    for (uint32_t j = 0; j < i && !dup; j++)
      dup = pats[j].len == pats[i].len && memcmp(pats[j].p, pats[i].p, pats[i].len) == 0;
    if (dup)
      continue;
    for (size_t k = 0; k + pats[i].len <= len; k++)
      c += memcmp(t + k, pats[i].p, pats[i].len) == 0;
  }
  return c;
}

static uint64_t ac_count(const struct fs_hook_ac *ac, const uint8_t *t, size_t len, size_t chunk,
                         uint64_t *seed)
{
  uint32_t st = 0, nm;
  uint64_t c = 0;
  size_t off = 0;
  while (off < len) {
    size_t n = chunk ? chunk : 1 + rnd(seed) % 64;
    if (n > len - off)
      n = len - off;
    const uint8_t *p = t + off;
    size_t left = n;
    while (left) {
      size_t u = fs_hook_ac_scan(ac, &st, p, left, &nm);
      p += u, left -= u, c += nm;
    }
    off += n;
  }
  return c;
}

static void pats_from(const char *const *s, unsigned n, struct fs_hook_ac_pattern *out)
{
  for (unsigned i = 0; i < n; i++) {
    out[i].p = (const uint8_t *)s[i];
    out[i].len = (uint32_t)strlen(s[i]);
  }
}

START_TEST(overlapping)
{
  static const char *const words[] = { "he", "she", "hers", "his", "a", "aa", "aaa", "he" };
  struct fs_hook_ac_pattern p[8];
  struct fs_hook_ac *ac;
  uint64_t seed = 1;
  pats_from(words, 8, p);
  ck_assert_int_eq(fs_hook_ac_build(p, 8, 0, &ac), 0);
  ck_assert_uint_eq(ac_count(ac, (const uint8_t *)"ushers", 6, 6, &seed), 3);
  ck_assert_uint_eq(ac_count(ac, (const uint8_t *)"aaaa", 4, 4, &seed), 9);
  ck_assert_uint_eq(ac_count(ac, (const uint8_t *)"hishershe", 9, 1, &seed), 6);
  /* The reported pattern is the longest one ending at the match. */
  uint32_t st = 0, nm;
  ck_assert_uint_eq(fs_hook_ac_scan(ac, &st, (const uint8_t *)"xshe", 4, &nm), 4);
  ck_assert_uint_eq(nm, 2);
  ck_assert_uint_eq(fs_hook_ac_state_pattern(ac, st), 1);
  fs_hook_ac_free(ac);
  /* An empty pattern is refused. */
  p[0].len = 0;
  ck_assert_int_eq(fs_hook_ac_build(p, 1, 0, &ac), -EINVAL);
}
END_TEST

START_TEST(boundaries_and_random)
{
  uint64_t seed = 42;
  uint8_t text[6000], pbuf[64][8];
  struct fs_hook_ac_pattern p[64];
  for (int round = 0; round < 40; round++) {
    unsigned alpha = 2 + round % 4, n = 1 + (unsigned)(rnd(&seed) % 64);
    for (unsigned i = 0; i < n; i++) {
      p[i].len = 1 + (uint32_t)(rnd(&seed) % (round % 2 ? 8 : 4));
      for (uint32_t j = 0; j < p[i].len; j++)
        pbuf[i][j] = (uint8_t)('a' + rnd(&seed) % alpha);
      p[i].p = pbuf[i];
    }
    for (size_t i = 0; i < sizeof text; i++)
      text[i] = (uint8_t)('a' + rnd(&seed) % (alpha + 1)); /* plus one byte in no pattern */
    uint64_t want = naive(p, n, text, sizeof text);
    /* Dense, a hybrid (few dense rows), and the minimum (root + depth 1). */
    size_t limits[3] = { 0, 8 * 1024, 1 };
    for (int l = 0; l < 3; l++) {
      struct fs_hook_ac *ac;
      ck_assert_int_eq(fs_hook_ac_build(p, n, limits[l], &ac), 0);
      ck_assert_uint_eq(ac_count(ac, text, sizeof text, sizeof text, &seed), want);
      ck_assert_uint_eq(ac_count(ac, text, sizeof text, 0, &seed), want);
      ck_assert_uint_eq(ac_count(ac, text, 300, 1, &seed), naive(p, n, text, 300));
      /* Every split point of a short prefix. */
      uint64_t w = naive(p, n, text, 64);
      for (size_t k = 0; k <= 64; k++) {
        uint32_t st = 0, nm;
        uint64_t c = 0;
        for (size_t off = 0, u; off < k; off += u, c += nm)
          u = fs_hook_ac_scan(ac, &st, text + off, k - off, &nm);
        for (size_t off = k, u; off < 64; off += u, c += nm)
          u = fs_hook_ac_scan(ac, &st, text + off, 64 - off, &nm);
        ck_assert_uint_eq(c, w);
      }
      fs_hook_ac_free(ac);
    }
  }
}
END_TEST

START_TEST(binary_patterns_random_data)
{
  /* Byte patterns of 1..3 bytes over random bytes: a narrow start filter. */
  uint64_t seed = 7;
  enum { N = 300, LEN = 1 << 18 };
  static uint8_t text[LEN], pbuf[N][6];
  struct fs_hook_ac_pattern p[N];
  for (size_t i = 0; i < LEN; i++)
    text[i] = (uint8_t)rnd(&seed);
  for (unsigned i = 0; i < N; i++) {
    p[i].len = 1 + i % 3;
    size_t at = rnd(&seed) % (LEN - 8);
    memcpy(pbuf[i], text + at, p[i].len); /* make sure some occur */
    p[i].p = pbuf[i];
  }
  uint64_t want = naive(p, N, text, LEN);
  struct fs_hook_ac *ac;
  ck_assert_int_eq(fs_hook_ac_build(p, N, 0, &ac), 0);
  ck_assert_uint_eq(ac_count(ac, text, LEN, LEN, &seed), want);
  ck_assert_uint_eq(ac_count(ac, text, LEN, 0, &seed), want);
  fs_hook_ac_free(ac);
}
END_TEST

/* Every match event (end offset, patterns ending there, the longest of them)
 * in order, against a naive search, whatever the chunking: the scanner may
 * skip bytes (hooks/hook_ac.h) but must report exactly what a plain walk does.
 * Alphabets from 2 letters (prefixes everywhere) to all 256 bytes, patterns
 * from 1 to 40 bytes (start filters 1 to 4 bytes wide), dense and compact
 * layouts. */
START_TEST(match_events)
{
  enum { LEN = 20000, NP = 150, EV = LEN * 4 };
  static uint8_t text[LEN], pbuf[NP][40];
  static uint64_t want[EV], got[EV];
  struct fs_hook_ac_pattern p[NP];
  uint64_t seed = 99;
  for (int round = 0; round < 60; round++) {
    unsigned alpha = round % 3 == 2 ? 256 : 2 + (unsigned)(rnd(&seed) % 20);
    unsigned n = 1 + (unsigned)(rnd(&seed) % NP), minl = 1 + round % 5;
    unsigned span = round % 4 == 3 ? 36 : 8;
    for (unsigned i = 0; i < n; i++) {
      p[i].len = minl + (uint32_t)(rnd(&seed) % span);
      for (uint32_t j = 0; j < p[i].len; j++)
        pbuf[i][j] = (uint8_t)(alpha == 256 ? rnd(&seed) : 'a' + rnd(&seed) % alpha);
      p[i].p = pbuf[i];
    }
    for (size_t i = 0; i < LEN; i++)
      text[i] = (uint8_t)(alpha == 256 || rnd(&seed) % 64 == 0 ? rnd(&seed) : 'a' + rnd(&seed) % alpha);
    for (int k = 0; k < 40; k++) { /* plant some */
      const struct fs_hook_ac_pattern *q = &p[rnd(&seed) % n];
      memcpy(text + rnd(&seed) % (LEN - q->len), q->p, q->len);
    }
    /* Naive events: at each end, the distinct patterns ending there and the
     * first index of the longest (a duplicate counts as its first copy). */
    size_t nw = 0;
    int dup[NP] = { 0 };
    for (unsigned i = 0; i < n; i++)
      for (unsigned j = 0; j < i && !dup[i]; j++)
        dup[i] = p[j].len == p[i].len && memcmp(p[j].p, p[i].p, p[i].len) == 0;
    for (size_t e = 1; e <= LEN; e++) {
      uint32_t cnt = 0, best = 0, blen = 0;
      for (unsigned i = 0; i < n; i++) {
        if (dup[i] || p[i].len > e || memcmp(text + e - p[i].len, p[i].p, p[i].len) != 0)
          continue;
        cnt++;
        if (p[i].len > blen)
          blen = p[i].len, best = i;
      }
      if (cnt)
        want[nw++] = (uint64_t)e << 32 | (uint64_t)cnt << 16 | best;
    }
    size_t limit = round % 5 == 4 ? 1 : 0;
    struct fs_hook_ac *ac;
    ck_assert_int_eq(fs_hook_ac_build(p, n, limit, &ac), 0);
    uint32_t st = 0, nm;
    size_t ng = 0, off = 0;
    while (off < LEN) {
      size_t k = round % 2 ? 1 + rnd(&seed) % 7 : 1 + rnd(&seed) % 3000, end;
      end = off + k < LEN ? off + k : LEN;
      while (off < end) {
        off += fs_hook_ac_scan(ac, &st, text + off, end - off, &nm);
        if (nm && ng < EV)
          got[ng++] = (uint64_t)off << 32 | (uint64_t)nm << 16 | fs_hook_ac_state_pattern(ac, st);
      }
    }
    fs_hook_ac_free(ac);
    ck_assert_uint_eq(ng, nw);
    for (size_t i = 0; i < nw; i++)
      ck_assert_msg(got[i] == want[i], "round %d event %zu: got %llx want %llx", round, i,
                    (unsigned long long)got[i], (unsigned long long)want[i]);
  }
}
END_TEST

START_TEST(actions)
{
  const char *pf = "# test\nevil\n\\x00\\xff\n";
  const char *path = tmpfile_with(1, pf, strlen(pf));
  char spec[300], log[4096];
  struct fs_hookset *hs;
  struct capture cap;
  /* close: across a chunk boundary, recv only by default. */
  snprintf(spec, sizeof spec, "dpi:patterns=%s,action=close", path);
  ck_assert_int_eq(fs_hook_open(spec, NULL, NULL, &hs), 0);
  ck_assert_int_eq(fs_hook_send(hs, "evil", 4), 0);
  ck_assert_int_eq(fs_hook_recv(hs, "hi ev", 5), 0);
  capture_start(&cap);
  ck_assert_int_eq(fs_hook_recv(hs, "il", 2), -ECONNABORTED);
  capture_end(&cap, log, sizeof log);
  char want[400];
  snprintf(want, sizeof want, "dpi: fd -1: pattern 'evil' (%s:2) matched at recv offset 3; closing", path);
  ck_assert_msg(strstr(log, want) != NULL, "%s", log);
  ck_assert_uint_eq(fs_hook_dpi_matches(hs), 1);
  fs_hook_close(hs);
  /* count: both directions, no log, no close. */
  snprintf(spec, sizeof spec, "dpi:patterns=%s,action=count,dir=both", path);
  ck_assert_int_eq(fs_hook_open(spec, NULL, NULL, &hs), 0);
  capture_start(&cap);
  for (int i = 0; i < 100; i++) {
    ck_assert_int_eq(fs_hook_send(hs, "evilevil\0", 9), 0);
    ck_assert_int_eq(fs_hook_recv(hs, "\xff", 1), 0);
  }
  capture_end(&cap, log, sizeof log);
  ck_assert_str_eq(log, "");
  ck_assert_uint_eq(fs_hook_dpi_matches(hs), 200);
  fs_hook_close(hs);
  /* log: the first 8 matches per direction, then one line. */
  snprintf(spec, sizeof spec, "dpi:patterns=%s,dir=send", path);
  ck_assert_int_eq(fs_hook_open(spec, NULL, NULL, &hs), 0);
  capture_start(&cap);
  for (int i = 0; i < 20; i++)
    ck_assert_int_eq(fs_hook_send(hs, "evil", 4), 0);
  ck_assert_int_eq(fs_hook_recv(hs, "evil", 4), 0);
  capture_end(&cap, log, sizeof log);
  int lines = 0;
  for (char *q = log; (q = strchr(q, '\n')) != NULL; q++)
    lines++;
  ck_assert_int_eq(lines, 9);
  ck_assert_ptr_nonnull(strstr(log, "further send matches not logged"));
  ck_assert_uint_eq(fs_hook_dpi_matches(hs), 20);
  fs_hook_close(hs);
  unlink(path);
}
END_TEST

START_TEST(shared_and_reloaded)
{
  const char *path = tmpfile_with(2, "foo\n", 4);
  char spec[300];
  struct fs_hookset *a, *b, *c;
  snprintf(spec, sizeof spec, "dpi:patterns=%s,action=count", path);
  ck_assert_int_eq(fs_hook_open(spec, NULL, NULL, &a), 0);
  ck_assert_int_eq(fs_hook_open(spec, NULL, NULL, &b), 0);
  FILE *f = fopen(path, "w");
  fputs("barbaz\n", f);
  fclose(f);
  ck_assert_int_eq(fs_hook_open(spec, NULL, NULL, &c), 0);
  for (struct fs_hookset *h = a; h; h = h == a ? b : h == b ? c : NULL)
    ck_assert_int_eq(fs_hook_recv(h, "foo barbaz", 10), 0);
  ck_assert_uint_eq(fs_hook_dpi_matches(a), 1);
  ck_assert_uint_eq(fs_hook_dpi_matches(b), 1);
  ck_assert_uint_eq(fs_hook_dpi_matches(c), 1);
  fs_hook_dpi_cache_clear();  /* sets stay alive while used */
  ck_assert_int_eq(fs_hook_recv(a, "foo", 3), 0);
  ck_assert_uint_eq(fs_hook_dpi_matches(a), 2);
  fs_hook_close(a);
  fs_hook_close(b);
  fs_hook_close(c);
  unlink(path);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("hook_dpi");
  TCase *tc = tcase_create("dpi");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, pattern_escapes);
  tcase_add_test(tc, pattern_errors);
  tcase_add_test(tc, empty_and_file_errors);
  tcase_add_test(tc, overlapping);
  tcase_add_test(tc, boundaries_and_random);
  tcase_add_test(tc, binary_patterns_random_data);
  tcase_add_test(tc, match_events);
  tcase_add_test(tc, actions);
  tcase_add_test(tc, shared_and_reloaded);
  suite_add_tcase(s, tc);
  return run_suite(s, false);
}
