/* Unit tests for engine/batch: wakes held back within an event loop's
 * batch reach the peer at the batch's end, once per connection (once per
 * bell where connections share one), and never later than the thread's
 * next wait, its exit or a full batch. */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/bell.h"
#include "engine/batch.h"
#include "engine/conn.h"
#include "engine/ready.h"
#include "tests/unit/check_run.h"

static int wakes; /* the peer's wake fd, as a count */

static void count_wake(struct fs_chan *ch)
{
  (void)ch;
  __atomic_fetch_add(&wakes, 1, __ATOMIC_RELAXED);
}

static int posts; /* publishes of a fabric whose publish is more than a wake */

static void post(struct fs_chan *ch)
{
  (void)ch;
  posts++;
}

static const struct fs_chan_ops shared_ops = {
  .name = "fake-shm", .wake_peer = count_wake, .release = fs_chan_nop, .progress = fs_chan_nop,
  .publish = fs_chan_shared_publish, .settle = fs_chan_nop, .credit = fs_chan_shared_credit, .arm = fs_chan_nop,
  .drain = fs_chan_nop,
};
static const struct fs_chan_ops posted_ops = {
  .name = "fake-rdma", .wake_peer = count_wake, .release = fs_chan_nop, .progress = fs_chan_nop,
  .publish = post, .settle = fs_chan_nop, .credit = fs_chan_nop, .arm = fs_chan_nop, .drain = fs_chan_nop,
};

struct fake {
  struct fs_conn *c;
  struct fs_chan ch;
  struct fs_ring_ctl ctl;
};

static struct fake *fake_new(const struct fs_chan_ops *ops)
{
  struct fake *f = aligned_alloc(64, (sizeof *f + 63) / 64 * 64);
  ck_assert_ptr_nonnull(f);
  memset(f, 0, sizeof *f);
  f->c = fs_conn_new(-1, AF_INET);
  ck_assert_ptr_nonnull(f->c);
  f->ch.ops = ops;
  f->ch.tx.ctl = &f->ctl;
  f->c->chan = &f->ch;
  return f;
}

/* The peer went to sleep on our tx ring. */
static void peer_sleeps(struct fake *f)
{
  __atomic_store_n(&f->ctl.want_data, 1, __ATOMIC_RELEASE);
}

static void setup(void)
{
  wakes = 0;
  posts = 0;
  fs_batch_flush();
}

START_TEST(t_no_batch_wakes_at_once)
{
  struct fake *f = fake_new(&shared_ops);
  peer_sleeps(f);
  fs_batch_kick(f->c, &f->ch);
  ck_assert_int_eq(wakes, 1);
  ck_assert_uint_eq(f->ctl.want_data, 0);
  fs_batch_begin(1); /* one event: no batch */
  peer_sleeps(f);
  fs_batch_kick(f->c, &f->ch);
  ck_assert_int_eq(wakes, 2);
  fs_batch_kick(f->c, &f->ch); /* the peer is awake: nothing to do */
  ck_assert_int_eq(wakes, 2);
}
END_TEST

START_TEST(t_held_until_flush)
{
  struct fake *a = fake_new(&shared_ops), *b = fake_new(&shared_ops);
  uint32_t ra = a->c->refs, rb = b->c->refs;
  fs_batch_begin(2);
  peer_sleeps(a);
  peer_sleeps(b);
  fs_batch_kick(a->c, &a->ch);
  fs_batch_kick(a->c, &a->ch); /* a second record on the same connection */
  fs_batch_kick(b->c, &b->ch);
  ck_assert_int_eq(wakes, 0);
  ck_assert_uint_eq(a->c->refs, ra + 1); /* held: its channel lives until the flush */
  ck_assert_uint_eq(b->c->refs, rb + 1);
  errno = 1234;
  fs_batch_flush();
  ck_assert_int_eq(errno, 1234); /* flushed before calls that may succeed: errno untouched */
  ck_assert_int_eq(wakes, 2); /* one per connection */
  ck_assert_uint_eq(a->c->refs, ra);
  ck_assert_uint_eq(b->c->refs, rb);
  peer_sleeps(a); /* the batch is over: at once again */
  fs_batch_kick(a->c, &a->ch);
  ck_assert_int_eq(wakes, 3);
}
END_TEST

/* Connections whose peer thread sleeps on one bell (a slot each): the
 * flush sets every slot before the bell's eventfd is written, so that the
 * peer, which may run at the write in this thread's place, finds them all
 * at one wake; one write in all. */
static struct fs_bell_page *bell_pg;
static int bell_efd;
static int bell_early; /* rings that found the eventfd written already */

static void bell_wake(struct fs_chan *ch)
{
  struct pollfd p = { bell_efd, POLLIN, 0 };
  if (poll(&p, 1, 0) != 0)
    bell_early++;
  fs_bell_ring(bell_pg, bell_efd, (uint32_t)ch->side);
}

static const struct fs_chan_ops bell_ops = {
  .name = "fake-shm-bell", .wake_peer = bell_wake, .release = fs_chan_nop, .progress = fs_chan_nop,
  .publish = fs_chan_shared_publish, .settle = fs_chan_nop, .credit = fs_chan_shared_credit, .arm = fs_chan_nop,
  .drain = fs_chan_nop,
};

static void bell_note(void *arg, uint32_t slot)
{
  (void)slot;
  (*(unsigned *)arg)++;
}

START_TEST(t_flush_one_write_per_bell)
{
  int memfd;
  ck_assert_int_eq(fs_bell_make(&bell_efd, &memfd, &bell_pg), 0);
  bell_early = 0;
  struct fake *f[3];
  fs_batch_begin(3);
  for (int i = 0; i < 3; i++) {
    f[i] = fake_new(&bell_ops);
    f[i]->ch.side = i; /* the slot */
    peer_sleeps(f[i]);
    fs_batch_kick(f[i]->c, &f[i]->ch);
  }
  fs_batch_flush();
  ck_assert_int_eq(bell_early, 0); /* no write before the last slot was set */
  uint64_t v = 0;
  ck_assert_int_eq(read(bell_efd, &v, sizeof v), (ssize_t)sizeof v);
  ck_assert_uint_eq(v, 1);
  unsigned n = 0;
  ck_assert_uint_eq(fs_bell_drain(bell_pg, -1, bell_note, &n), 3);
  /* Outside a batch the ring writes at once. */
  peer_sleeps(f[0]);
  fs_batch_kick(f[0]->c, &f[0]->ch);
  struct pollfd p = { bell_efd, POLLIN, 0 };
  ck_assert_int_eq(poll(&p, 1, 0), 1);
  fs_bell_unmap(bell_pg);
  close(bell_efd);
  close(memfd);
}
END_TEST

START_TEST(t_full_batch_wakes_at_once)
{
  struct fake *f[FS_BATCH_SLOTS + 1];
  fs_batch_begin(64);
  for (int i = 0; i <= FS_BATCH_SLOTS; i++) {
    f[i] = fake_new(&shared_ops);
    peer_sleeps(f[i]);
    fs_batch_kick(f[i]->c, &f[i]->ch);
  }
  ck_assert_int_eq(wakes, 1); /* the one past the slots */
  fs_batch_flush();
  ck_assert_int_eq(wakes, FS_BATCH_SLOTS + 1);
}
END_TEST

START_TEST(t_posted_fabric_not_held)
{
  struct fake *f = fake_new(&posted_ops);
  fs_batch_begin(5);
  fs_batch_kick(f->c, &f->ch); /* its publish carries the bytes: never held */
  ck_assert_int_eq(posts, 1);
  fs_batch_flush();
  ck_assert_int_eq(posts, 1);
}
END_TEST

static void *batch_then_exit(void *arg)
{
  struct fake *f = arg;
  fs_batch_begin(3);
  peer_sleeps(f);
  fs_batch_kick(f->c, &f->ch);
  return (void *)(long)__atomic_load_n(&wakes, __ATOMIC_RELAXED);
}

START_TEST(t_thread_exit_flushes)
{
  struct fake *f = fake_new(&shared_ops);
  uint32_t refs = f->c->refs;
  pthread_t t;
  void *before;
  ck_assert_int_eq(pthread_create(&t, NULL, batch_then_exit, f), 0);
  ck_assert_int_eq(pthread_join(t, &before), 0);
  ck_assert_int_eq((long)before, 0);
  ck_assert_int_eq(wakes, 1);
  ck_assert_uint_eq(f->c->refs, refs);
}
END_TEST

START_TEST(t_poll_flushes)
{
  struct fake *f = fake_new(&shared_ops);
  fs_batch_begin(2);
  peer_sleeps(f);
  fs_batch_kick(f->c, &f->ch);
  ck_assert_int_eq(wakes, 0);
  struct timespec zero = { 0, 0 };
  ck_assert_int_eq(fs_ready_poll(NULL, 0, &zero, NULL), 0); /* a wait of any kind ends the batch */
  ck_assert_int_eq(wakes, 1);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("batch");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_add_test(tc, t_no_batch_wakes_at_once);
  tcase_add_test(tc, t_held_until_flush);
  tcase_add_test(tc, t_full_batch_wakes_at_once);
  tcase_add_test(tc, t_flush_one_write_per_bell);
  tcase_add_test(tc, t_posted_fabric_not_held);
  tcase_add_test(tc, t_thread_exit_flushes);
  tcase_add_test(tc, t_poll_flushes);
  suite_add_tcase(s, tc);
  return run_suite(s, false);
}
