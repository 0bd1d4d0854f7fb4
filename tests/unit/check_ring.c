/* Unit tests for fabric/ring: record framing, wrap-around, partial reads,
 * peek, control records, the producer's window (SKIP records), a
 * hostile producer, the producer's wake for room (want_space), and its
 * return to the start of an empty ring (rest). */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fabric/ring.h"
#include "tests/unit/check_run.h"

#define RSZ 4096

static struct fs_ring_ctl ctl;
static uint8_t data[RSZ];
static struct fs_ring r;

static void setup(void)
{
  memset(&ctl, 0, sizeof ctl);
  memset(data, 0xee, sizeof data);
  r = (struct fs_ring){ .ctl = &ctl, .data = data, .size = RSZ };
}

static size_t put(const void *p, size_t n)
{
  struct iovec v = { (void *)p, n };
  return fs_ring_put_data(&r, &v, 1, 0, n);
}

static ssize_t get(void *p, size_t n, bool peek)
{
  struct iovec v = { p, n };
  return fs_ring_get_data(&r, &v, 1, 0, n, peek);
}

START_TEST(t_roundtrip)
{
  ck_assert(fs_ring_empty(&r));
  ck_assert_uint_eq(put("hello", 5), 5);
  ck_assert(!fs_ring_empty(&r));
  ck_assert_uint_eq(fs_ring_readable(&r), 5);
  char b[16] = { 0 };
  ck_assert_int_eq(get(b, sizeof b, false), 5);
  ck_assert_str_eq(b, "hello");
  ck_assert(fs_ring_empty(&r));
}
END_TEST

START_TEST(t_partial_and_peek)
{
  put("abcdefgh", 8);
  put("ij", 2);
  char b[4] = { 0 };
  ck_assert_int_eq(get(b, 3, true), 3);
  ck_assert_int_eq(memcmp(b, "abc", 3), 0);
  ck_assert_int_eq(get(b, 3, false), 3);
  ck_assert_int_eq(memcmp(b, "abc", 3), 0);
  ck_assert_uint_eq(fs_ring_readable(&r), 7);
  char rest[16] = { 0 };
  ck_assert_int_eq(get(rest, sizeof rest, true), 7);
  ck_assert_int_eq(memcmp(rest, "defghij", 7), 0);
  ck_assert_int_eq(get(rest, sizeof rest, false), 7);
  ck_assert(fs_ring_empty(&r));
}
END_TEST

/* Random-sized records (1..max bytes) put and got `iters` times: every
 * byte arrives once, in order, across the wrap point.  each(): a check
 * after every put.  Returns the bytes sent, *rcvd those got. */
static uint64_t stream(int iters, size_t max, void (*each)(void), uint64_t *rcvd)
{
  uint8_t out[700], in[700];
  uint64_t sent = 0;
  *rcvd = 0;
  ck_assert_uint_le(max, sizeof out);
  for (int iter = 0; iter < iters; iter++) {
    size_t n = 1 + (size_t)rand() % max;
    for (size_t i = 0; i < n; i++)
      out[i] = (uint8_t)(sent + i);
    sent += put(out, n); /* maybe part of out: the pattern follows what was sent */
    if (each)
      each();
    ssize_t g = get(in, 1 + (size_t)rand() % max, false);
    ck_assert_int_ge(g, 0);
    int bad = 0;
    for (ssize_t i = 0; i < g; i++)
      bad |= in[i] != (uint8_t)(*rcvd + (uint64_t)i);
    ck_assert_int_eq(bad, 0);
    *rcvd += (uint64_t)g;
  }
  return sent;
}

START_TEST(t_wrap_stream)
{
  /* Many times over a small ring */
  srand(42);
  uint64_t rcvd;
  (void)stream(20000, 700, NULL, &rcvd);
  ck_assert_uint_ge(rcvd, 1000000);
}
END_TEST

START_TEST(t_iov_gather_scatter)
{
  struct iovec in[3] = { { "ab", 2 }, { "", 0 }, { "cdef", 4 } };
  ck_assert_uint_eq(fs_ring_put_data(&r, in, 3, 1, 5), 5); /* skip 'a' */
  char x[2], y[3];
  struct iovec out[2] = { { x, 2 }, { y, 3 } };
  ck_assert_int_eq(fs_ring_get_data(&r, out, 2, 0, 5, false), 5);
  ck_assert_int_eq(memcmp(x, "bc", 2), 0);
  ck_assert_int_eq(memcmp(y, "def", 3), 0);
}
END_TEST

START_TEST(t_control_records)
{
  ck_assert(!fs_ring_data_queued(&r));
  ck_assert_int_eq(fs_ring_put_ctl(&r, FS_REC_SWITCH, 12345), 0);
  ck_assert(!fs_ring_data_queued(&r)); /* a SWITCH alone is no unread data */
  put("x", 1);
  ck_assert(fs_ring_data_queued(&r)); /* past the SWITCH at the head */
  ck_assert_int_eq(fs_ring_put_ctl(&r, FS_REC_EOF, 0), 0);
  uint32_t t, l;
  uint64_t v;
  ck_assert_int_eq(fs_ring_peek(&r, &t, &l, &v), 1);
  ck_assert_uint_eq(t, FS_REC_SWITCH);
  ck_assert_uint_eq(v, 12345);
  char b[4];
  ck_assert_int_eq(get(b, 4, false), 0); /* data stops at a control record */
  fs_ring_pop(&r);
  ck_assert_uint_eq(fs_ring_readable(&r), 1);
  ck_assert_int_eq(get(b, 4, false), 1);
  ck_assert(!fs_ring_data_queued(&r)); /* only the EOF is left */
  ck_assert_int_eq(fs_ring_peek(&r, &t, &l, &v), 1);
  ck_assert_uint_eq(t, FS_REC_EOF);
}
END_TEST

START_TEST(t_full_keeps_reserve)
{
  static uint8_t big[RSZ];
  size_t w = put(big, sizeof big);
  ck_assert_uint_lt(w, RSZ);
  ck_assert_uint_eq(fs_ring_space(&r), 0);
  ck_assert_uint_eq(put(big, 1), 0);
  /* EOF still fits: close never blocks on a full ring. */
  ck_assert_int_eq(fs_ring_put_ctl(&r, FS_REC_EOF, 0), 0);
}
END_TEST

/* The producer reads the consumer's head only when the head it saw last
 * leaves too little room: what it reports is exact up to what was asked. */
START_TEST(t_space_cached_head)
{
  static uint8_t big[RSZ], out[RSZ];
  size_t w = put(big, sizeof big);
  ck_assert_uint_eq(fs_ring_space(&r), 0);
  ck_assert_int_eq(get(out, w, false), (ssize_t)w);
  /* The consumer emptied it: every request sees that, whatever its size. */
  ck_assert_uint_eq(fs_ring_space(&r), w);
  ck_assert_uint_eq(fs_ring_space_for(&r, w), w);
  /* A small record leaves the cached head behind; asking for more than the
   * cache shows reads the head again. */
  ck_assert_uint_eq(put("x", 1), 1);
  ck_assert_int_eq(get(out, 1, false), 1);
  ck_assert_uint_ge(fs_ring_space(&r), 1);
  ck_assert_uint_eq(fs_ring_space_for(&r, w), w);
  ck_assert_uint_eq(put(big, sizeof big), w);
  /* A head that went back (a hostile or reset control block) is re-read. */
  ctl.head = ctl.tail = 0;
  ck_assert_uint_eq(fs_ring_space_for(&r, w), w);
}
END_TEST

START_TEST(t_hostile_producer)
{
  uint32_t t, l;
  uint64_t v;
  char b[64];
  /* tail beyond the ring size */
  ctl.tail = RSZ + 8;
  ck_assert_int_eq(fs_ring_peek(&r, &t, &l, &v), -EPROTO);
  ck_assert_int_eq(get(b, sizeof b, false), -EPROTO);
  /* a record longer than what is published */
  setup();
  uint32_t hdr[2] = { FS_REC_DATA, 1000 };
  memcpy(data, hdr, 8);
  ctl.tail = 16;
  ck_assert_int_eq(fs_ring_peek(&r, &t, &l, &v), -EPROTO);
  /* unknown type, zero-length data, bad control lengths */
  uint32_t bad[][2] = { { 99, 0 }, { FS_REC_DATA, 0 }, { FS_REC_SWITCH, 4 }, { FS_REC_EOF, 8 } };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setup();
    memcpy(data, bad[i], 8);
    ctl.tail = 16;
    ck_assert_int_eq(fs_ring_peek(&r, &t, &l, &v), -EPROTO);
  }
  /* random garbage never crashes nor reads out of bounds */
  srand(7);
  for (int i = 0; i < 100000; i++) {
    setup();
    for (size_t j = 0; j < 64; j++)
      data[j] = (uint8_t)rand();
    ctl.tail = (uint64_t)(rand() % (2 * RSZ));
    ctl.head = (uint64_t)(rand() % 64) & ~7ull;
    (void)fs_ring_peek(&r, &t, &l, &v);
    (void)get(b, sizeof b, (i & 1) != 0);
    (void)fs_ring_readable(&r);
  }
}
END_TEST

/* A producer with a window keeps DATA in the ring's first `win` bytes
 * (a SKIP jumps to the next lap) until FS_RING_WIN_GROW times the window
 * went through, then doubles it, up to the whole ring.  Every byte arrives
 * once, in order; the bytes past the window are not written meanwhile. */
START_TEST(t_window_stream)
{
  r.win = 1024;
  ck_assert_uint_eq(fs_ring_limit(&r), 1024);
  srand(43);
  uint8_t out[700], in[700];
  uint64_t sent = 0, rcvd = 0;
  bool grew = false, whole = false;
  for (int iter = 0; iter < 20000; iter++) {
    size_t n = 1 + (size_t)rand() % sizeof out;
    for (size_t i = 0; i < n; i++)
      out[i] = (uint8_t)(sent + i);
    sent += put(out, n);
    if (r.win == 1024) {
      /* Untouched past the window (a SKIP's header lands below it + 8). */
      int dirty = 0;
      for (size_t i = 1024 + 8; i < RSZ; i++)
        dirty |= data[i] != 0xee;
      ck_assert_int_eq(dirty, 0);
    }
    grew |= r.win == 2048;
    whole |= grew && r.win == 0;
    ssize_t g = get(in, 1 + (size_t)rand() % sizeof in, (iter % 7) == 0);
    ck_assert_int_ge(g, 0);
    if ((iter % 7) == 0) { /* a peek: the same bytes again, consumed now */
      ssize_t g2 = get(in, (size_t)g, false);
      ck_assert_int_eq(g2, g);
    }
    int bad = 0;
    for (ssize_t i = 0; i < g; i++)
      bad |= in[i] != (uint8_t)(rcvd + (uint64_t)i);
    ck_assert_int_eq(bad, 0);
    rcvd += (uint64_t)g;
  }
  ck_assert(grew && whole);
  ck_assert_uint_eq(fs_ring_limit(&r), RSZ);
  ck_assert_uint_ge(rcvd, 1000000);
}
END_TEST

/* The fabric's window limit (rdma: only the rings' first page registered):
 * the window never widens past it, however much goes through, and every
 * record, control records and SKIPs included, stays below it + 40 bytes;
 * the producer asks instead (win_ask).  Once the limit lifts, the window
 * opens to the whole ring at the producer's next record. */
static const uint32_t lim_page = RSZ / 4, lim = RSZ / 4 - 256; /* the page registered, as rdma's */

static void within_limit(void)
{
  ck_assert_uint_eq(r.win, lim);
  ck_assert_uint_le(ctl.tail & (RSZ - 1), lim);
}

START_TEST(t_window_limit)
{
  const uint32_t page = lim_page;
  r.win = r.win_lim = lim;
  srand(44);
  uint64_t rcvd;
  uint64_t sent = stream(4000, 300, within_limit, &rcvd);
  uint8_t out[8] = { 0 };
  ck_assert_uint_gt(sent, (uint64_t)FS_RING_WIN_GROW * lim);
  ck_assert_uint_eq(r.win_ask, 1);
  ck_assert_int_eq(fs_ring_put_ctl(&r, FS_REC_REVERT, sent), 0);
  ck_assert_int_eq(fs_ring_put_ctl(&r, FS_REC_EOF, 0), 0);
  ck_assert_uint_le(ctl.tail & (RSZ - 1), lim + 40);
  int dirty = 0; /* nothing written at or past the page */
  for (size_t i = page; i < RSZ; i++)
    dirty |= data[i] != 0xee;
  ck_assert_int_eq(dirty, 0);
  /* a write the window cuts short asks at once */
  setup();
  r.win = r.win_lim = lim;
  static uint8_t big[2 * RSZ / 4];
  ck_assert_uint_lt(put(big, sizeof big), sizeof big);
  ck_assert_uint_eq(r.win_ask, 1);
  ck_assert_uint_eq(r.win, lim);
  /* lifted: the next record opens the window to the whole ring */
  setup();
  r.win = r.win_lim = lim;
  r.win_moved = (uint64_t)FS_RING_WIN_GROW * lim;
  ck_assert_uint_eq(put(out, 8), 8);
  ck_assert_uint_eq(r.win_ask, 1);
  ck_assert_uint_eq(r.win, lim);
  __atomic_store_n(&r.win_lim, 0, __ATOMIC_RELEASE);
  ck_assert_uint_eq(put(out, 8), 8);
  ck_assert_uint_eq(r.win, 0);
  ck_assert_uint_eq(fs_ring_limit(&r), RSZ);
}
END_TEST

/* A SKIP is invisible to the consumer: peek, pop, readable, data_ahead,
 * eof_queued and get step over it; the producer writes one only with the
 * record behind it, and only where that leaves more room, so a drained ring
 * with its tail near the window's end is still writable (a writer that
 * waits for a third of the ring free must not wait for ever). */
START_TEST(t_skip_transparent)
{
  r.win = 1024;
  static uint8_t big[1024], out[1024];
  size_t w = put(big, 1000 - FS_RING_HDR); /* tail at 1000: 24 bytes to the window's end */
  ck_assert_uint_eq(w, 1000 - FS_RING_HDR);
  ck_assert_int_eq(get(out, sizeof out, false), (ssize_t)w);
  ck_assert(fs_ring_empty(&r));
  size_t third = fs_ring_limit(&r) / 3;
  ck_assert_uint_ge(fs_ring_space_for(&r, third), third); /* behind a SKIP */
  ck_assert_uint_eq(ctl.tail, 1000);                      /* asking wrote nothing */
  ck_assert_uint_eq(put("abc", 3), 3);                    /* fits before the window's end */
  ck_assert_uint_eq(ctl.tail, 1016);
  ck_assert_uint_eq(put("defghijk", 8), 8); /* no room for it there: a SKIP, then it */
  ck_assert_uint_eq(ctl.tail, RSZ + 16);
  uint32_t hdr[2];
  memcpy(hdr, data + 1016, 8);
  ck_assert_uint_eq(hdr[0], FS_REC_SKIP);
  ck_assert_int_eq(fs_ring_put_ctl(&r, FS_REC_EOF, 0), 0);
  ck_assert_uint_eq(fs_ring_readable(&r), 11);
  ck_assert(fs_ring_data_ahead(&r, 11));
  ck_assert(fs_ring_eof_queued(&r));
  char b[16] = { 0 };
  ck_assert_int_eq(get(b, 5, false), 5); /* across the SKIP */
  ck_assert_int_eq(memcmp(b, "abcde", 5), 0);
  ck_assert_uint_eq(ctl.head, RSZ); /* stepped over it, mid-record */
  ck_assert_int_eq(get(b, sizeof b, false), 6);
  ck_assert_int_eq(memcmp(b, "fghijk", 6), 0);
  uint32_t t, l;
  uint64_t v;
  ck_assert_int_eq(fs_ring_peek(&r, &t, &l, &v), 1);
  ck_assert_uint_eq(t, FS_REC_EOF);
  /* A SKIP right before a control record: peek and pop step over it. */
  setup();
  uint32_t skip[2] = { FS_REC_SKIP, 0 }, sw[2] = { FS_REC_SWITCH, 8 };
  uint64_t n = 777;
  memcpy(data + 2048, skip, 8);
  memcpy(data, sw, 8);
  memcpy(data + 8, &n, 8);
  ctl.head = 2048;
  ctl.tail = RSZ + 16;
  ck_assert_int_eq(fs_ring_peek(&r, &t, &l, &v), 1);
  ck_assert_uint_eq(t, FS_REC_SWITCH);
  ck_assert_uint_eq(v, 777);
  ck_assert_int_eq(get(b, sizeof b, false), 0);
  ck_assert_uint_eq(ctl.head, 2048); /* data stops at the SWITCH, the SKIP stays */
  fs_ring_pop(&r);
  ck_assert(fs_ring_empty(&r));
}
END_TEST

/* SKIP records a producer must never write: at offset 0 (a whole lap),
 * with a length, crossing the tail, or with nothing behind it. */
START_TEST(t_hostile_skip)
{
  uint32_t t, l;
  uint64_t v;
  char b[16];
  struct { uint64_t head, tail; uint32_t hdr[2]; } bad[] = {
    { 0, 16, { FS_REC_SKIP, 0 } },             /* offset 0 */
    { 2048, RSZ + 16, { FS_REC_SKIP, 8 } },    /* a length */
    { 2048, 3000, { FS_REC_SKIP, 0 } },        /* beyond what is published */
    { 2048, RSZ, { FS_REC_SKIP, 0 } },         /* nothing behind it */
    { 2048, RSZ + 16, { FS_REC_SKIP | 8 << 8, 0 } }, /* "consumed" bits */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setup();
    uint32_t d[2] = { FS_REC_DATA, 8 };
    memcpy(data, d, 8); /* a good record at the next lap's start */
    memcpy(data + (bad[i].head & (RSZ - 1)), bad[i].hdr, 8);
    ctl.head = bad[i].head;
    ctl.tail = bad[i].tail;
    ck_assert_int_eq(fs_ring_peek(&r, &t, &l, &v), -EPROTO);
    ck_assert_int_eq(get(b, sizeof b, false), -EPROTO);
    ck_assert_uint_eq(fs_ring_readable(&r), 0);
    ck_assert(fs_ring_data_ahead(&r, 8)); /* corrupt: the reader finds out */
    ck_assert(!fs_ring_eof_queued(&r));
    ck_assert_uint_eq(ctl.head, bad[i].head);
  }
}
END_TEST

/* Pages of [p, p + len) in memory (mincore). */
static int resident(const void *p, size_t len)
{
  size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = (len + pg - 1) / pg;
  unsigned char v[64];
  ck_assert_uint_le(n, sizeof v);
  ck_assert_int_eq(mincore((void *)p, len, v), 0);
  int k = 0;
  for (size_t i = 0; i < n; i++)
    k += v[i] & 1;
  return k;
}

/* Send `n` bytes of a counting pattern from producer pr and read `m` at
 * consumer co, interleaved in records of up to 3000 bytes, checking every
 * byte read. */
static void trim_stream(struct fs_ring *pr, struct fs_ring *co, uint32_t *wseq, uint32_t *rseq, size_t n, size_t m)
{
  uint8_t b[3000];
  size_t sent = 0, got = 0;
  while (got < m || sent < n) {
    if (sent < n) {
      size_t k = n - sent < sizeof b ? n - sent : sizeof b;
      for (size_t i = 0; i < k; i++)
        b[i] = (uint8_t)(*wseq + i);
      struct iovec v = { b, k };
      size_t put_n = fs_ring_put_data(pr, &v, 1, 0, k);
      *wseq += (uint32_t)put_n;
      sent += put_n;
    }
    size_t want = m - got < sizeof b ? m - got : sizeof b;
    if (want == 0)
      continue;
    struct iovec v = { b, want };
    ssize_t g = fs_ring_get_data(co, &v, 1, 0, want, false);
    ck_assert_int_ge(g, 0);
    for (ssize_t i = 0; i < g; i++)
      ck_assert_uint_eq(b[i], (uint8_t)(*rseq + (uint32_t)i));
    *rseq += (uint32_t)g;
    got += (size_t)g;
  }
}

/* A producer asleep for room (fs_ring_want_space) is woken by the
 * consumer's read that makes room for what it asked, not before and not
 * after (fs_ring_room_reached), whatever the ring's state: its window
 * (behind a SKIP or not), its cap, the wrap.  Asked for more than the
 * ring can give (near a window's end, or more than it holds), when the
 * ring is empty.  A peer that sets
 * want_space 1 (older builds) is woken at the first read. */
START_TEST(t_want_space)
{
  srand(45);
  uint8_t buf[700];
  int exact = 0, skipped = 0;
  for (int trial = 0; trial < 3000; trial++) {
    setup();
    int kind = trial % 3;
    if (kind == 1)
      r.win = 1024;
    if (kind == 2)
      r.cap = 1500;
    for (int i = rand() % 40; i > 0; i--) { /* a random state */
      (void)put(buf, 1 + (size_t)rand() % 600);
      (void)get(buf, 1 + (size_t)rand() % 600, false);
    }
    size_t want = 1 + (size_t)rand() % (fs_ring_limit(&r) / 2);
    while (put(buf, 1 + (size_t)rand() % 600) > 0)
      ;
    if (fs_ring_space_for(&r, want) >= want)
      continue;
    uint64_t tail = ctl.tail;
    fs_ring_want_space(&r, want);
    ck_assert_uint_ne(ctl.want_space, 0);
    bool woken = false;
    skipped += r.win && (ctl.tail & (RSZ - 1)) + FS_RING_HDR + want > r.win;
    for (int i = 0; i < 100 && !woken; i++) {
      ck_assert_int_ge(get(buf, 1 + (size_t)rand() % 200, false), 0);
      woken = fs_ring_room_reached(&r);
      /* (empty: no more room comes, however little there is) */
      bool room = fs_ring_space_for(&r, want) >= want || fs_ring_empty(&r);
      ck_assert_msg(woken == room, "trial %d: woken %d, room %d (want %zu, head %llu, tail %llu)", trial, woken, room,
                    want, (unsigned long long)ctl.head, (unsigned long long)ctl.tail);
    }
    ck_assert(woken);
    ck_assert_uint_eq(ctl.want_space, 0);
    ck_assert_uint_le(ctl.head, tail);
    exact++;
  }
  ck_assert_int_gt(exact, 1000);
  ck_assert_int_gt(skipped, 50);
  /* More than the ring holds: when it is empty. */
  setup();
  while (put(buf, 500) > 0)
    ;
  fs_ring_want_space(&r, 2 * RSZ);
  while (!fs_ring_empty(&r)) {
    ck_assert(!fs_ring_room_reached(&r));
    (void)get(buf, 300, false);
  }
  ck_assert(fs_ring_room_reached(&r));
  /* An older producer's 1: the first read. */
  setup();
  while (put(buf, 500) > 0)
    ;
  __atomic_store_n(&ctl.want_space, FS_RING_WANT_ANY, __ATOMIC_RELAXED);
  (void)get(buf, 1, false);
  ck_assert(fs_ring_room_reached(&r));
  ck_assert(!fs_ring_room_reached(&r)); /* once */
}
END_TEST

/* A memfd of a page of control words and sz bytes of ring, mapped twice
 * (the producer's view in *pa, the consumer's in *pb): its fd. */
static int shared_pair(size_t sz, uint8_t **pa, uint8_t **pb)
{
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  int fd = memfd_create("check-ring", 0);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, (off_t)(pg + sz)), 0);
  *pa = mmap(NULL, pg + sz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  *pb = mmap(NULL, pg + sz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ck_assert(*pa != MAP_FAILED && *pb != MAP_FAILED);
  return fd;
}

/* fs_ring_trim on a shared memfd ring seen through two mappings, as the two
 * processes of a shm channel see it: the producer gives back the pages of
 * the free space only (the unread bytes stay intact for the consumer), the
 * pages come back at the next writes, and the stream goes on byte-exact
 * across the wrap. */
START_TEST(t_trim_shared)
{
  size_t pg = (size_t)sysconf(_SC_PAGESIZE), sz = 16 * pg;
  uint8_t *pa, *pb;
  int fd = shared_pair(sz, &pa, &pb);
  struct fs_ring pr = { .ctl = (struct fs_ring_ctl *)pa, .data = pa + pg, .size = (uint32_t)sz };
  struct fs_ring co = { .ctl = (struct fs_ring_ctl *)pb, .data = pb + pg, .size = (uint32_t)sz };
  uint32_t wseq = 0, rseq = 0;
  /* About 10 pages streamed, the last ~2.5 not read yet (no wrap so far). */
  trim_stream(&pr, &co, &wseq, &rseq, 10 * pg, 10 * pg - 10000);
  uint64_t head = co.ctl->head, tail = pr.ctl->tail;
  ck_assert_uint_lt(tail, sz);
  ck_assert_uint_gt(tail - head, 2 * pg);
  ck_assert_int_eq(resident(pa + pg, sz), (int)(tail / pg + 1));
  bool empty;
  ssize_t freed = fs_ring_trim(&pr, &empty);
  ck_assert_int_gt(freed, 0);
  ck_assert(!empty);
  /* Only the pages from head's to tail's stay (through either mapping). */
  ck_assert_int_eq(resident(pb + pg, sz), (int)(tail / pg - head / pg + 1));
  ck_assert_int_eq((size_t)freed, sz - (tail / pg - head / pg + 1) * pg);
  /* Again, the reader not having moved: nothing new, and no system call. */
  ck_assert_int_eq(fs_ring_trim(&pr, &empty), 0);
  ck_assert(!empty);
  /* A slow reader: what it reads after a trim goes at the next one (it
   * stayed until the next write), all of it once it has read everything. */
  trim_stream(&pr, &co, &wseq, &rseq, 0, (size_t)(wseq - rseq) - 100); /* all but 100 of the unread bytes */
  ck_assert_int_eq(fs_ring_trim(&pr, &empty), (ssize_t)((co.ctl->head + sz) / pg * pg - (tail / pg + 1) * pg));
  ck_assert(!empty);
  ck_assert_int_eq(resident(pb + pg, sz), (int)(tail / pg - co.ctl->head / pg + 1));
  trim_stream(&pr, &co, &wseq, &rseq, 0, 100);
  ck_assert_int_eq(fs_ring_trim(&pr, &empty), (ssize_t)sz);
  ck_assert(empty);
  ck_assert_int_eq(resident(pb + pg, sz), 0);
  /* The stream goes on: 40 more pages, wrapping over trimmed pages
   * twice. */
  trim_stream(&pr, &co, &wseq, &rseq, 40 * pg, 40 * pg);
  ck_assert(fs_ring_empty(&co));
  /* Empty: every page, the one holding tail (not page-aligned here)
   * included. */
  ck_assert_uint_ne(pr.ctl->tail % pg, 0);
  ck_assert_int_eq(fs_ring_trim(&pr, &empty), (ssize_t)sz);
  ck_assert(empty);
  ck_assert_int_eq(resident(pa + pg, sz), 0);
  ck_assert_int_eq(resident(pb + pg, sz), 0);
  ck_assert_int_eq(fs_ring_trim(&pr, &empty), (ssize_t)sz); /* again: nothing left to free, same range */
  /* The next write lands on a zeroed page and reads back exact, wrapping. */
  trim_stream(&pr, &co, &wseq, &rseq, 3 * pg, 3 * pg);
  ck_assert(fs_ring_empty(&co));
  /* Not empty, tail page-aligned: the page at tail is free space too. */
  size_t rem = pg - pr.ctl->tail % pg; /* one record of this total */
  if (rem < 16)
    rem += pg;
  uint8_t b[2 * 4096];
  ck_assert_uint_le(rem - FS_RING_HDR, sizeof b);
  for (size_t i = 0; i < rem - FS_RING_HDR; i++)
    b[i] = (uint8_t)(wseq + i);
  struct iovec v = { b, rem - FS_RING_HDR };
  ck_assert_uint_eq(fs_ring_put_data(&pr, &v, 1, 0, v.iov_len), v.iov_len);
  wseq += (uint32_t)v.iov_len;
  ck_assert_uint_eq(pr.ctl->tail % pg, 0);
  head = co.ctl->head;
  tail = pr.ctl->tail;
  ck_assert_int_eq(fs_ring_trim(&pr, &empty), (ssize_t)((head + sz) / pg * pg - tail));
  ck_assert(!empty);
  trim_stream(&pr, &co, &wseq, &rseq, 0, v.iov_len);
  ck_assert(fs_ring_empty(&co));
  munmap(pa, pg + sz);
  munmap(pb, pg + sz);
  close(fd);
}
END_TEST

/* Kernel copies (struct fs_ring's kcopy, base/kcopy.h) on a shared memfd
 * ring seen through two mappings: copies of a page or more take at least
 * FS_RING_KC_CHARGE of the end's budget each (the two parts of a record
 * that wraps each count), smaller ones none; the bytes are exact while the
 * budget lasts, after it ran out, and from a file (sendfile's bounce); a
 * trim that gave pages back restores the producer's budget. */
static void kc_put(struct fs_ring *pr, const uint8_t *b, size_t n)
{
  struct iovec v = { (void *)b, n };
  ck_assert_uint_eq(fs_ring_put_data(pr, &v, 1, 0, n), n);
}

static void kc_get(struct fs_ring *co, const uint8_t *want, size_t n)
{
  static uint8_t got[70000];
  ck_assert_uint_le(n, sizeof got);
  struct iovec v = { got, n };
  ck_assert_int_eq(fs_ring_get_data(co, &v, 1, 0, n, false), (ssize_t)n);
  ck_assert_int_eq(memcmp(got, want, n), 0);
}

START_TEST(t_kcopy_budget)
{
  size_t pg = (size_t)sysconf(_SC_PAGESIZE), sz = 64u << 10;
  uint32_t B = 4 * FS_RING_KC_CHARGE, C = FS_RING_KC_CHARGE;
  uint8_t *pa, *pb;
  int fd = shared_pair(sz, &pa, &pb);
  struct fs_ring pr = { .ctl = (struct fs_ring_ctl *)pa, .data = pa + pg, .size = (uint32_t)sz, .kcopy = B, .kcopy0 = B };
  struct fs_ring co = { .ctl = (struct fs_ring_ctl *)pb, .data = pb + pg, .size = (uint32_t)sz, .kcopy = B, .kcopy0 = B };
  static uint8_t b[70000];
  for (size_t i = 0; i < sizeof b; i++)
    b[i] = (uint8_t)(i * 13 + 5);
  kc_put(&pr, b, 100); /* small: memcpy, no charge */
  ck_assert_uint_eq(pr.kcopy, B);
  kc_get(&co, b, 100);
  ck_assert_uint_eq(co.kcopy, B);
  kc_put(&pr, b + 1, 5000);
  ck_assert_uint_eq(pr.kcopy, B - C);
  kc_get(&co, b + 1, 5000);
  ck_assert_uint_eq(co.kcopy, B - C);
  kc_put(&pr, b + 2, 40000); /* in one piece */
  kc_get(&co, b + 2, 40000);
  ck_assert_uint_eq(pr.kcopy, B - 2 * C);
  ck_assert_uint_eq(co.kcopy, B - 2 * C);
  /* This one reaches past the ring's end, both parts a page or more: two
   * copies each way, the budget spent. */
  uint64_t off = pr.ctl->tail % sz + FS_RING_HDR;
  ck_assert(off + FS_RING_KC_MIN <= sz && off + 40000 >= sz + FS_RING_KC_MIN);
  kc_put(&pr, b + 3, 40000);
  kc_get(&co, b + 3, 40000);
  ck_assert_uint_eq(pr.kcopy, 0);
  ck_assert_uint_eq(co.kcopy, 0);
  /* Spent: exact still, by memcpy, and the budget stays at 0. */
  for (int i = 0; i < 6; i++) {
    kc_put(&pr, b + 4 + i, 30000);
    kc_get(&co, b + 4 + i, 30000);
  }
  ck_assert_uint_eq(pr.kcopy, 0);
  ck_assert_uint_eq(co.kcopy, 0);
  /* A trim gave the pages back: the producer's budget is whole again. */
  bool empty;
  ck_assert_int_gt(fs_ring_trim(&pr, &empty), 0);
  ck_assert(empty);
  ck_assert_uint_eq(pr.kcopy, B);
  /* From a file, through the bounce buffer while the budget lasts. */
  char path[] = "/tmp/check_ring_kc.XXXXXX";
  int ff = mkstemp(path);
  ck_assert_int_ge(ff, 0);
  unlink(path);
  ck_assert_int_eq(write(ff, b, 50000), 50000);
  bool end = false;
  ssize_t n = fs_ring_put_file(&pr, ff, 7, 50000, &end);
  ck_assert_int_gt(n, 8192);
  ck_assert_uint_lt(pr.kcopy, B);
  kc_get(&co, b + 7, (size_t)n);
  close(ff);
  munmap(pa, pg + sz);
  munmap(pb, pg + sz);
  close(fd);
}
END_TEST

/* `rest`: a producer that finds the ring empty at or past that offset
 * puts a record of up to a quarter of it back at the start (behind a
 * SKIP): an exchange of requests and replies never writes past rest + its
 * record, and every byte arrives in order.  A bigger record stays at
 * tail. */
START_TEST(t_rest_exchange)
{
  r.rest = 1024;
  srand(44);
  uint8_t out[1024 / FS_RING_REST_REC], in[300];
  uint64_t sent = 0;
  for (int iter = 0; iter < 20000; iter++) {
    size_t n = 1 + (size_t)rand() % sizeof out;
    for (size_t i = 0; i < n; i++)
      out[i] = (uint8_t)(sent + i);
    ck_assert_uint_eq(put(out, n), n);
    int dirty = 0;
    for (size_t i = 1024 + FS_RING_HDR + sizeof out + 8; i < RSZ; i++)
      dirty |= data[i] != 0xee;
    ck_assert_int_eq(dirty, 0);
    ck_assert_int_eq(get(in, sizeof in, false), (ssize_t)n);
    ck_assert_int_eq(memcmp(in, out, n), 0);
    sent += n;
  }
  /* Empty at offset 1096 (>= rest), a record of 1500: at tail, unmoved. */
  uint8_t big[1500];
  memset(big, 'b', sizeof big);
  setup();
  r.rest = 1024;
  ck_assert_uint_eq(put(big, 1088), 1088);
  ck_assert_int_eq(get(big, 1088, false), 1088);
  ck_assert_uint_eq(ctl.tail, 1096);
  ck_assert_uint_eq(put(big, sizeof big), sizeof big);
  ck_assert_uint_eq(ctl.tail, 1096 + FS_RING_HDR + sizeof big + 4);
  /* A small one then goes back to the start once the ring is empty. */
  ck_assert_int_eq(get(big, sizeof big, false), (ssize_t)sizeof big);
  ck_assert_uint_eq(put("xy", 2), 2);
  ck_assert_uint_eq(ctl.tail, (uint64_t)RSZ + FS_RING_HDR + 8);
  ck_assert_int_eq(get(in, sizeof in, false), 2);
  ck_assert_int_eq(memcmp(in, "xy", 2), 0);
}
END_TEST

/* A consumer that lags (the ring never empty at a look): records go at
 * tail through the whole ring, as without `rest`, every byte once and in
 * order; a look that found data waits a quarter of `rest` before the
 * next one reads the consumer's head. */
START_TEST(t_rest_lagging)
{
  r.rest = 512;
  srand(45);
  uint8_t out[200], in[100];
  uint64_t sent = 0, rcvd = 0;
  bool far = false;
  for (int iter = 0; iter < 20000; iter++) {
    size_t n = 1 + (size_t)rand() % sizeof out;
    for (size_t i = 0; i < n; i++)
      out[i] = (uint8_t)(sent + i);
    uint64_t at = ctl.tail, next = r.rest_next;
    size_t k = put(out, n);
    sent += k;
    if (k && n <= r.rest / FS_RING_REST_REC && ctl.tail - at < RSZ / 2 && (at & (RSZ - 1)) >= r.rest &&
        at >= next && ctl.head != at)
      ck_assert_uint_eq(r.rest_next, at + r.rest / FS_RING_REST_REC); /* looked, found data */
    far |= (ctl.tail & (RSZ - 1)) > RSZ / 2;
    ssize_t g = ctl.tail - ctl.head > 300 ? get(in, 1 + (size_t)rand() % sizeof in, false) : 0;
    ck_assert_int_ge(g, 0);
    int bad = 0;
    for (ssize_t i = 0; i < g; i++)
      bad |= in[i] != (uint8_t)(rcvd + (uint64_t)i);
    ck_assert_int_eq(bad, 0);
    rcvd += (uint64_t)g;
  }
  ck_assert(far);
  ck_assert_uint_ge(rcvd, 500000);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("ring");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_add_test(tc, t_roundtrip);
  tcase_add_test(tc, t_partial_and_peek);
  tcase_add_test(tc, t_wrap_stream);
  tcase_add_test(tc, t_iov_gather_scatter);
  tcase_add_test(tc, t_control_records);
  tcase_add_test(tc, t_full_keeps_reserve);
  tcase_add_test(tc, t_space_cached_head);
  tcase_add_test(tc, t_hostile_producer);
  tcase_add_test(tc, t_window_stream);
  tcase_add_test(tc, t_window_limit);
  tcase_add_test(tc, t_skip_transparent);
  tcase_add_test(tc, t_hostile_skip);
  tcase_add_test(tc, t_trim_shared);
  tcase_add_test(tc, t_kcopy_budget);
  tcase_add_test(tc, t_want_space);
  tcase_add_test(tc, t_rest_exchange);
  tcase_add_test(tc, t_rest_lagging);
  suite_add_tcase(s, tc);
  return run_suite(s, false);
}
