/* Unit tests for base/bell: a ring is seen once by a drain, the eventfd is
 * written once per drain whatever the number of rings, writes held back
 * (fs_bell_hold) come at the release, once per bell, no ring is lost
 * to concurrent drains (threads ringing and draining at once), a peer's
 * bell is held once per page (and a ringer of our own bell likewise, the
 * fds lent), and hostile fds (a pipe, an unsealed or
 * short memfd, a page of another format) are refused with nothing kept. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/bell.h"
#include "tests/unit/check_run.h"

struct seen {
  uint32_t n;
  uint8_t *hit; /* FS_BELL_SLOTS counters */
};

static void note(void *arg, uint32_t slot)
{
  struct seen *s = arg;
  ck_assert_uint_lt(slot, FS_BELL_SLOTS);
  __atomic_add_fetch(&s->hit[slot], 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&s->n, 1, __ATOMIC_RELAXED);
}

static uint64_t efd_count(int efd)
{
  uint64_t v = 0;
  if (read(efd, &v, sizeof v) != (ssize_t)sizeof v)
    return 0;
  return v;
}

static bool fd_open(int fd)
{
  return fcntl(fd, F_GETFD) >= 0;
}

START_TEST(t_ring_then_drain)
{
  int efd, memfd;
  struct fs_bell_page *pg;
  ck_assert_int_eq(fs_bell_make(&efd, &memfd, &pg), 0);
  struct seen s = { 0, calloc(FS_BELL_SLOTS, 1) };
  ck_assert_uint_eq(fs_bell_drain(pg, efd, note, &s), 0);
  /* Three slots far apart, one rung twice: one eventfd write in all. */
  fs_bell_ring(pg, efd, 0);
  fs_bell_ring(pg, efd, 4097);
  fs_bell_ring(pg, efd, FS_BELL_SLOTS - 1);
  fs_bell_ring(pg, efd, 4097);
  fs_bell_ring(pg, efd, FS_BELL_SLOTS); /* out of range: nothing */
  struct pollfd p = { efd, POLLIN, 0 };
  ck_assert_int_eq(poll(&p, 1, 0), 1);
  ck_assert_uint_eq(fs_bell_drain(pg, efd, note, &s), 3);
  ck_assert_uint_eq(s.hit[0], 1);
  ck_assert_uint_eq(s.hit[4097], 1);
  ck_assert_uint_eq(s.hit[FS_BELL_SLOTS - 1], 1);
  /* The drain read the eventfd: a level-triggered waiter sleeps again. */
  ck_assert_int_eq(poll(&p, 1, 0), 0);
  /* After a drain, the next ring writes the eventfd again. */
  fs_bell_ring(pg, efd, 7);
  ck_assert_int_eq(poll(&p, 1, 0), 1);
  ck_assert_uint_eq(efd_count(efd), 1);
  ck_assert_uint_eq(fs_bell_drain(pg, efd, note, &s), 1);
  ck_assert_uint_eq(s.hit[7], 1);
  free(s.hit);
  fs_bell_unmap(pg);
  close(efd);
  close(memfd);
}
END_TEST

/* Ringers count each ring before it; drainers race each other.  Once the
 * ringers stop and a last drain runs, every slot's rings were seen at
 * least once after its last ring: a slot whose last ring found `rung`
 * set was taken by a drain that started after it, or `rung` was clear
 * and the eventfd is readable. */
#define RINGERS 3
#define ROUNDS 20000
struct stress {
  struct fs_bell_page *pg;
  int efd;
  uint32_t last_ring[RINGERS];  /* round of each ringer's last ring */
  uint32_t seen_round[RINGERS]; /* highest round a drain saw (slot = ringer) */
  uint32_t rounds[RINGERS];     /* published round per ringer */
  bool stop;
};

static void stress_note(void *arg, uint32_t slot)
{
  struct stress *st = arg;
  ck_assert_uint_lt(slot, RINGERS);
  uint32_t r = __atomic_load_n(&st->rounds[slot], __ATOMIC_SEQ_CST);
  uint32_t cur = __atomic_load_n(&st->seen_round[slot], __ATOMIC_RELAXED);
  while (cur < r && !__atomic_compare_exchange_n(&st->seen_round[slot], &cur, r, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    ;
}

struct ringer {
  struct stress *st;
  uint32_t id;
};

static void *ringer_run(void *arg)
{
  struct ringer *r = arg;
  for (uint32_t i = 1; i <= ROUNDS; i++) {
    __atomic_store_n(&r->st->rounds[r->id], i, __ATOMIC_SEQ_CST);
    fs_bell_ring(r->st->pg, r->st->efd, r->id);
  }
  return NULL;
}

static void *drainer_run(void *arg)
{
  struct stress *st = arg;
  while (!__atomic_load_n(&st->stop, __ATOMIC_ACQUIRE)) {
    struct pollfd p = { st->efd, POLLIN, 0 };
    if (poll(&p, 1, 5) > 0)
      fs_bell_drain(st->pg, st->efd, stress_note, st);
  }
  return NULL;
}

START_TEST(t_concurrent_rings_and_drains)
{
  struct stress st;
  memset(&st, 0, sizeof st);
  int memfd;
  ck_assert_int_eq(fs_bell_make(&st.efd, &memfd, &st.pg), 0);
  pthread_t rt[RINGERS], dt[2];
  struct ringer rg[RINGERS];
  for (int i = 0; i < 2; i++)
    ck_assert_int_eq(pthread_create(&dt[i], NULL, drainer_run, &st), 0);
  for (uint32_t i = 0; i < RINGERS; i++) {
    rg[i] = (struct ringer){ &st, i };
    ck_assert_int_eq(pthread_create(&rt[i], NULL, ringer_run, &rg[i]), 0);
  }
  for (int i = 0; i < RINGERS; i++)
    pthread_join(rt[i], NULL);
  __atomic_store_n(&st.stop, true, __ATOMIC_RELEASE);
  for (int i = 0; i < 2; i++)
    pthread_join(dt[i], NULL);
  /* What is still owed is announced: the eventfd is readable, or nothing
   * is owed. */
  bool owed = false;
  for (int i = 0; i < RINGERS; i++)
    owed |= st.seen_round[i] != ROUNDS;
  struct pollfd p = { st.efd, POLLIN, 0 };
  if (owed)
    ck_assert_int_eq(poll(&p, 1, 0), 1);
  fs_bell_drain(st.pg, st.efd, stress_note, &st);
  for (int i = 0; i < RINGERS; i++)
    ck_assert_uint_eq(st.seen_round[i], ROUNDS);
  fs_bell_unmap(st.pg);
  close(st.efd);
  close(memfd);
}
END_TEST

/* Held: every ring sets its slot at once and no eventfd is written until
 * the release, then once per bell; past FS_BELL_HELD bells a ring writes
 * at once (nothing is lost when the list is full). */
#define HOLD_BELLS (FS_BELL_HELD + 1)
START_TEST(t_hold_release)
{
  int efd[HOLD_BELLS], memfd[HOLD_BELLS];
  struct fs_bell_page *pg[HOLD_BELLS];
  for (int i = 0; i < HOLD_BELLS; i++)
    ck_assert_int_eq(fs_bell_make(&efd[i], &memfd[i], &pg[i]), 0);
  struct seen s = { 0, calloc(FS_BELL_SLOTS, 1) };
  struct pollfd p[HOLD_BELLS];
  for (int i = 0; i < HOLD_BELLS; i++)
    p[i] = (struct pollfd){ efd[i], POLLIN, 0 };
  fs_bell_hold();
  fs_bell_ring(pg[0], efd[0], 3);
  fs_bell_ring(pg[0], efd[0], 900);
  fs_bell_ring(pg[1], efd[1], 3);
  ck_assert_int_eq(poll(p, 2, 0), 0); /* nothing written yet */
  ck_assert_uint_eq(pg[0]->rung, 1); /* but taken: a ringer elsewhere relies on the held write */
  /* The bits are set already: an owner that looks now (awake for another
   * reason) takes them. */
  ck_assert_uint_eq(fs_bell_drain(pg[1], -1, note, &s), 1);
  for (int i = 2; i < HOLD_BELLS; i++)
    fs_bell_ring(pg[i], efd[i], 5);
  ck_assert_int_eq(poll(&p[HOLD_BELLS - 1], 1, 0), 1); /* the one past the list: at once */
  ck_assert_int_eq(poll(p, HOLD_BELLS - 1, 0), 0);
  errno = 4321;
  fs_bell_release();
  ck_assert_int_eq(errno, 4321);
  for (int i = 0; i < HOLD_BELLS; i++)
    ck_assert_uint_eq(efd_count(efd[i]), 1); /* once per bell */
  ck_assert_uint_eq(fs_bell_drain(pg[0], efd[0], note, &s), 2);
  ck_assert_uint_eq(s.hit[900], 1);
  /* Released: the next ring writes at once. */
  fs_bell_ring(pg[0], efd[0], 4);
  ck_assert_int_eq(poll(p, 1, 0), 1);
  for (int i = 0; i < HOLD_BELLS; i++) {
    fs_bell_unmap(pg[i]);
    close(efd[i]);
    close(memfd[i]);
  }
  free(s.hit);
}
END_TEST

START_TEST(t_peer_held_once)
{
  int efd, memfd;
  struct fs_bell_page *pg;
  ck_assert_int_eq(fs_bell_make(&efd, &memfd, &pg), 0);
  struct fs_bell_peer *a, *b;
  int e1 = dup(efd), m1 = dup(memfd), e2 = dup(efd), m2 = dup(memfd);
  ck_assert_int_eq(fs_bell_peer_get(e1, m1, -1, &a), 0);
  ck_assert_int_eq(fs_bell_peer_get(e2, m2, -1, &b), 0);
  ck_assert_ptr_eq(a, b); /* one per bell, however many connections */
  ck_assert_uint_eq(fs_bell_peer_count(), 1);
  ck_assert(!fd_open(m1) && !fd_open(m2) && !fd_open(e2)); /* one eventfd kept */
  ck_assert(fd_open(e1));
  fs_bell_peer_ring(a, 12);
  struct seen s = { 0, calloc(FS_BELL_SLOTS, 1) };
  ck_assert_uint_eq(fs_bell_drain(pg, efd, note, &s), 1);
  ck_assert_uint_eq(s.hit[12], 1);
  fs_bell_peer_put(b);
  ck_assert_uint_eq(fs_bell_peer_count(), 1);
  fs_bell_peer_put(a);
  ck_assert_uint_eq(fs_bell_peer_count(), 0);
  ck_assert(!fd_open(e1));
  free(s.hit);
  fs_bell_unmap(pg);
  close(efd);
  close(memfd);
}
END_TEST

/* In a child: RLIMIT_NOFILE lowered to 64 for good, and six bells of
 * our own.  0, or the step that failed. */
static int six_bells_at_64(int efd[6], int memfd[6], struct fs_bell_page *pg[6])
{
  struct rlimit rl = { 64, 64 };
  if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
    return 10;
  for (int i = 0; i < 6; i++)
    if (fs_bell_make(&efd[i], &memfd[i], &pg[i]) < 0)
      return 11;
  return 0;
}

/* A new peer's bell keeps its eventfd: only within the fd budget of the
 * application's count (3/4 of RLIMIT_NOFILE, base/fdreg.h), and only for
 * a sixteenth of the limit's peer processes.  A bell already held costs
 * nothing and is had at any count.  In a child: the limit is lowered for
 * good.  Without the check, a server with a client process per connection
 * kept an eventfd for each past its limit, and its own accept() failed
 * with EMFILE. */
static int budget_child(void)
{
  int efd[6], memfd[6], rc;
  struct fs_bell_page *pg[6];
  if ((rc = six_bells_at_64(efd, memfd, pg)) != 0)
    return rc;
  struct fs_bell_peer *a = NULL, *b = (void *)1, *c = NULL;
  int e = dup(efd[5]), m = dup(memfd[5]);
  if (fs_bell_peer_get(e, m, 40, &b) != -EMFILE || b != NULL || fd_open(e) || fd_open(m))
    return 12; /* a count of 40 of 64: with ours past 48, refused, nothing kept */
  if (fs_bell_peer_get(dup(efd[0]), dup(memfd[0]), 3, &a) != 0 || !a)
    return 13; /* a count of 3: well within */
  if (fs_bell_peer_get(dup(efd[0]), dup(memfd[0]), 40, &c) != 0 || c != a)
    return 14; /* held already: no fd more, any count */
  for (int i = 1; i < 4; i++)
    if (fs_bell_peer_get(dup(efd[i]), dup(memfd[i]), 3, &c) != 0)
      return 15; /* 4 peers: 64 / 16 */
  if (fs_bell_peer_get(dup(efd[4]), dup(memfd[4]), 3, &c) != -EMFILE || fs_bell_peer_count() != 4)
    return 16; /* a fifth: refused at any count */
  return 0;
}

START_TEST(t_peer_budget)
{
  ck_in_child(budget_child);
}
END_TEST

/* A ringer of one of our own bells (rdma's completions): the lent fds stay
 * open and ours; one ringer per bell; a ring reaches the owner's drain;
 * and its share is not the peers' (in a child at 64 fds, where 4 peers'
 * bells are all a process keeps: a fifth of our own still gets one). */
static int own_child(void)
{
  int efd[6], memfd[6], rc;
  struct fs_bell_page *pg[6];
  if ((rc = six_bells_at_64(efd, memfd, pg)) != 0)
    return rc;
  struct fs_bell_peer *p[6], *again;
  for (int i = 0; i < 4; i++)
    if (fs_bell_peer_get(dup(efd[i]), dup(memfd[i]), 3, &p[i]) != 0)
      return 12; /* the peers' share, full */
  if (fs_bell_peer_own(efd[5], memfd[5], &p[5]) != 0 || !p[5])
    return 13;
  if (!fd_open(efd[5]) || !fd_open(memfd[5]) || p[5]->efd == efd[5])
    return 14; /* lent, not taken: the ringer has a dup */
  if (fs_bell_peer_own(efd[5], memfd[5], &again) != 0 || again != p[5] || fs_bell_peer_count() != 5)
    return 15; /* one per bell */
  fs_bell_peer_ring(again, 7);
  struct seen s = { 0, calloc(FS_BELL_SLOTS, 1) };
  if (fs_bell_drain(pg[5], efd[5], note, &s) != 1 || s.hit[7] != 1)
    return 16;
  fs_bell_peer_put(again);
  fs_bell_peer_put(p[5]);
  if (fs_bell_peer_count() != 4 || !fd_open(efd[5]) || !fd_open(memfd[5]))
    return 17; /* the ringer gone, the bell's own fds still open */
  free(s.hit);
  return 0;
}

START_TEST(t_peer_own)
{
  ck_in_child(own_child);
}
END_TEST

static int memfd_of(size_t size, bool seal, uint32_t magic)
{
  int fd = memfd_create("t", MFD_ALLOW_SEALING);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
  if (size >= 8) {
    uint32_t hdr[2] = { magic, FS_BELL_VERSION };
    ck_assert_int_eq(pwrite(fd, hdr, sizeof hdr, 0), (ssize_t)sizeof hdr);
  }
  if (seal)
    ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
  return fd;
}

START_TEST(t_peer_hostile)
{
  struct fs_bell_peer *p = (void *)1;
  int pp[2];
  ck_assert_int_eq(pipe(pp), 0);
  struct {
    int efd, memfd;
  } bad[] = {
    { pp[0], memfd_of(FS_BELL_BYTES, true, FS_BELL_MAGIC) },                    /* not an eventfd */
    { eventfd(0, 0), memfd_of(FS_BELL_BYTES, false, FS_BELL_MAGIC) },          /* unsealed: could shrink */
    { eventfd(0, 0), memfd_of(4096, true, FS_BELL_MAGIC) },                    /* short */
    { eventfd(0, 0), memfd_of(FS_BELL_BYTES, true, 0x12345678) },              /* another format */
    { eventfd(0, 0), eventfd(0, 0) },                                          /* not a memfd */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_int_eq(fs_bell_peer_get(bad[i].efd, bad[i].memfd, -1, &p), -EPROTO);
    ck_assert_ptr_null(p);
    ck_assert(!fd_open(bad[i].efd) && !fd_open(bad[i].memfd)); /* nothing kept */
    p = (void *)1;
  }
  ck_assert_uint_eq(fs_bell_peer_count(), 0);
  close(pp[1]);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("bell");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, t_ring_then_drain);
  tcase_add_test(tc, t_concurrent_rings_and_drains);
  tcase_add_test(tc, t_hold_release);
  tcase_add_test(tc, t_peer_held_once);
  tcase_add_test(tc, t_peer_hostile);
  tcase_add_test(tc, t_peer_budget);
  tcase_add_test(tc, t_peer_own);
  suite_add_tcase(s, tc);
  return run_suite(s, false);
}
