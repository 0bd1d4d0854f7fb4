/* engine/trim: an idle connection's pass on a real shm channel (our end a,
 * the peer's b, in this process).  The tx ring's free pages go back once
 * the sender wrote nothing for a whole pass, and its kernel-copy budget
 * comes back with them; the rx ring's budget comes back after two passes
 * in which nothing arrived (the peer's own trim gave those pages back),
 * not while bytes keep coming. */
#include <check.h>
#include <string.h>

#include "engine/trim.h"
#include "fabric/ring.h"
#include "tests/unit/check_run.h"
#include "tests/unit/pair.h"

static void send_some(struct fs_chan *from, struct fs_chan *to, size_t n)
{
  static char buf[64 << 10];
  memset(buf, 7, sizeof buf);
  struct iovec v = { buf, n };
  ck_assert_uint_eq(fs_ring_put_data(&from->tx, &v, 1, 0, n), n);
  v.iov_len = sizeof buf;
  ck_assert_int_eq(fs_ring_get_data(&to->rx, &v, 1, 0, n, false), (ssize_t)n);
}

START_TEST(t_tx_budget_back_with_pages)
{
  struct pair p;
  pair_new(&p);
  ck_assert_uint_gt(p.a->tx.kcopy0, 0);
  send_some(p.a, p.b, 60000);
  p.c->fab_tx += 60000;
  ck_assert_uint_lt(p.a->tx.kcopy, p.a->tx.kcopy0);
  fs_trim_idle(); /* notes fab_tx */
  ck_assert_uint_lt(p.a->tx.kcopy, p.a->tx.kcopy0);
  ck_assert_uint_gt(fs_trim_idle(), 0); /* idle a whole pass: pages back */
  ck_assert_uint_eq(p.a->tx.kcopy, p.a->tx.kcopy0);
}
END_TEST

START_TEST(t_rx_budget_back_after_two_quiet_passes)
{
  struct pair p;
  pair_new(&p);
  send_some(p.b, p.a, 60000);
  p.c->fab_rx += 60000;
  uint32_t spent = p.a->rx.kcopy;
  ck_assert_uint_lt(spent, p.a->rx.kcopy0);
  fs_trim_idle(); /* notes fab_rx */
  fs_trim_idle(); /* one quiet pass */
  ck_assert_uint_eq(p.a->rx.kcopy, spent);
  /* Bytes came: the count starts again. */
  send_some(p.b, p.a, 5000);
  p.c->fab_rx += 5000;
  spent = p.a->rx.kcopy;
  fs_trim_idle();
  fs_trim_idle();
  ck_assert_uint_eq(p.a->rx.kcopy, spent);
  fs_trim_idle(); /* the second quiet pass */
  ck_assert_uint_eq(p.a->rx.kcopy, p.a->rx.kcopy0);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("trim");
  TCase *tc = tcase_create("trim");
  tcase_add_test(tc, t_tx_budget_back_with_pages);
  tcase_add_test(tc, t_rx_budget_back_after_two_quiet_passes);
  suite_add_tcase(s, tc);
  return run_suite(s, true);
}
