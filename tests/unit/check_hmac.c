/* Unit tests for base/hmac: the FIPS 180-4 SHA-256 vectors, the RFC 4231
 * HMAC-SHA-256 vectors (short, long and over-block-size keys), updates in
 * pieces of every size, and the constant-time comparison. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "base/hmac.h"
#include "tests/unit/check_run.h"

static void hex(const uint8_t *d, char *out)
{
  for (int i = 0; i < FS_HMAC_LEN; i++)
    sprintf(out + 2 * i, "%02x", d[i]);
}

static void sha_is(const void *msg, size_t len, const char *want)
{
  struct fs_hmac_sha s;
  uint8_t d[FS_HMAC_LEN];
  char got[2 * FS_HMAC_LEN + 1];
  fs_hmac_sha_init(&s);
  fs_hmac_sha_update(&s, msg, len);
  fs_hmac_sha_final(&s, d);
  hex(d, got);
  ck_assert_str_eq(got, want);
}

static void hmac_is(const void *key, size_t klen, const void *msg, size_t len, const char *want)
{
  struct fs_hmac h;
  uint8_t d[FS_HMAC_LEN];
  char got[2 * FS_HMAC_LEN + 1];
  fs_hmac_init(&h, key, klen);
  fs_hmac_update(&h, msg, len);
  fs_hmac_final(&h, d);
  hex(d, got);
  ck_assert_str_eq(got, want);
}

START_TEST(t_sha_vectors)
{
  sha_is("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  sha_is("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 56 bytes: padding spills */
  sha_is(two, strlen(two), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  static char a[1000000];
  memset(a, 'a', sizeof a);
  sha_is(a, sizeof a, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
END_TEST

START_TEST(t_sha_pieces)
{
  /* every split of a 200-byte message gives the one-shot digest */
  uint8_t msg[200], one[FS_HMAC_LEN], two[FS_HMAC_LEN];
  for (size_t i = 0; i < sizeof msg; i++)
    msg[i] = (uint8_t)(i * 7 + 3);
  struct fs_hmac_sha s;
  fs_hmac_sha_init(&s);
  fs_hmac_sha_update(&s, msg, sizeof msg);
  fs_hmac_sha_final(&s, one);
  for (size_t step = 1; step <= sizeof msg; step++) {
    fs_hmac_sha_init(&s);
    for (size_t off = 0; off < sizeof msg; off += step)
      fs_hmac_sha_update(&s, msg + off, off + step <= sizeof msg ? step : sizeof msg - off);
    fs_hmac_sha_final(&s, two);
    ck_assert_msg(memcmp(one, two, sizeof one) == 0, "pieces of %zu", step);
  }
}
END_TEST

START_TEST(t_hmac_rfc4231)
{
  uint8_t k20[20], aa[131], dd[50];
  memset(k20, 0x0b, sizeof k20);
  hmac_is(k20, sizeof k20, "Hi There", 8, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  hmac_is("Jefe", 4, "what do ya want for nothing?", 28,
          "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  memset(aa, 0xaa, sizeof aa);
  memset(dd, 0xdd, sizeof dd);
  hmac_is(aa, 20, dd, sizeof dd, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  const char *m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
  hmac_is(aa, sizeof aa, m6, strlen(m6), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  const char *m7 = "This is a test using a larger than block-size key and a larger than block-size data. "
                   "The key needs to be hashed before being used by the HMAC algorithm.";
  hmac_is(aa, sizeof aa, m7, strlen(m7), "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}
END_TEST

START_TEST(t_equal)
{
  uint8_t a[16] = { 1, 2, 3 }, b[16] = { 1, 2, 3 };
  ck_assert(fs_hmac_equal(a, b, sizeof a));
  for (size_t i = 0; i < sizeof a; i++) {
    b[i] ^= 0x80;
    ck_assert(!fs_hmac_equal(a, b, sizeof a));
    b[i] ^= 0x80;
  }
  ck_assert(fs_hmac_equal(a, b, 0));
}
END_TEST

int main(void)
{
  Suite *s = suite_create("hmac");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, t_sha_vectors);
  tcase_add_test(tc, t_sha_pieces);
  tcase_add_test(tc, t_hmac_rfc4231);
  tcase_add_test(tc, t_equal);
  suite_add_tcase(s, tc);
  return run_suite(s, false);
}
