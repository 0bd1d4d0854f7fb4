/* Unit tests for engine/wake: a connection gets its wake eventfd only when
 * first needed, and an attach waits for the threads that sleep on its TCP
 * socket without one (they would not hear of the channel). */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/conn.h"
#include "engine/door.h"
#include "engine/epoll.h"
#include "engine/fdtab.h"
#include "engine/io.h"
#include "engine/ready.h"
#include "engine/sock.h"
#include "engine/sockio.h"
#include "engine/wake.h"
#include "fabric/chan.h"
#include "fabric/shm/shm.h"
#include "tests/unit/check_run.h"

/* A pending connection of ours (may still upgrade, nothing made yet):
 * sv[0] is its fd (the TCP socket's stand-in), sv[1] the peer's socket. */
struct pend {
  int sv[2];
  struct fs_conn *c;
  int theirs, memfd; /* the peer's wake eventfd; the ring memory */
  struct fs_chan *a, *b;
};

static void pend_new(struct pend *p)
{
  memset(p, 0, sizeof *p);
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p->sv), 0);
  p->c = fs_conn_new(p->sv[0], AF_INET);
  ck_assert_ptr_nonnull(p->c);
  p->c->state = FS_STATE_TCP;
  p->c->dir = FS_DIR_ACCEPT;
  ck_assert_int_eq(fs_fdtab_install(p->sv[0], p->c), 0);
}

/* What a rendezvous does: the wake fd, a channel on it, the attach. */
static int pend_attach(struct pend *p)
{
  ck_assert_int_eq(fs_wake_get(p->c), 0);
  p->theirs = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ck_assert_int_ge(p->theirs, 0);
  ck_assert_int_eq(fs_shm_create(fs_shm_ring_size(0), p->c->wake_fd, &p->memfd, &p->a), 0);
  ck_assert_int_eq(fs_shm_set_peer(p->a, &(struct fs_shm_wake){ p->theirs, -1, 0, -1 }), 0);
  ck_assert_int_eq(fs_shm_attach(p->memfd, p->theirs, &(struct fs_shm_wake){ p->c->wake_fd, -1, 0, -1 }, &p->b), 0);
  return fs_sock_attach(p->c, p->a);
}

static bool peer_woken(struct pend *p)
{
  uint64_t v;
  return read(p->theirs, &v, sizeof v) == (ssize_t)sizeof v;
}

static void wait_blind(struct fs_conn *c, uint32_t n)
{
  for (int i = 0; i < 5000 && __atomic_load_n(&c->blind_rx, __ATOMIC_ACQUIRE) != n; i++)
    usleep(1000);
  ck_assert_uint_eq(__atomic_load_n(&c->blind_rx, __ATOMIC_ACQUIRE), n);
  usleep(20000); /* and into the kernel */
}

START_TEST(t_made_on_first_need)
{
  struct pend p;
  pend_new(&p);
  ck_assert_int_eq(p.c->wake_fd, -1); /* established, pending: no eventfd yet */
  errno = 1234;
  ck_assert_int_eq(fs_wake_get(p.c), 0);
  ck_assert_int_eq(errno, 1234); /* the application's errno is left alone */
  int efd = p.c->wake_fd;
  ck_assert_int_ge(efd, 0);
  char path[64], link[64] = "";
  snprintf(path, sizeof path, "/proc/self/fd/%d", efd);
  ck_assert_int_gt(readlink(path, link, sizeof link - 1), 0);
  ck_assert_str_eq(link, "anon_inode:[eventfd]");
  ck_assert_int_eq(fs_wake_get(p.c), 0);
  ck_assert_int_eq(p.c->wake_fd, efd); /* once */
  ck_assert(fs_wake_fd_budget_ok(3));
  ck_assert(!fs_wake_fd_budget_ok(INT_MAX));
}
END_TEST

/* A connection whose peer rings a door has no wake fd of its own: a wait
 * leases one from the process's pool for as long as any wait is in, then
 * gives it back; the next wait (of any connection) gets the same eventfd,
 * an epoll set never sees it, and a fabric that needs a wake fd of its own
 * keeps it. */
START_TEST(t_leased_while_waited_on)
{
  struct fs_door *d;
  ck_assert_int_eq(fs_door_new(&d), 0);
  struct pend p, q;
  pend_new(&p);
  pend_new(&q);
  uint32_t slot;
  ck_assert_int_eq(fs_door_slot_get(d, p.c, &slot), 0);
  fs_door_get(d);
  p.c->door = d;
  p.c->door_slot = slot;
  bool in1, in2;
  errno = 1234;
  ck_assert_ptr_eq(fs_wake_door_enter(p.c, &in1), d);
  ck_assert_int_eq(errno, 1234);
  ck_assert(in1);
  int efd = p.c->wake_fd;
  ck_assert_int_ge(efd, 0);
  ck_assert_int_eq(fs_wake_fd_own(p.c), -1); /* a lease: no epoll set registers it */
  ck_assert_ptr_eq(fs_wake_door_enter(p.c, &in2), d); /* a second waiter shares it */
  ck_assert_int_eq(p.c->wake_fd, efd);
  uint64_t one = 1;
  ck_assert_int_eq(write(efd, &one, sizeof one), (ssize_t)sizeof one);
  fs_wake_door_leave(p.c);
  ck_assert_int_eq(p.c->wake_fd, efd);
  fs_wake_door_leave(p.c);
  ck_assert_int_eq(p.c->wake_fd, -1); /* idle: no descriptor */
  char path[64], link[64] = "";
  snprintf(path, sizeof path, "/proc/self/fd/%d", efd);
  ck_assert_int_gt(readlink(path, link, sizeof link - 1), 0);
  ck_assert_str_eq(link, "anon_inode:[eventfd]"); /* given back, still open */
  /* The pool's next lease is the same eventfd, for another connection. */
  ck_assert_int_eq(fs_door_slot_get(d, q.c, &slot), 0);
  fs_door_get(d);
  q.c->door = d;
  q.c->door_slot = slot;
  ck_assert_ptr_eq(fs_wake_door_enter(q.c, &in1), d);
  ck_assert_int_eq(q.c->wake_fd, efd);
  /* Made its own (rdma after a door): it stays past the last leave. */
  ck_assert_int_eq(fs_wake_get(q.c), 0);
  ck_assert_int_eq(fs_wake_fd_own(q.c), efd);
  fs_wake_door_leave(q.c);
  ck_assert_int_eq(q.c->wake_fd, efd);
  /* Released, it goes back to the pool, not to close(): a waker that
   * read it as a lease may write it yet. */
  ck_assert(!fs_wake_conn_release(q.c));
  ck_assert_int_eq(q.c->wake_fd, -1);
  ck_assert_int_gt(readlink(path, link, sizeof link - 1), 0);
  /* Without a door there is nothing to enter. */
  struct pend r;
  pend_new(&r);
  ck_assert_ptr_null(fs_wake_door_enter(r.c, &in1));
  ck_assert(!in1);
  /* The pool's eventfd again, for a connection with a door. */
  ck_assert_ptr_eq(fs_wake_door_enter(p.c, &in1), d);
  ck_assert_int_eq(p.c->wake_fd, efd);
  fs_wake_door_leave(p.c);
}
END_TEST

/* The application's count (a connection's fd number stands for it) and
 * the library's own descriptors stay within 3/4 of the soft limit
 * together: a blocking server's 100 upgraded connections under ulimit -n
 * 140 held two eventfds each, and its accept() failed with EMFILE. */
START_TEST(t_fd_budget_counts_the_library)
{
  struct rlimit rl = { 200, 200 };
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
  ck_assert(fs_wake_fd_budget_ok(100));
  ck_assert(!fs_wake_fd_budget_ok(150)); /* 3/4 of the limit */
  for (int fd = 1000; fd < 1060; fd++) /* 60 of ours: 100 + 60 is past 150 */
    fs_fdreg_set(fd, true);
  ck_assert(!fs_wake_fd_budget_ok(100));
  ck_assert(!fs_fdreg_budget_ok(100, 1));
  ck_assert(fs_wake_fd_budget_ok(50)); /* an application with fewer fds */
  for (int fd = 1000; fd < 1060; fd++)
    fs_fdreg_set(fd, false);
  ck_assert(fs_wake_fd_budget_ok(100));
  fs_fdreg_set(1000, true); /* twice: counted once */
  fs_fdreg_set(1000, true);
  fs_fdreg_set(1000, false);
  ck_assert(fs_wake_fd_budget_ok(100));
  fs_fdreg_set(1000, false); /* not set: nothing to take back */
  for (int fd = 1000; fd < 1040; fd++)
    fs_fdreg_set(fd, true);
  ck_assert(fs_fdreg_budget_ok(100, 1) != fs_fdreg_budget_ok(100, 20)); /* the need counts */
  for (int fd = 1000; fd < 1040; fd++)
    fs_fdreg_set(fd, false);
}
END_TEST

/* The wake fd sits high with the library's other descriptors: at the
 * lowest free number it took the one the application's next socket()
 * expected (wrk, which sizes its tables by its own count, saw "connect"
 * errors once its connections upgraded at connect). */
START_TEST(t_wake_fd_leaves_the_low_numbers)
{
  struct pend p;
  pend_new(&p);
  int next = dup(0);
  ck_assert_int_ge(next, 0);
  close(next);
  ck_assert_int_eq(fs_wake_get(p.c), 0);
  ck_assert_int_gt(p.c->wake_fd, next);
  int again = dup(0);
  ck_assert_int_eq(again, next); /* still free: the application's */
  close(again);
}
END_TEST

START_TEST(t_attach_at_once_without_sleepers)
{
  struct pend p;
  pend_new(&p);
  ck_assert_int_eq(pend_attach(&p), 0);
  ck_assert_uint_eq(p.a->me->attached, 1);
  ck_assert_uint_eq(p.c->attach_held, 0);
  /* A sleeper now finds the channel instead of sleeping blind. */
  ck_assert(!fs_wake_blind_enter(p.c));
  ck_assert_uint_eq(p.c->blind_rx, 0);
}
END_TEST

static void *blocking_read(void *arg)
{
  struct pend *p = arg;
  char b[8];
  struct iovec v = { b, sizeof b };
  struct fs_io io = { .op = FS_IO_READ, .iov = &v, .iovcnt = 1 };
  return (void *)(intptr_t)fs_sock_recv(p->c, p->sv[0], &io);
}

START_TEST(t_attach_waits_for_blocked_reader)
{
  struct pend p;
  pend_new(&p);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, blocking_read, &p), 0);
  wait_blind(p.c, 1); /* asleep in the kernel's read, no wake fd to watch */
  ck_assert_int_eq(pend_attach(&p), 0);
  /* The peer must not move its tx onto the ring: the reader would not see it. */
  ck_assert_uint_eq(p.a->me->attached, 0);
  ck_assert(!peer_woken(&p));
  ck_assert_int_eq(write(p.sv[1], "x", 1), 1); /* the peer, still on TCP */
  void *r;
  ck_assert_int_eq(pthread_join(t, &r), 0);
  ck_assert_int_eq((intptr_t)r, 1);
  /* The reader left: the flag is set, and the peer told. */
  ck_assert_uint_eq(p.a->me->attached, 1);
  ck_assert_uint_eq(p.c->blind_rx, 0);
  ck_assert(peer_woken(&p));
}
END_TEST

static void *blocking_poll(void *arg)
{
  struct pend *p = arg;
  struct pollfd f = { p->sv[0], POLLIN, 0 };
  struct timespec ts = { 10, 0 };
  int rc = fs_ready_poll(&f, 1, &ts, NULL);
  return (void *)(intptr_t)(rc == 1 && (f.revents & POLLIN) ? 1 : -1);
}

START_TEST(t_attach_waits_for_poll)
{
  struct pend p;
  pend_new(&p);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, blocking_poll, &p), 0);
  wait_blind(p.c, 1);
  ck_assert_int_eq(pend_attach(&p), 0);
  ck_assert_uint_eq(p.a->me->attached, 0);
  ck_assert_int_eq(write(p.sv[1], "x", 1), 1);
  void *r;
  ck_assert_int_eq(pthread_join(t, &r), 0);
  ck_assert_int_eq((intptr_t)r, 1);
  ck_assert_uint_eq(p.a->me->attached, 1);
  ck_assert_uint_eq(p.c->blind_rx, 0);
}
END_TEST

START_TEST(t_last_of_two_sets_it)
{
  struct pend p;
  pend_new(&p);
  ck_assert(fs_wake_blind_enter(p.c));
  ck_assert(fs_wake_blind_enter(p.c));
  ck_assert_int_eq(pend_attach(&p), 0);
  fs_wake_blind_leave(p.c);
  ck_assert_uint_eq(p.a->me->attached, 0);
  fs_wake_blind_leave(p.c);
  ck_assert_uint_eq(p.a->me->attached, 1);
  ck_assert_uint_eq(p.c->attach_held, 0);
}
END_TEST

/* An event loop's set takes a connection that may upgrade: no wake fd for
 * it then (most short connections never upgrade).  Made later, at the
 * rendezvous, while a thread sleeps in the set with no timeout: the set's
 * bell has that thread put it in the kernel set before it sleeps again. */
struct ewait {
  int epfd, n;
  struct epoll_event ev[4];
};

static void *epoll_waiter(void *arg)
{
  struct ewait *w = arg;
  w->n = fs_ready_epoll_wait(w->epfd, w->ev, 4, NULL, NULL);
  return NULL;
}

static bool in_kernel_set(int epfd, int fd)
{
  struct epoll_event ev = { .events = EPOLLIN };
  if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
    return false;
  }
  return errno == EEXIST;
}

START_TEST(t_epoll_set_hears_of_a_wake_fd_made_while_it_sleeps)
{
  struct pend p;
  pend_new(&p);
  struct ewait w = { epoll_create1(EPOLL_CLOEXEC), -2, { { 0 } } };
  ck_assert_int_ge(w.epfd, 0);
  struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 42 };
  ck_assert_int_eq(fs_ready_epoll_ctl(w.epfd, EPOLL_CTL_ADD, p.sv[0], &ev), 0);
  ck_assert_int_eq(p.c->wake_fd, -1); /* the ADD made none */
  struct fs_ep *ep = fs_ep_get(w.epfd, false);
  ck_assert_ptr_nonnull(ep);
  ck_assert_ptr_eq(p.c->ep_plain, ep); /* nor an entry: the application's registration */
  ck_assert_int_eq(ep->nents, 0);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, epoll_waiter, &w), 0);
  usleep(50000); /* into the kernel, no timeout */
  ck_assert_int_eq(pend_attach(&p), 0);
  ck_assert_int_ge(p.c->wake_fd, 0);
  /* A bound against a hang, not a timing: it is there at once. */
  int i = 0;
  while (i++ < 5000 && !in_kernel_set(w.epfd, p.c->wake_fd))
    usleep(1000);
  ck_assert(in_kernel_set(w.epfd, p.c->wake_fd));
  ck_assert_int_eq(__atomic_load_n(&w.n, __ATOMIC_ACQUIRE), -2); /* nothing to report yet */
  ck_assert_ptr_null(p.c->ep_plain); /* an entry now, which hears of the ring */
  ck_assert_int_eq(ep->nents, 1);
  ck_assert_int_eq(write(p.sv[1], "x", 1), 1);
  pthread_join(t, NULL);
  ck_assert_int_eq(w.n, 1);
  ck_assert_uint_eq(w.ev[0].data.u64, 42);
  fs_ready_epoll_close(w.epfd);
  close(w.epfd);
}
END_TEST

/* A plain registration whose fd is closed while a dup keeps the socket: the
 * kernel keeps it (and reports it, with the application's data), and it can
 * no longer be named by that fd, so it is made an entry first. */
START_TEST(t_plain_fd_closed_with_a_dup)
{
  struct pend p;
  pend_new(&p);
  int epfd = epoll_create1(EPOLL_CLOEXEC);
  ck_assert_int_ge(epfd, 0);
  struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 7 }, out[4];
  ck_assert_int_eq(fs_ready_epoll_ctl(epfd, EPOLL_CTL_ADD, p.sv[0], &ev), 0);
  struct fs_ep *ep = fs_ep_get(epfd, false);
  ck_assert_ptr_eq(p.c->ep_plain, ep);
  int d = dup(p.sv[0]);
  ck_assert_int_ge(d, 0);
  ck_assert_int_eq(fs_fdtab_install(d, p.c), 0);
  /* a second fd: a new registration of it would be an entry */
  int e2 = epoll_create1(EPOLL_CLOEXEC);
  ck_assert_int_ge(e2, 0);
  ck_assert_int_eq(fs_ready_epoll_ctl(e2, EPOLL_CTL_ADD, d, &ev), 0);
  ck_assert_int_eq(fs_ep_get(e2, false)->nents, 1);
  fs_ready_epoll_fd_closing(p.c, p.sv[0]); /* close(): before the kernel's */
  ck_assert_ptr_null(p.c->ep_plain);
  ck_assert_int_eq(ep->nents, 1);
  ck_assert_int_eq(close(p.sv[0]), 0);
  ck_assert_int_eq(write(p.sv[1], "y", 1), 1);
  struct timespec ts = { 5, 0 };
  ck_assert_int_eq(fs_ready_epoll_wait(epfd, out, 4, &ts, NULL), 1);
  ck_assert_uint_eq(out[0].data.u64, 7);
  fs_ready_epoll_close(e2);
  close(e2);
  fs_ready_epoll_close(epfd);
  close(epfd);
}
END_TEST

/* A connection that closes while queued on a set's bell leaves the queue
 * at once, as a plain registration and as an entry: queued by a rendezvous
 * after the application's last epoll_wait, it kept its wake eventfd (and
 * itself) until the set's next pass, which a stopped event loop never made
 * (nbconnect at upgrade=0: one eventfd left, about one run in seventy). */
static void closed_leaves_queue(uint32_t events, uint32_t entry_refs)
{
  struct pend p;
  pend_new(&p);
  int epfd = epoll_create1(EPOLL_CLOEXEC);
  ck_assert_int_ge(epfd, 0);
  struct epoll_event ev = { .events = events, .data.u64 = 7 };
  ck_assert_int_eq(fs_ready_epoll_ctl(epfd, EPOLL_CTL_ADD, p.sv[0], &ev), 0);
  struct fs_ep *ep = fs_ep_get(epfd, false);
  ck_assert_int_ge(ep->bell, 0);
  uint32_t refs = __atomic_load_n(&p.c->refs, __ATOMIC_ACQUIRE);
  ck_assert_int_eq(fs_wake_get(p.c), 0); /* the rendezvous's: queued on the bell */
  ck_assert_int_eq(ep->npend, 1);
  ck_assert_uint_eq(__atomic_load_n(&p.c->refs, __ATOMIC_ACQUIRE), refs + 1);
  fs_ready_epoll_forget_conn(p.c); /* the last close's, before the kernel's */
  ck_assert_int_eq(ep->npend, 0);
  /* the queue's reference gone, and the entry's if it was one */
  ck_assert_uint_eq(__atomic_load_n(&p.c->refs, __ATOMIC_ACQUIRE), refs - entry_refs);
  fs_ready_epoll_close(epfd);
  close(epfd);
}

START_TEST(t_closed_connection_leaves_the_bell_queue)
{
  closed_leaves_queue(EPOLLIN, 0);                /* a plain registration */
  closed_leaves_queue(EPOLLIN | EPOLLONESHOT, 1); /* an entry */
}
END_TEST

/* The 20 ms safety net (sliced sleeps) holds while an entry is or may be
 * on a fabric, not for ever: an idle nginx worker woke 50 times a second
 * once any connection had been in its set. */
START_TEST(t_epoll_safety_net_only_while_needed)
{
  struct pend tcp, fab;
  pend_new(&tcp);
  pend_new(&fab);
  int epfd = epoll_create1(EPOLL_CLOEXEC);
  ck_assert_int_ge(epfd, 0);
  struct epoll_event ev = { .events = EPOLLIN };
  ck_assert_int_eq(fs_ready_epoll_ctl(epfd, EPOLL_CTL_ADD, tcp.sv[0], &ev), 0);
  struct fs_ep *ep = fs_ep_get(epfd, false);
  ck_assert_ptr_nonnull(ep);
  ck_assert(!fs_ep_fabric(ep)); /* on TCP, no wake fd: sleeps as asked */
  ck_assert_int_eq(pend_attach(&fab), 0);
  ck_assert_int_eq(fs_ready_epoll_ctl(epfd, EPOLL_CTL_ADD, fab.sv[0], &ev), 0);
  ck_assert(fs_ep_fabric(ep));
  ck_assert_int_eq(fs_ready_epoll_ctl(epfd, EPOLL_CTL_DEL, fab.sv[0], NULL), 0);
  ck_assert(fs_ep_fabric(ep)); /* parked: its wake fd is still in the kernel set */
  fs_ready_epoll_forget_conn(fab.c); /* its last close */
  ck_assert(!fs_ep_fabric(ep));
  fs_ready_epoll_close(epfd);
  close(epfd);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("wake");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, t_made_on_first_need);
  tcase_add_test(tc, t_leased_while_waited_on);
  tcase_add_test(tc, t_wake_fd_leaves_the_low_numbers);
  tcase_add_test(tc, t_fd_budget_counts_the_library);
  tcase_add_test(tc, t_attach_at_once_without_sleepers);
  tcase_add_test(tc, t_attach_waits_for_blocked_reader);
  tcase_add_test(tc, t_attach_waits_for_poll);
  tcase_add_test(tc, t_last_of_two_sets_it);
  tcase_add_test(tc, t_epoll_set_hears_of_a_wake_fd_made_while_it_sleeps);
  tcase_add_test(tc, t_plain_fd_closed_with_a_dup);
  tcase_add_test(tc, t_closed_connection_leaves_the_bell_queue);
  tcase_add_test(tc, t_epoll_safety_net_only_while_needed);
  suite_add_tcase(s, tc);
  return run_suite(s, true);
}
