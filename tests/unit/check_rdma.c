/* Unit tests for the rdma fabric's pure parts: the connect request check
 * (hostile private data is refused with a reason, never trusted) and the
 * 30-bit position arithmetic of the immediate-data format (core/rdma.h).
 * The live fabric needs a verbs device: tests/vm runs it over Soft-RoCE. */
#include <arpa/inet.h>
#include <check.h>
#include <endian.h>
#include <stdlib.h>
#include <string.h>

#include "core/rdma.h"
#include "core/rdmacm.h"
#include "core/reason.h"

static struct fs_rdmacm_msg good(void)
{
  struct fs_rdmacm_msg m = { htonl(FS_RDMACM_MAGIC_REQ), 1, 18, htons(40000), htobe64(0x7f0012345000ull), htonl(0x1234), 0 };
  return m;
}

START_TEST(t_req_good)
{
  struct fs_rdmacm_msg m = good(), out;
  ck_assert_int_eq(sizeof m, 24); /* the wire size: fits RoCE's 56 bytes */
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out), 0);
  ck_assert_uint_eq(out.port, 40000);
  ck_assert_uint_eq(out.ring_log2, 18);
  ck_assert(out.addr == 0x7f0012345000ull);
  ck_assert_uint_eq(out.rkey, 0x1234);
  /* trailing bytes (a longer private data area) are ignored */
  uint8_t big[56] = { 0 };
  memcpy(big, &m, sizeof m);
  ck_assert_int_eq(fs_rdmacm_check_req(big, sizeof big, &out), 0);
}
END_TEST

START_TEST(t_req_hostile)
{
  struct fs_rdmacm_msg m, out;
  ck_assert_int_eq(fs_rdmacm_check_req(NULL, 0, &out), FS_REASON_PROTOCOL);
  m = good();
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m - 1, &out), FS_REASON_PROTOCOL);
  m = good(), m.magic = htonl(FS_RDMACM_MAGIC_ACC);
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out), FS_REASON_PROTOCOL);
  m = good(), m.version = 2;
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out), FS_REASON_VERSION);
  m = good(), m.ring_log2 = 15;
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out), FS_REASON_PROTOCOL);
  m = good(), m.ring_log2 = 25;
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out), FS_REASON_PROTOCOL);
  m = good(), m.ring_log2 = 255;
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out), FS_REASON_PROTOCOL);
  m = good(), m.port = 0;
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out), FS_REASON_PROTOCOL);
  m = good(), m.rkey = 0;
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out), FS_REASON_PROTOCOL);
  m = good(), m.flags = htonl(1);
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out), FS_REASON_PROTOCOL);
  /* random garbage: always a reason, never a crash */
  srand(7);
  for (int i = 0; i < 100000; i++) {
    uint8_t b[24];
    for (size_t j = 0; j < sizeof b; j++)
      b[j] = (uint8_t)rand();
    if (i & 1)
      memcpy(b, &(uint32_t){ htonl(FS_RDMACM_MAGIC_REQ) }, 4);
    int r = fs_rdmacm_check_req(b, (size_t)(rand() % 25), &out);
    if (r == 0) { /* only a well-formed request passes */
      ck_assert(out.ring_log2 >= FS_RDMACM_RING_LOG2_MIN && out.ring_log2 <= FS_RDMACM_RING_LOG2_MAX);
      ck_assert(out.port != 0 && out.rkey != 0);
    }
  }
}
END_TEST

START_TEST(t_unwrap)
{
  /* the value is the low 30 bits of the new position */
  ck_assert(fs_rdma_unwrap(0, 100) == 100);
  ck_assert(fs_rdma_unwrap(100, 100) == 100);
  uint64_t last = (1ull << 30) - 16;
  uint64_t next = last + 4096;
  ck_assert(fs_rdma_unwrap(last, (uint32_t)(next & FS_RDMA_IMM_MASK)) == next);
  last = (5ull << 32) + 12345;
  next = last + (16u << 20); /* a whole 16 MiB ring ahead */
  ck_assert(fs_rdma_unwrap(last, (uint32_t)(next & FS_RDMA_IMM_MASK)) == next);
  /* an advance that is a multiple of 2^30 is indistinguishable from none: rings stay far below it */
  ck_assert(fs_rdma_unwrap(last, (uint32_t)((last + (1ull << 30)) & FS_RDMA_IMM_MASK)) == last);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("rdma");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, t_req_good);
  tcase_add_test(tc, t_req_hostile);
  tcase_add_test(tc, t_unwrap);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
