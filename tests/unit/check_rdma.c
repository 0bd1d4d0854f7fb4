/* Unit tests for the rdma fabric's pure parts: the connect request check
 * (hostile private data is refused with a reason, never trusted) and the
 * 30-bit position arithmetic of the immediate-data format (fabric/rdma/rdma.h),
 * and the resume request (the same checks, its own magic).
 * The live fabric needs a verbs device: tests/vm runs it over Soft-RoCE. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <endian.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <link.h>
#include <unistd.h>

#include "fabric/rdma/rdma.h"
#include "fabric/rdma/rdmacm.h"
#include "fabric/rdma/rdma_int.h"
#include "fabric/rdma/verbs.h"
#include "base/clock.h"
#include "base/reason.h"
#include "tests/unit/check_run.h"

static struct fs_rdmacm_msg good(void)
{
  struct fs_rdmacm_msg m = { htonl(FS_RDMACM_MAGIC_REQ), FS_RDMACM_VERSION, 18, htons(40000), htobe64(0x7f0012345000ull), htonl(0x1234), 0 };
  return m;
}

START_TEST(t_req_good)
{
  struct fs_rdmacm_msg m = good(), out;
  bool mac = true;
  ck_assert_int_eq(sizeof m, 24); /* the wire size: fits RoCE's 56 bytes */
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out, &mac), 0);
  ck_assert_uint_eq(out.port, 40000);
  ck_assert_uint_eq(out.ring_log2, 18);
  ck_assert(out.addr == 0x7f0012345000ull);
  ck_assert_uint_eq(out.rkey, 0x1234);
  ck_assert(!mac);
  /* trailing bytes (a longer private data area) are ignored */
  uint8_t big[56] = { 0 };
  memcpy(big, &m, sizeof m);
  ck_assert_int_eq(fs_rdmacm_check_req(big, sizeof big, &out, &mac), 0);
  /* a key covering the whole region: taken, and said */
  m.flags = htonl(FS_RDMACM_F_WHOLE);
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out, &mac), 0);
  ck_assert_uint_eq(out.flags, FS_RDMACM_F_WHOLE);
  ck_assert(!mac);
}
END_TEST

START_TEST(t_req_hostile)
{
  struct fs_rdmacm_msg m, out;
  bool mac;
  ck_assert_int_eq(fs_rdmacm_check_req(NULL, 0, &out, &mac), FS_REASON_PROTOCOL);
  m = good();
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m - 1, &out, &mac), FS_REASON_PROTOCOL);
  m = good(), m.magic = htonl(FS_RDMACM_MAGIC_ACC);
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out, &mac), FS_REASON_PROTOCOL);
  m = good(), m.version = 1; /* the version before */
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out, &mac), FS_REASON_VERSION);
  m = good(), m.ring_log2 = 15;
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out, &mac), FS_REASON_PROTOCOL);
  m = good(), m.ring_log2 = 25;
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out, &mac), FS_REASON_PROTOCOL);
  m = good(), m.ring_log2 = 255;
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out, &mac), FS_REASON_PROTOCOL);
  m = good(), m.port = 0;
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out, &mac), FS_REASON_PROTOCOL);
  m = good(), m.rkey = 0;
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out, &mac), FS_REASON_PROTOCOL);
  m = good(), m.flags = htonl(1); /* a MAC announced, not there */
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out, &mac), FS_REASON_PROTOCOL);
  m = good(), m.flags = htonl(4); /* no such flag */
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out, &mac), FS_REASON_PROTOCOL);
  /* random garbage: always a reason, never a crash */
  srand(7);
  for (int i = 0; i < 100000; i++) {
    uint8_t b[24];
    for (size_t j = 0; j < sizeof b; j++)
      b[j] = (uint8_t)rand();
    if (i & 1)
      memcpy(b, &(uint32_t){ htonl(FS_RDMACM_MAGIC_REQ) }, 4);
    int r = fs_rdmacm_check_req(b, (size_t)(rand() % 25), &out, &mac);
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

/* ---- the pre-shared-key authenticator ----------------------------------- */

static struct sockaddr_in v4(const char *ip, int port)
{
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
  inet_pton(AF_INET, ip, &a.sin_addr);
  return a;
}

static const uint8_t key1[32] = { 1, 2, 3 }, key2[32] = { 1, 2, 4 };
#define T0 1795000000000ull /* a wall clock in ms */

/* Ring keys in FLAGS immediates (wire format v2): low half first, the high
 * one completes it; both keys apart; never mistaken for endpoint flags;
 * malformed values refused. */
START_TEST(t_key_imm)
{
  uint32_t lo[2] = { 0, 0 }, key = 0;
  bool full = true;
  const uint32_t k1 = 0xdeadbeefu, k2 = 0x00010002u;
  for (int i = 0; i < 2; i++) {
    uint32_t v = fs_rdma_key_val(i, false, i ? k2 : k1);
    ck_assert_uint_eq(v >> 30, 0); /* fits a 30-bit value */
    ck_assert(v & FS_RDMA_FLAG_KEY);
    ck_assert_int_eq(fs_rdma_key_take(lo, v, &full, &key), 0);
  }
  ck_assert_int_eq(fs_rdma_key_take(lo, fs_rdma_key_val(false, true, k1), &full, &key), 1);
  ck_assert(!full);
  ck_assert_uint_eq(key, k1);
  ck_assert_int_eq(fs_rdma_key_take(lo, fs_rdma_key_val(true, true, k2), &full, &key), 1);
  ck_assert(full);
  ck_assert_uint_eq(key, k2);
  /* a high half with no low one before it (each completes once) */
  ck_assert_int_eq(fs_rdma_key_take(lo, fs_rdma_key_val(true, true, k2), &full, &key), -1);
  /* unknown bits, or no key bit (endpoint flags) */
  ck_assert_int_eq(fs_rdma_key_take(lo, fs_rdma_key_val(false, false, 1) | 1u << 20, &full, &key), -1);
  ck_assert_int_eq(fs_rdma_key_take(lo, FS_RDMA_FLAG_CLOSED, &full, &key), -1);
  /* sent again: replaces */
  ck_assert_int_eq(fs_rdma_key_take(lo, fs_rdma_key_val(false, false, 7), &full, &key), 0);
  ck_assert_int_eq(fs_rdma_key_take(lo, fs_rdma_key_val(false, true, 7), &full, &key), 1);
  ck_assert_uint_eq(key, 7);
}
END_TEST

/* A window that asked to grow and stays shut FS_RDMA_ASK_MS (the peer's
 * process not looking) makes the channel cramped, so that a sender goes back
 * to TCP where it would wait; one that opened in time does not, and either
 * way the check stops. */
START_TEST(t_ask_wait)
{
  static struct fs_rdma r; /* the fields the check reads, no device */
  r.ch.tx.win_lim = 4096 - FS_RDMA_WIN_SLACK;
  r.foreign = true; /* keeps fs_rdma_widen off: nothing to register */
  fs_rdma_ask(&r);
  ck_assert_uint_gt(r.ask_ns, 1);
  fs_rdma_ask_check(&r);
  ck_assert_uint_eq(r.ch.cramped, 0);
  r.ask_ns = fs_clock_ns() - (uint64_t)FS_RDMA_ASK_MS * 1000000u - 1;
  fs_rdma_ask_check(&r);
  ck_assert_uint_eq(r.ch.cramped, 1);
  ck_assert_uint_eq(r.ask_ns, 1);
  /* opened in time: no cramp */
  r.ch.cramped = 0;
  r.ask_ns = fs_clock_ns() - (uint64_t)FS_RDMA_ASK_MS * 1000000u - 1;
  r.ch.tx.win_lim = 0;
  fs_rdma_ask_check(&r);
  ck_assert_uint_eq(r.ch.cramped, 0);
  ck_assert_uint_eq(r.ask_ns, 1);
}
END_TEST

START_TEST(t_auth)
{
  struct sockaddr_in cli = v4("10.0.2.15", 40000), srv = v4("10.0.2.15", 5201), other = v4("10.0.2.16", 40000);
  struct sockaddr *c = (struct sockaddr *)&cli, *s = (struct sockaddr *)&srv;
  struct fs_rdmacm_wire w = { .m = good() }, acc;
  ck_assert_int_eq(sizeof w, 48); /* fits RoCE's 56 bytes */
  fs_rdmacm_seal(&w, key1, c, s, NULL, T0);
  struct fs_rdmacm_msg out;
  bool mac = false;
  ck_assert_int_eq(fs_rdmacm_check_req(&w, sizeof w, &out, &mac), 0);
  ck_assert(mac);
  ck_assert_uint_eq(out.flags, FS_RDMACM_F_MAC);
  ck_assert_int_eq(fs_rdmacm_check_req(&w, sizeof w - 1, &out, &mac), FS_REASON_PROTOCOL);

  /* the right key, connection and time */
  ck_assert_int_eq(fs_rdmacm_verify(&w, sizeof w, key1, c, s, NULL, T0 + 29999, NULL), 0);
  ck_assert_int_eq(fs_rdmacm_verify(&w, sizeof w, key1, c, s, NULL, T0 - 30000, NULL), 0);
  /* an IPv4 address seen through a dual-stack socket is the same address */
  struct sockaddr_in6 c6 = { .sin6_family = AF_INET6, .sin6_port = htons(40000) };
  inet_pton(AF_INET6, "::ffff:10.0.2.15", &c6.sin6_addr);
  ck_assert_int_eq(fs_rdmacm_verify(&w, sizeof w, key1, (struct sockaddr *)&c6, s, NULL, T0, NULL), 0);
  /* anything else is refused */
  ck_assert_int_eq(fs_rdmacm_verify(&w, sizeof w, key2, c, s, NULL, T0, NULL), FS_REASON_AUTH);
  ck_assert_int_eq(fs_rdmacm_verify(&w, sizeof w, key1, (struct sockaddr *)&other, s, NULL, T0, NULL), FS_REASON_AUTH);
  ck_assert_int_eq(fs_rdmacm_verify(&w, sizeof w, key1, s, c, NULL, T0, NULL), FS_REASON_AUTH); /* ends swapped */
  ck_assert_int_eq(fs_rdmacm_verify(&w, sizeof w, key1, c, s, NULL, T0 + 30001, NULL), FS_REASON_AUTH);
  ck_assert_int_eq(fs_rdmacm_verify(&w, sizeof w, key1, c, s, NULL, T0 - 30001, NULL), FS_REASON_AUTH);
  ck_assert_int_eq(fs_rdmacm_verify(&w, sizeof w - 1, key1, c, s, NULL, T0, NULL), FS_REASON_AUTH);
  ck_assert_int_eq(fs_rdmacm_verify(&w, 0, key1, c, s, NULL, T0, NULL), FS_REASON_AUTH);
  ck_assert_int_eq(fs_rdmacm_verify(NULL, 48, key1, c, s, NULL, T0, NULL), FS_REASON_AUTH);
  /* every bit of the message counts */
  for (size_t i = 0; i < sizeof w; i++)
    for (int b = 0; b < 8; b++) {
      struct fs_rdmacm_wire x = w;
      ((uint8_t *)&x)[i] ^= (uint8_t)(1u << b);
      ck_assert_msg(fs_rdmacm_verify(&x, sizeof x, key1, c, s, NULL, T0, NULL) == FS_REASON_AUTH, "byte %zu bit %d", i, b);
    }
  /* without the flag there is no MAC to check */
  struct fs_rdmacm_wire plain = { .m = good() };
  ck_assert_int_eq(fs_rdmacm_verify(&plain, sizeof plain, key1, c, s, NULL, T0, NULL), FS_REASON_AUTH);

  /* the accept is bound to the request it answers */
  acc = (struct fs_rdmacm_wire){ .m = good() };
  acc.m.magic = htonl(FS_RDMACM_MAGIC_ACC);
  fs_rdmacm_seal(&acc, key1, c, s, w.a.mac, T0 + 5);
  ck_assert_int_eq(fs_rdmacm_verify(&acc, sizeof acc, key1, c, s, w.a.mac, 0, NULL), 0); /* no clock check */
  uint8_t wrong[FS_RDMACM_MAC_LEN];
  memcpy(wrong, w.a.mac, sizeof wrong);
  wrong[0] ^= 1;
  ck_assert_int_eq(fs_rdmacm_verify(&acc, sizeof acc, key1, c, s, wrong, 0, NULL), FS_REASON_AUTH);
  ck_assert_int_eq(fs_rdmacm_verify(&acc, sizeof acc, key1, c, s, NULL, T0, NULL), FS_REASON_AUTH);
  ck_assert_int_eq(fs_rdmacm_verify(&w, sizeof w, key1, c, s, w.a.mac, 0, NULL), FS_REASON_AUTH);
}
END_TEST

/* A resume request (fabric/rdma/heal.c) is checked as a connect request and
 * told apart by its magic; sealed, its MAC covers the magic, so a sealed
 * upgrade request cannot be replayed as a resume or the other way round. */
START_TEST(t_resume_req)
{
  struct fs_rdmacm_msg m = good(), out;
  bool mac = true;
  m.magic = htonl(FS_RDMACM_MAGIC_RES);
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out, &mac), 0);
  ck_assert_uint_eq(out.magic, FS_RDMACM_MAGIC_RES);
  ck_assert_uint_eq(out.rkey, 0x1234);
  ck_assert(!mac);
  m.rkey = 0; /* no region: hostile */
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out, &mac), FS_REASON_PROTOCOL);
  m = good(), m.magic = htonl(FS_RDMACM_MAGIC_RES), m.version = 1; /* the version before */
  ck_assert_int_eq(fs_rdmacm_check_req(&m, sizeof m, &out, &mac), FS_REASON_VERSION);

  struct sockaddr_in cli = v4("10.0.2.15", 40000), srv = v4("10.0.2.16", 5201);
  struct sockaddr *c = (struct sockaddr *)&cli, *s = (struct sockaddr *)&srv;
  struct fs_rdmacm_wire w = { .m = good() };
  w.m.magic = htonl(FS_RDMACM_MAGIC_RES);
  fs_rdmacm_seal(&w, key1, c, s, NULL, T0);
  ck_assert_int_eq(fs_rdmacm_verify(&w, sizeof w, key1, c, s, NULL, T0, NULL), 0);
  struct fs_rdmacm_wire x = w;
  x.m.magic = htonl(FS_RDMACM_MAGIC_REQ);
  ck_assert_int_eq(fs_rdmacm_verify(&x, sizeof x, key1, c, s, NULL, T0, NULL), FS_REASON_AUTH);
}
END_TEST

START_TEST(t_auth_replay)
{
  static struct fs_rdmacm_seen seen;
  struct sockaddr_in cli = v4("10.0.2.15", 40000), srv = v4("10.0.2.15", 5201);
  struct sockaddr *c = (struct sockaddr *)&cli, *s = (struct sockaddr *)&srv;
  struct fs_rdmacm_wire w = { .m = good() };
  fs_rdmacm_seal(&w, key1, c, s, NULL, T0);
  ck_assert_int_eq(fs_rdmacm_verify(&w, sizeof w, key1, c, s, NULL, T0, &seen), 0);
  ck_assert_int_eq(fs_rdmacm_verify(&w, sizeof w, key1, c, s, NULL, T0 + 1, &seen), FS_REASON_AUTH);
  /* the same connection a moment later is a new request */
  struct fs_rdmacm_wire w2 = { .m = good() };
  fs_rdmacm_seal(&w2, key1, c, s, NULL, T0 + 1);
  ck_assert_int_eq(fs_rdmacm_verify(&w2, sizeof w2, key1, c, s, NULL, T0 + 1, &seen), 0);
  /* a refused request is not remembered */
  struct fs_rdmacm_wire w3 = { .m = good() };
  fs_rdmacm_seal(&w3, key2, c, s, NULL, T0 + 2);
  ck_assert_int_eq(fs_rdmacm_verify(&w3, sizeof w3, key1, c, s, NULL, T0 + 2, &seen), FS_REASON_AUTH);
  ck_assert_int_eq(fs_rdmacm_verify(&w3, sizeof w3, key2, c, s, NULL, T0 + 2, &seen), 0);
  /* a full cache makes room by forgetting the oldest */
  for (unsigned i = 0; i < FS_RDMACM_SEEN; i++) {
    struct fs_rdmacm_wire x = { .m = good() };
    fs_rdmacm_seal(&x, key1, c, s, NULL, T0 + 10 + i);
    ck_assert_int_eq(fs_rdmacm_verify(&x, sizeof x, key1, c, s, NULL, T0 + 10 + i, &seen), 0);
  }
  ck_assert_int_eq(fs_rdmacm_verify(&w, sizeof w, key1, c, s, NULL, T0 + 1000, &seen), 0);
  struct fs_rdmacm_wire last = { .m = good() };
  fs_rdmacm_seal(&last, key1, c, s, NULL, T0 + 9 + FS_RDMACM_SEEN);
  ck_assert_int_eq(fs_rdmacm_verify(&last, sizeof last, key1, c, s, NULL, T0 + 1000, &seen), FS_REASON_AUTH);
}
END_TEST

/* Is an object whose name contains `part` mapped? */
static int mapped_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
  (void)size;
  return info->dlpi_name && strstr(info->dlpi_name, (const char *)arg) != NULL;
}

/* The device check that comes before loading rdma-core: what sysfs lists. */
START_TEST(t_devices_in)
{
  char dir[] = "/tmp/check_rdma.XXXXXX", p[64];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  ck_assert_int_eq(fs_verbs_devices_in(dir), 0);
  snprintf(p, sizeof p, "%s/abi_version", dir); /* always there, not a device */
  close(open(p, O_CREAT | O_WRONLY, 0644));
  ck_assert_int_eq(fs_verbs_devices_in(dir), 0);
  snprintf(p, sizeof p, "%s/uverbs0", dir);
  ck_assert_int_eq(mkdir(p, 0755), 0);
  ck_assert_int_eq(fs_verbs_devices_in(dir), 1);
  rmdir(p);
  snprintf(p, sizeof p, "%s/abi_version", dir);
  unlink(p);
  rmdir(dir);
  ck_assert_int_eq(fs_verbs_devices_in(dir), 0); /* no such directory: no device */
  ck_assert_int_eq(fs_verbs_devices_in("/nonexistent/infiniband_verbs"), 0);
}
END_TEST

/* With no device listed, asking whether rdma is available loads nothing:
 * libibverbs, librdmacm, libnl and the providers would cost every fork
 * and every child's exit of a server. */
START_TEST(t_no_device_loads_nothing)
{
  if (fs_verbs_devices_in("/sys/class/infiniband_verbs") != 0) {
    fprintf(stderr, "# SKIP t_no_device_loads_nothing: this host lists an rdma device\n");
    return;
  }
  ck_assert(!fs_rdmacm_available());
  ck_assert_msg(!dl_iterate_phdr(mapped_cb, (void *)"libibverbs"), "libibverbs was loaded");
  ck_assert_msg(!dl_iterate_phdr(mapped_cb, (void *)"librdmacm"), "librdmacm was loaded");
}
END_TEST

int main(void)
{
  Suite *s = suite_create("rdma");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, t_req_good);
  tcase_add_test(tc, t_req_hostile);
  tcase_add_test(tc, t_unwrap);
  tcase_add_test(tc, t_key_imm);
  tcase_add_test(tc, t_ask_wait);
  tcase_add_test(tc, t_auth);
  tcase_add_test(tc, t_auth_replay);
  tcase_add_test(tc, t_resume_req);
  tcase_add_test(tc, t_devices_in);
  tcase_add_test(tc, t_no_device_loads_nothing);
  suite_add_tcase(s, tc);
  return run_suite(s, false);
}
