/* Unit tests for engine/door: slots are handed out once and come back when
 * given back; a drain names each connection that rang, once, and none
 * whose slot was given back (or whose object now belongs to another
 * door); only the maker drains (a fork child does not); a door lives as
 * long as its last reference, its eventfd with it; a connection takes the
 * door of the thread that marked it last, one per thread, at most
 * FS_DOOR_HOMES of them; the process's door is one thread's door too (a
 * single thread holds one). */
#include <check.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/conn.h"
#include "engine/door.h"
#include "tests/unit/check_run.h"

static struct fs_conn *seen[8];
static int nseen;

static void note(void *arg, struct fs_conn *c)
{
  (void)arg;
  ck_assert_int_lt(nseen, 8);
  seen[nseen++] = c;
}

static struct fs_conn *conn_new(void)
{
  int sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  close(sv[1]);
  struct fs_conn *c = fs_conn_new(sv[0], AF_INET);
  ck_assert_ptr_nonnull(c);
  return c;
}

/* Give c slot s in d, as the offer does. */
static uint32_t take_slot(struct fs_door *d, struct fs_conn *c)
{
  uint32_t s;
  ck_assert_int_eq(fs_door_slot_get(d, c, &s), 0);
  c->door_slot = s;
  fs_door_get(d);
  __atomic_store_n(&c->door, d, __ATOMIC_RELEASE);
  return s;
}

static void drop_slot(struct fs_conn *c)
{
  struct fs_door *d = c->door;
  c->door = NULL;
  fs_door_slot_put(d, c->door_slot);
  fs_door_put(d);
}

/* The forked child (pid) exited 0; the parent's own drain still hands it
 * a, the one rung slot; then d and a go. */
static void child_ok_then_parent_drains(pid_t pid, struct fs_door *d, struct fs_conn *a)
{
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st));
  ck_assert_int_eq(WEXITSTATUS(st), 0);
  nseen = 0;
  fs_door_woken(d);
  ck_assert_int_eq(nseen, 1);
  ck_assert_ptr_eq(seen[0], a);
  fs_door_on_deliver(NULL);
  drop_slot(a);
  fs_door_put(d);
  fs_conn_put(a);
}

START_TEST(t_slots_and_drain)
{
  struct fs_door *d;
  ck_assert_int_eq(fs_door_new(&d), 0);
  ck_assert(fs_door_live());
  struct fs_conn *a = conn_new(), *b = conn_new(), *c = conn_new();
  uint32_t sa = take_slot(d, a), sb = take_slot(d, b);
  ck_assert_uint_ne(sa, sb);
  /* Rung twice and once: each named once; the one not rung, not at all. */
  fs_bell_ring(d->page, d->efd, sb);
  fs_bell_ring(d->page, d->efd, sb);
  fs_bell_ring(d->page, d->efd, sa);
  nseen = 0;
  ck_assert_uint_eq(fs_door_drain(d, false, note, NULL), 2);
  ck_assert_int_eq(nseen, 2);
  ck_assert((seen[0] == a && seen[1] == b) || (seen[0] == b && seen[1] == a));
  /* A slot given back: a late ring from its old peer names nobody; the
   * next connection gets the slot, and then that one is named. */
  drop_slot(a);
  fs_bell_ring(d->page, d->efd, sa);
  nseen = 0;
  ck_assert_uint_eq(fs_door_drain(d, false, note, NULL), 1);
  ck_assert_int_eq(nseen, 0);
  ck_assert_uint_eq(take_slot(d, c), sa);
  fs_bell_ring(d->page, d->efd, sa);
  nseen = 0;
  fs_door_drain(d, false, note, NULL);
  ck_assert_int_eq(nseen, 1);
  ck_assert_ptr_eq(seen[0], c);
  /* A connection whose object now names another door is not named. */
  struct fs_door *other;
  ck_assert_int_eq(fs_door_new(&other), 0);
  c->door = other;
  fs_bell_ring(d->page, d->efd, sa);
  nseen = 0;
  fs_door_drain(d, false, note, NULL);
  ck_assert_int_eq(nseen, 0);
  c->door = d;
  fs_door_put(other);
  /* The door by its eventfd; it lives while a connection holds it. */
  int efd = d->efd;
  struct fs_door *byfd = fs_door_by_efd(efd);
  ck_assert_ptr_eq(byfd, d);
  fs_door_put(byfd);
  fs_door_put(d); /* the maker's reference */
  ck_assert(fcntl(efd, F_GETFD) >= 0);
  drop_slot(b);
  drop_slot(c);
  ck_assert(fcntl(efd, F_GETFD) < 0); /* the last one closed it */
  ck_assert(!fs_door_live());
  fs_conn_put(a);
  fs_conn_put(b);
  fs_conn_put(c);
}
END_TEST

/* An event loop's drain (edge) leaves the eventfd unread, a read less per
 * wake; each ring after it is still an edge, and a level-triggered
 * waiter's drain (a blocking call, a poll) reads it, so that it sleeps. */
START_TEST(t_edge_drain)
{
  struct fs_door *d;
  ck_assert_int_eq(fs_door_new(&d), 0);
  struct fs_conn *a = conn_new();
  uint32_t sa = take_slot(d, a);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  ck_assert_int_ge(ep, 0);
  struct epoll_event ev = { .events = EPOLLIN | EPOLLET }, out;
  ck_assert_int_eq(epoll_ctl(ep, EPOLL_CTL_ADD, d->efd, &ev), 0);
  struct pollfd p = { d->efd, POLLIN, 0 };
  for (int round = 0; round < 3; round++) {
    fs_bell_ring(d->page, d->efd, sa);
    ck_assert_int_eq(epoll_wait(ep, &out, 1, 0), 1);
    ck_assert_int_eq(epoll_wait(ep, &out, 1, 0), 0); /* one edge per ring */
    nseen = 0;
    ck_assert_uint_eq(fs_door_drain(d, true, note, NULL), 1);
    ck_assert_int_eq(nseen, 1);
    ck_assert_ptr_eq(seen[0], a);
    ck_assert_int_eq(poll(&p, 1, 0), 1); /* left unread */
  }
  /* The level drain reads it: a waiter polling it sleeps again. */
  nseen = 0;
  ck_assert_uint_eq(fs_door_drain(d, false, note, NULL), 0);
  ck_assert_int_eq(poll(&p, 1, 0), 0);
  fs_bell_ring(d->page, d->efd, sa);
  ck_assert_int_eq(poll(&p, 1, 0), 1);
  ck_assert_int_eq(epoll_wait(ep, &out, 1, 0), 1);
  close(ep);
  drop_slot(a);
  fs_door_put(d);
  fs_conn_put(a);
}
END_TEST

START_TEST(t_only_the_maker_drains)
{
  struct fs_door *d;
  ck_assert_int_eq(fs_door_new(&d), 0);
  struct fs_conn *a = conn_new();
  uint32_t sa = take_slot(d, a);
  fs_door_on_deliver(note);
  fs_bell_ring(d->page, d->efd, sa);
  pid_t pid = fork();
  if (pid == 0) {
    /* The child's woken drain takes nothing: the rings are its parent's. */
    nseen = 0;
    fs_door_woken(d);
    _exit(!fs_door_mine(d) && nseen == 0 ? 0 : 1);
  }
  child_ok_then_parent_drains(pid, d, a);
}
END_TEST

/* A fork child never drains its parent's door, but a thread of it that
 * waits on one of its connections watches it: each ring edges the watch
 * (the eventfd stays the parent's to read), and the watch clears `rung`
 * so that the next ring writes again. */
START_TEST(t_child_watches)
{
  struct fs_door *d;
  ck_assert_int_eq(fs_door_new(&d), 0);
  struct fs_conn *a = conn_new();
  uint32_t sa = take_slot(d, a);
  fs_door_on_deliver(note);
  pid_t pid = fork();
  if (pid == 0) {
    int w = fs_door_watch(d), bad = 0;
    struct pollfd pw = { w, POLLIN, 0 }, pe = { d->efd, POLLIN, 0 };
    bad |= w < 0 || w == d->efd || !fs_door_watch_is(w);
    bad |= (poll(&pw, 1, 0) != 0) << 1; /* nothing rang yet */
    for (int i = 0; i < 2; i++) {
      fs_bell_ring(d->page, d->efd, sa);
      bad |= (poll(&pw, 1, 1000) != 1) << 2;
      fs_door_fd_woken(d, w);
      bad |= (__atomic_load_n(&d->page->rung, __ATOMIC_SEQ_CST) != 0) << 3;
      bad |= (poll(&pw, 1, 0) != 0) << 4; /* the edge is taken */
      bad |= (poll(&pe, 1, 0) != 1) << 5; /* the eventfd is not: the parent's */
    }
    _exit(bad);
  }
  child_ok_then_parent_drains(pid, d, a); /* the child's rings reach it */
}
END_TEST

/* ---- thread doors -------------------------------------------------------- */

static void *mark_all(void *arg)
{
  for (struct fs_conn **c = arg; *c; c++)
    fs_door_home_mark(*c);
  return NULL;
}

/* Mark conns (NULL-terminated) from a thread of their own, gone after. */
static void mark_in_thread(struct fs_conn **conns)
{
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, mark_all, conns), 0);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
}

START_TEST(t_thread_doors)
{
  unsigned base = fs_door_home_count();
  struct fs_conn *a = conn_new(), *b = conn_new(), *c = conn_new(), *d = conn_new();
  struct fs_conn *t1[] = { a, b, NULL }, *t2[] = { c, NULL };
  mark_in_thread(t1);
  mark_in_thread(t2);
  /* Unmarked: no thread's door (the process's serves it). */
  ck_assert_ptr_null(fs_door_home_door(d, d->fd));
  /* One door per thread, made at the first ask, whichever thread asks;
   * the thread's exit leaves it to its connections. */
  struct fs_door *da = fs_door_home_door(a, a->fd), *db = fs_door_home_door(b, b->fd);
  struct fs_door *dc = fs_door_home_door(c, c->fd);
  ck_assert_ptr_nonnull(da);
  ck_assert_ptr_eq(da, db);
  ck_assert_ptr_nonnull(dc);
  ck_assert_ptr_ne(da, dc);
  ck_assert(fs_door_mine(da) && fs_door_mine(dc));
  ck_assert_uint_eq(fs_door_home_count(), base + 2);
  /* Neither is the process's: only the process's first thread shares it
   * (connections that upgraded before any thread waited on them ring it,
   * and would wake another thread whose door it were: t_herd). */
  struct fs_door *dp = fs_door_proc_get();
  ck_assert_ptr_nonnull(dp);
  ck_assert_ptr_ne(dp, da);
  ck_assert_ptr_ne(dp, dc);
  /* Marked again by this thread, the process's first: this thread's door
   * from then on, which is the process's (a single thread holds one). */
  ck_assert_int_eq(gettid(), getpid());
  fs_door_home_mark(b);
  struct fs_door *db2 = fs_door_home_door(b, b->fd);
  ck_assert_ptr_eq(db2, dp);
  ck_assert_uint_eq(fs_door_home_count(), base + 3);
  /* A fork child's is its own, not its parent's; its first thread (the
   * one that forked) shares the child's process door, a door left by a
   * thread that is not in the child does not. */
  pid_t pid = fork();
  if (pid == 0) {
    struct fs_door *x = fs_door_home_door(a, a->fd), *xp = fs_door_proc_get();
    fs_door_home_mark(d);
    struct fs_door *y = fs_door_home_door(d, d->fd);
    _exit(x && x != da && fs_door_mine(x) && !fs_door_mine(da) && xp != x && fs_door_mine(xp) && y == xp ? 0 : 1);
  }
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  /* The first thread's home goes with its last marked connection (b is
   * this thread's now); its door closes once no connection holds it. */
  fs_door_put(db);
  fs_door_home_forget(a);
  ck_assert_uint_eq(fs_door_home_count(), base + 2);
  int efd = da->efd;
  fs_door_put(da);
  ck_assert(fcntl(efd, F_GETFD) < 0);
  /* A later thread's home gets a door of its own, not the process's. */
  struct fs_conn *e = conn_new(), *t3[] = { e, NULL };
  mark_in_thread(t3);
  struct fs_door *de = fs_door_home_door(e, e->fd);
  ck_assert_ptr_nonnull(de);
  ck_assert_ptr_ne(de, dp);
  ck_assert_uint_eq(fs_door_home_count(), base + 3);
  fs_door_put(de);
  fs_door_home_forget(e);
  ck_assert_uint_eq(fs_door_home_count(), base + 2);
  fs_door_put(dp);
  /* Another thread's door lives on while a connection that took it (dc)
   * holds it, and no longer. */
  efd = dc->efd;
  fs_door_home_forget(c);
  ck_assert_uint_eq(fs_door_home_count(), base + 1);
  ck_assert(fcntl(efd, F_GETFD) >= 0);
  fs_door_put(dc);
  ck_assert(fcntl(efd, F_GETFD) < 0);
  fs_door_home_forget(b); /* the calling thread's home: its door stays */
  ck_assert_uint_eq(fs_door_home_count(), base + 1);
  fs_door_put(db2);
  fs_conn_put(e);
  fs_door_home_forget(d);
  fs_conn_put(a);
  fs_conn_put(b);
  fs_conn_put(c);
  fs_conn_put(d);
}
END_TEST

/* A single thread holds one door, whichever came first: the process's
 * (a connection that upgraded before the thread's first wait on it), or
 * its own. */
START_TEST(t_one_thread_one_door)
{
  struct fs_conn *u = conn_new(), *a = conn_new(), *b = conn_new();
  ck_assert_ptr_null(fs_door_home_door(u, u->fd)); /* unmarked */
  struct fs_door *p = fs_door_proc_get();
  ck_assert_ptr_nonnull(p);
  fs_door_home_mark(a);
  struct fs_door *da = fs_door_home_door(a, a->fd);
  ck_assert_ptr_eq(da, p);
  ck_assert_uint_eq(fs_door_home_count(), 1);
  fs_door_put(da);
  fs_door_put(p);
  /* A fork child's thread: its own door first, which the process's then is. */
  pid_t pid = fork();
  if (pid == 0) {
    fs_door_home_mark(b);
    struct fs_door *x = fs_door_home_door(b, b->fd), *xp = fs_door_proc_get();
    _exit(x && x != p && fs_door_mine(x) && xp == x ? 0 : 1);
  }
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  fs_door_home_forget(a);
  fs_door_home_forget(u);
  fs_conn_put(u);
  fs_conn_put(a);
  fs_conn_put(b);
}
END_TEST

/* Past FS_DOOR_HOMES threads' doors, a connection gets none (the
 * process's door serves it), until one goes. */
START_TEST(t_thread_doors_capped)
{
  unsigned base = fs_door_home_count(), n = FS_DOOR_HOMES + 3;
  struct fs_conn *cs[FS_DOOR_HOMES + 3];
  struct fs_door *ds[FS_DOOR_HOMES + 3];
  unsigned got = 0;
  for (unsigned i = 0; i < n; i++) {
    cs[i] = conn_new();
    struct fs_conn *one[] = { cs[i], NULL };
    mark_in_thread(one);
    ds[i] = fs_door_home_door(cs[i], cs[i]->fd);
    got += ds[i] != NULL;
  }
  ck_assert_uint_eq(got, FS_DOOR_HOMES - base);
  ck_assert_uint_eq(fs_door_home_count(), FS_DOOR_HOMES);
  ck_assert_ptr_null(ds[n - 1]);
  fs_door_put(ds[0]);
  fs_door_home_forget(cs[0]);
  ck_assert_uint_eq(fs_door_home_count(), FS_DOOR_HOMES - 1);
  ds[0] = NULL;
  struct fs_door *late = fs_door_home_door(cs[n - 1], cs[n - 1]->fd);
  ck_assert_ptr_nonnull(late);
  fs_door_put(late);
  for (unsigned i = 0; i < n; i++) {
    fs_door_put(ds[i]);
    fs_door_home_forget(cs[i]);
    fs_conn_put(cs[i]);
  }
  ck_assert_uint_eq(fs_door_home_count(), base);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("door");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, t_slots_and_drain);
  tcase_add_test(tc, t_edge_drain);
  tcase_add_test(tc, t_only_the_maker_drains);
  tcase_add_test(tc, t_child_watches);
  tcase_add_test(tc, t_thread_doors);
  tcase_add_test(tc, t_one_thread_one_door);
  tcase_add_test(tc, t_thread_doors_capped);
  suite_add_tcase(s, tc);
  return run_suite(s, true);
}
