/* Built-in frame hook: header widths, endianness, magic, limits, lines,
 * arbitrary chunk splits, resynchronization, the wake hint. */
#include "tests/unit/check_hook_util.h"
#include "hooks/hook_frame.h"

/* Append one frame: [magic][len][payload]. */
static size_t put_frame(uint8_t *out, const uint8_t *magic, unsigned mlen, unsigned width,
                        int little, uint64_t len, uint64_t *seed)
{
  size_t o = 0;
  if (mlen) /* magic may be NULL then: memcpy(x, NULL, 0) is undefined */
    memcpy(out, magic, mlen);
  o += mlen;
  for (unsigned i = 0; i < width; i++)
    out[o + i] = (uint8_t)(len >> (8 * (little ? i : width - 1 - i)));
  o += width;
  for (uint64_t i = 0; i < len; i++)
    out[o++] = (uint8_t)rnd(seed);
  return o;
}

/* Open spec, feed stream (chunk as in feed_split) to recv; messages counted. */
static uint64_t count_msgs(const char *spec, const uint8_t *buf, size_t len, size_t chunk,
                           uint64_t seed, int *rc_out)
{
  struct fs_stat_conn st = { 0 };
  struct fs_hookset *hs;
  ck_assert_int_eq(fs_hook_open(spec, NULL, &st, &hs), 0);
  ck_assert_ptr_nonnull(hs);
  int rc = feed_split(hs, 1, buf, len, chunk, 97, &seed);
  if (rc_out)
    *rc_out = rc;
  fs_hook_close(hs);
  ck_assert_uint_eq(st.tx_msgs, 0);
  return st.rx_msgs;
}

START_TEST(widths)
{
  static const struct { const char *h; unsigned w; int le; } hd[] = {
    { "len8", 1, 0 }, { "len8le", 1, 1 }, { "len16be", 2, 0 }, { "len16le", 2, 1 },
    { "len32be", 4, 0 }, { "len32le", 4, 1 }, { "len64be", 8, 0 }, { "len64le", 8, 1 },
    { "len32", 4, 0 },
  };
  static const uint8_t magic[4] = { 0xFA, 0xB5, 0x0C, 0x0D };
  uint8_t *buf = malloc(1 << 20);
  for (unsigned h = 0; h < sizeof hd / sizeof hd[0]; h++)
    for (int m = 0; m < 2; m++) {
      uint64_t seed = 1 + h * 2 + (uint64_t)m, nframes = 0;
      size_t len = 0;
      while (len < 200000) {
        uint64_t n = rnd(&seed) % 300;
        if (hd[h].w == 1)
          n &= 0xff;
        if (rnd(&seed) % 8 == 0)
          n = 0;
        len += put_frame(buf + len, magic, m ? 4 : 0, hd[h].w, hd[h].le, n, &seed);
        nframes++;
      }
      char spec[128];
      snprintf(spec, sizeof spec, "frame:header=%s%s,max=300", m ? "magic:FAB50C0D+" : "",
               hd[h].h);
      int rc;
      ck_assert_uint_eq(count_msgs(spec, buf, len, len, 0, &rc), nframes);
      ck_assert_int_eq(rc, 0);
      ck_assert_uint_eq(count_msgs(spec, buf, len, 0, seed, &rc), nframes);
      ck_assert_int_eq(rc, 0);
      ck_assert_uint_eq(count_msgs(spec, buf, 20000, 1, 0, &rc),
                        count_msgs(spec, buf, 20000, 20000, 0, NULL));
      ck_assert_int_eq(rc, 0);
    }
  free(buf);
}
END_TEST

START_TEST(one_byte_chunks_and_wake_hint)
{
  uint8_t buf[64];
  uint64_t seed = 5;
  size_t len = put_frame(buf, (const uint8_t *)"\xAB\xCD", 2, 4, 0, 10, &seed);
  len += put_frame(buf + len, (const uint8_t *)"\xAB\xCD", 2, 4, 0, 0, &seed);
  struct fs_stat_conn st = { 0 };
  struct fs_hookset *hs;
  ck_assert_int_eq(fs_hook_open("frame:header=magic:ABCD+len32be", NULL, &st, &hs), 0);
  ck_assert_uint_eq(fs_hook_wake_hint(hs), 0); /* at a boundary */
  for (size_t i = 0; i < len; i++) {
    ck_assert_int_eq(fs_hook_recv(hs, buf + i, 1), 0);
    size_t want = i < 5 ? 5 - i : i < 16 ? 15 - i : i < 21 ? 21 - i : 0;
    ck_assert_uint_eq(fs_hook_wake_hint(hs), want);
    ck_assert_uint_eq(st.rx_msgs, i < 15 ? 0 : i < 21 ? 1 : 2);
  }
  ck_assert_int_eq(fs_hook_counts_msgs(hs), 3);
  fs_hook_close(hs);
}
END_TEST

START_TEST(oversized_close)
{
  uint8_t buf[4096];
  uint64_t seed = 9;
  size_t len = put_frame(buf, NULL, 0, 2, 0, 100, &seed);
  len += put_frame(buf + len, NULL, 0, 2, 0, 2000, &seed);
  len += put_frame(buf + len, NULL, 0, 2, 0, 10, &seed);
  for (size_t chunk = 1; chunk <= len; chunk = chunk * 3 + 1) {
    struct fs_stat_conn st = { 0 };
    struct fs_hookset *hs;
    struct capture cap;
    char log[2048];
    ck_assert_int_eq(fs_hook_open("frame:header=len16be,max=1024,action=close", NULL, &st, &hs), 0);
    capture_start(&cap);
    int rc = feed_split(hs, 1, buf, len, chunk, 0, &seed);
    capture_end(&cap, log, sizeof log);
    ck_assert_int_eq(rc, -ECONNABORTED);
    ck_assert_uint_eq(st.rx_msgs, 1);
    ck_assert_ptr_nonnull(strstr(log, "frame: fd -1: frame of 2000 bytes exceeds max 1024; closing"));
    ck_assert_ptr_null(strchr(strchr(log, '\n') + 1, '\n')); /* one line */
    ck_assert_int_eq(fs_hook_recv(hs, "x", 1), -ECONNABORTED); /* sticky */
    ck_assert_int_eq(fs_hook_send(hs, "x", 1), -ECONNABORTED);
    ck_assert_int_eq(fs_hook_aborted(hs), 1);
    fs_hook_close(hs);
  }
}
END_TEST

START_TEST(oversized_log_resyncs)
{
  uint8_t buf[8192];
  uint64_t seed = 10;
  size_t len = 0;
  for (int i = 0; i < 12; i++)
    len += put_frame(buf + len, NULL, 0, 4, 1, i % 2 ? 500 : 5, &seed);
  struct capture cap;
  char log[4096];
  int rc;
  capture_start(&cap);
  uint64_t n = count_msgs("frame:header=len32le,max=100,action=log", buf, len, 0, 3, &rc);
  capture_end(&cap, log, sizeof log);
  ck_assert_int_eq(rc, 0);
  ck_assert_uint_eq(n, 12); /* every frame, the oversized ones too */
  ck_assert_ptr_nonnull(strstr(log, "frame of 500 bytes exceeds max 100; logged"));
}
END_TEST

START_TEST(bad_magic)
{
  uint8_t buf[256];
  uint64_t seed = 11;
  size_t len = put_frame(buf, (const uint8_t *)"\xFA\xB5", 2, 1, 0, 3, &seed);
  len += put_frame(buf + len, (const uint8_t *)"\xFA\xB6", 2, 1, 0, 3, &seed);
  len += put_frame(buf + len, (const uint8_t *)"\xFA\xB5", 2, 1, 0, 3, &seed);
  struct capture cap;
  char log[2048];
  int rc;
  capture_start(&cap);
  ck_assert_uint_eq(count_msgs("frame:header=magic:fab5+len8", buf, len, 0, 1, &rc), 1);
  capture_end(&cap, log, sizeof log);
  ck_assert_int_eq(rc, -ECONNABORTED);
  ck_assert_ptr_nonnull(strstr(log, "bad frame magic FAB6 (expected FAB5); closing"));
  /* action=log: that direction stops being checked and counted. */
  capture_start(&cap);
  ck_assert_uint_eq(count_msgs("frame:header=magic:fab5+len8,action=log", buf, len, 1, 1, &rc), 1);
  capture_end(&cap, log, sizeof log);
  ck_assert_int_eq(rc, 0);
  ck_assert_ptr_nonnull(strstr(log, "no longer checking recv"));
}
END_TEST

START_TEST(lines)
{
  const char *text = "abcd\r\n\nab\rc\nabcde\r\nhello\n";
  size_t len = strlen(text);
  int rc;
  for (size_t chunk = 1; chunk <= len; chunk++) {
    ck_assert_uint_eq(count_msgs("frame:header=line,max=5", (const uint8_t *)text, len, chunk, 0, &rc), 5);
    ck_assert_int_eq(rc, 0);
    /* "ab\rc" is 4 bytes (only a CR right before LF is stripped); "abcde" 5. */
    ck_assert_uint_eq(count_msgs("frame:header=line,max=4", (const uint8_t *)text, len, chunk, 0, &rc), 3);
    ck_assert_int_eq(rc, -ECONNABORTED);
  }
  /* A long line with no LF yet is caught before its end. */
  struct fs_hookset *hs;
  ck_assert_int_eq(fs_hook_open("frame:header=line,max=3", NULL, NULL, &hs), 0);
  ck_assert_int_eq(fs_hook_send(hs, "abc\r", 4), 0);
  ck_assert_int_eq(fs_hook_send(hs, "\n", 1), 0);
  ck_assert_int_eq(fs_hook_send(hs, "abcd", 4), 0);
  ck_assert_int_eq(fs_hook_send(hs, "e", 1), -ECONNABORTED);
  fs_hook_close(hs);
  /* action=log resynchronizes at the next LF. */
  ck_assert_uint_eq(count_msgs("frame:header=line,max=2,action=log", (const uint8_t *)"abcdef\nab\nx", 11,
                               1, 0, &rc), 2);
  ck_assert_int_eq(rc, 0);
}
END_TEST

START_TEST(directions)
{
  struct fs_stat_conn st = { 0 };
  struct fs_hookset *hs;
  uint8_t fr[3] = { 0, 1, 'x' };
  ck_assert_int_eq(fs_hook_open("frame:header=len16be,dir=send;frame:header=line", NULL, &st, &hs), 0);
  ck_assert_int_eq(fs_hook_send(hs, fr, 3), 0);
  ck_assert_int_eq(fs_hook_recv(hs, "a\nb\n", 4), 0);
  ck_assert_uint_eq(st.tx_msgs, 1); /* the second hook checks send too, but does not count it */
  ck_assert_uint_eq(st.rx_msgs, 2);
  ck_assert_int_eq(fs_hook_counts_msgs(hs), 3);
  ck_assert_uint_eq(fs_hook_wake_hint(hs), 0); /* line mode */
  fs_hook_close(hs);
  ck_assert_int_eq(fs_hook_open("frame:dir=recv", NULL, &st, &hs), 0);
  ck_assert_int_eq(fs_hook_send(hs, "\xff\xff\xff\xff", 4), 0); /* not checked */
  ck_assert_int_eq(fs_hook_recv(hs, "\0\0\1\0", 4), 0);
  ck_assert_uint_eq(fs_hook_wake_hint(hs), 256);
  fs_hook_close(hs);
}
END_TEST

START_TEST(huge_lengths)
{
  struct fs_hookset *hs;
  ck_assert_int_eq(fs_hook_open("frame:header=len64be", NULL, NULL, &hs), 0);
  ck_assert_int_eq(fs_hook_recv(hs, "\xff\xff\xff\xff\xff\xff\xff\xff", 8), 0);
  ck_assert_uint_eq(fs_hook_wake_hint(hs), SIZE_MAX);
  ck_assert_int_eq(fs_hook_recv(hs, "abc", 3), 0);
  ck_assert_uint_eq(fs_hook_wake_hint(hs), SIZE_MAX - 3);
  fs_hook_close(hs);
  ck_assert_int_eq(fs_hook_open("frame:header=len64le,max=16G", NULL, NULL, &hs), 0);
  ck_assert_int_eq(fs_hook_recv(hs, "\0\0\0\0\4\0\0\0", 8), 0); /* 16 GiB: at the limit */
  ck_assert_int_eq(fs_hook_recv(hs, "ab", 2), 0);
  fs_hook_close(hs);
  ck_assert_int_eq(fs_hook_open("frame:header=len64le,max=16G", NULL, NULL, &hs), 0);
  ck_assert_int_eq(fs_hook_recv(hs, "\1\0\0\0\4\0\0\0", 8), -ECONNABORTED);
  fs_hook_close(hs);
}
END_TEST

START_TEST(bad_args)
{
  static const char *const bad[] = {
    "frame:header=len12be", "frame:header=len32xe", "frame:header=magic:ZZ+len32",
    "frame:header=magic:+len32", "frame:header=magic:ABC+len32", "frame:header=magic:AB",
    "frame:header=magic:001122334455667788+len8", "frame:header=", "frame:max=abc",
    "frame:max=99999999999999999999", "frame:max=1T", "frame:action=drop", "frame:dir=up",
    "frame:foo=1", "frame:header", "frame:=1", "frame:max=-1",
  };
  char err[256];
  for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct fs_hookset *hs = (void *)1;
    ck_assert_msg(fs_hook_spec_check(bad[i], err, sizeof err) == -EINVAL, "%s", bad[i]);
    ck_assert_msg(strncmp(err, "frame: ", 7) == 0, "%s -> %s", bad[i], err);
    ck_assert_int_eq(fs_hook_open(bad[i], NULL, NULL, &hs), -EINVAL);
    ck_assert_ptr_null(hs);
  }
  ck_assert_int_eq(fs_hook_spec_check("frame:header=magic:0011223344556677+len64le,max=1k,"
                                      "action=log,dir=both", err, sizeof err), 0);
  ck_assert_int_eq(fs_hook_spec_check(" frame : max = 4M , header = line ", err, sizeof err), 0);
}
END_TEST

START_TEST(garbage_never_crashes)
{
  static const char *const specs[] = {
    "frame:header=len8,max=10,action=log", "frame:header=magic:AA+len16le,action=log",
    "frame:header=line,max=1,action=log", "frame:header=len64be,max=0,action=log",
  };
  uint8_t buf[65536];
  uint64_t seed = 77;
  for (size_t i = 0; i < sizeof buf; i++)
    buf[i] = (uint8_t)rnd(&seed);
  for (unsigned s = 0; s < 4; s++) {
    int rc;
    fs_log_level = FS_LOG_OFF;
    count_msgs(specs[s], buf, sizeof buf, 0, s, &rc);
    fs_log_level = FS_LOG_WARN;
    ck_assert_int_eq(rc, 0);
  }
}
END_TEST

int main(void)
{
  Suite *s = suite_create("hook_frame");
  TCase *tc = tcase_create("frame");
  tcase_add_test(tc, widths);
  tcase_add_test(tc, one_byte_chunks_and_wake_hint);
  tcase_add_test(tc, oversized_close);
  tcase_add_test(tc, oversized_log_resyncs);
  tcase_add_test(tc, bad_magic);
  tcase_add_test(tc, lines);
  tcase_add_test(tc, directions);
  tcase_add_test(tc, huge_lengths);
  tcase_add_test(tc, bad_args);
  tcase_add_test(tc, garbage_never_crashes);
  suite_add_tcase(s, tc);
  return run_suite(s, false);
}
