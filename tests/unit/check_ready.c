/* Unit tests for engine/ready: a poll's interest in a connection's rings
 * (the flags that make the peer write our wake eventfd) ends with the call,
 * unless another waiter of this process may own it; a look that wants
 * POLLOUT moves tx onto the ring once the peer attached; an edge the
 * kernel gave once is reported even when it found the result full; a
 * connection closed while its rendezvous ran is offered no door; an epoll
 * set's door is its bell. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <poll.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/lock.h"
#include "engine/conn.h"
#include "engine/cutover.h"
#include "engine/door.h"
#include "engine/epoll.h"
#include "engine/fdtab.h"
#include "engine/lend.h"
#include "engine/ready.h"
#include "fabric/chan.h"
#include "fabric/shm/shm.h"
#include "tests/unit/check_run.h"
#include "tests/unit/pair.h"

/* Whether the peer's publish wrote our wake fd (read, so it starts over). */
static bool woken(struct pair *p)
{
  uint64_t v;
  return read(p->mine, &v, sizeof v) == (ssize_t)sizeof v;
}

static int poll_ms(struct pair *p, short events, int ms)
{
  struct pollfd f = { p->sv[0], events, 0 };
  struct timespec ts = { 0, ms * 1000000L };
  return fs_ready_poll(&f, 1, &ts, NULL);
}

START_TEST(t_poll_interest_ends_with_the_call)
{
  struct pair p;
  pair_new(&p);
  ck_assert_int_eq(poll_ms(&p, POLLIN, 5), 0); /* nothing came: it armed and slept */
  ck_assert_uint_eq(p.a->rx.ctl->want_data, 0);
  ck_assert_uint_eq(p.c->pollers, 0);
  /* The peer sends while we are not waiting: no wake-up for it to write. */
  fs_chan_shared_publish(p.b);
  ck_assert(!woken(&p));
}
END_TEST

START_TEST(t_poll_wakes_while_it_waits)
{
  struct pair p;
  pair_new(&p);
  /* Armed during the call: the flag is what makes the peer wake it. */
  __atomic_store_n(&p.a->rx.ctl->want_data, 1, __ATOMIC_RELAXED);
  fs_chan_shared_publish(p.b);
  ck_assert(woken(&p));
  ck_assert_int_eq(poll_ms(&p, POLLIN, 1), 0);
  ck_assert(!woken(&p));
}
END_TEST

START_TEST(t_other_waiters_keep_it)
{
  struct pair p;
  pair_new(&p);
  /* In an epoll set: that set's entry may be the one armed. */
  void *ent = &p;
  p.c->ep_ents = ent;
  __atomic_store_n(&p.a->rx.ctl->want_data, 1, __ATOMIC_RELAXED);
  ck_assert_int_eq(poll_ms(&p, POLLIN, 1), 0);
  ck_assert_uint_eq(p.a->rx.ctl->want_data, 1);
  p.c->ep_ents = NULL;
  /* A blocking receive asleep on it. */
  p.c->rx_sleeping = 1;
  ck_assert_int_eq(poll_ms(&p, POLLIN, 1), 0);
  ck_assert_uint_eq(p.a->rx.ctl->want_data, 1);
  p.c->rx_sleeping = 0;
  /* Another poll in the middle of its call. */
  p.c->pollers = 1;
  ck_assert_int_eq(poll_ms(&p, POLLIN, 1), 0);
  ck_assert_uint_eq(p.a->rx.ctl->want_data, 1);
  ck_assert_uint_eq(p.c->pollers, 1);
  p.c->pollers = 0;
  ck_assert_int_eq(poll_ms(&p, POLLIN, 1), 0);
  ck_assert_uint_eq(p.a->rx.ctl->want_data, 0);
}
END_TEST

START_TEST(t_ready_data_found)
{
  struct pair p;
  pair_new(&p);
  struct iovec v = { "hello", 5 };
  ck_assert_uint_eq(fs_ring_put_data(&p.b->tx, &v, 1, 0, 5), 5);
  fs_chan_shared_publish(p.b);
  struct pollfd f = { p.sv[0], POLLIN, 0 };
  ck_assert_int_eq(fs_ready_poll(&f, 1, NULL, NULL), 1);
  ck_assert(f.revents & POLLIN);
  ck_assert_uint_eq(p.c->pollers, 0);
}
END_TEST

static int epoll_max(int epfd, struct epoll_event *ev, int max, int ms)
{
  struct timespec ts = { 0, ms * 1000000L };
  return fs_ready_epoll_wait(epfd, ev, max, &ts, NULL);
}

static int epoll_ms(int epfd, struct epoll_event *ev, int ms)
{
  return epoll_max(epfd, ev, 4, ms);
}

/* A fresh epoll set with the pair's fd in it for EPOLLIN, tagged tag. */
static int epoll_of(struct pair *p, uint64_t tag)
{
  int epfd = epoll_create1(EPOLL_CLOEXEC);
  ck_assert_int_ge(epfd, 0);
  struct epoll_event ev = { .events = EPOLLIN, .data.u64 = tag };
  ck_assert_int_eq(fs_ready_epoll_ctl(epfd, EPOLL_CTL_ADD, p->sv[0], &ev), 0);
  return epfd;
}

START_TEST(t_epoll_entry_stays_armed)
{
  /* Unlike a poll, an epoll entry stays armed from one sleep to the next
   * (clearing it after each sleep was tried: the loop then spun and
   * re-armed every entry, and nginx ran slower).  A poll of ours on the
   * same connection meanwhile leaves that interest alone. */
  struct pair p;
  pair_new(&p);
  int epfd = epoll_of(&p, 77);
  struct epoll_event out[4];
  ck_assert_int_eq(epoll_ms(epfd, out, 5), 0); /* it armed, slept, and woke by the clock */
  ck_assert_uint_eq(p.a->rx.ctl->want_data, 1);
  ck_assert_int_eq(poll_ms(&p, POLLIN, 1), 0);
  ck_assert_uint_eq(p.a->rx.ctl->want_data, 1);
  /* The peer's next message wakes it, and the next call reports it. */
  struct iovec v = { "x", 1 };
  ck_assert_uint_eq(fs_ring_put_data(&p.b->tx, &v, 1, 0, 1), 1);
  fs_chan_shared_publish(p.b);
  ck_assert_uint_eq(p.a->rx.ctl->want_data, 0);
  ck_assert_int_eq(epoll_ms(epfd, out, 1000), 1);
  ck_assert_uint_eq(out[0].data.u64, 77);
  ck_assert(out[0].events & EPOLLIN);
  close(epfd);
}
END_TEST

/* FABSOCK_SPIN_US (the connection's policy) bounds the spin of an epoll
 * set as it does a blocking receive's: 0 makes none (before, the set spun
 * its adaptive bound whatever the policy said); busy spins even where the
 * machine looks crowded.  A spin of 64 looks or more stores the time one
 * look takes in ns_look: 1 before the call stays 1 only with no spin. */
START_TEST(t_epoll_spin_follows_policy)
{
  struct pair p;
  pair_new(&p);
  int epfd = epoll_of(&p, 5);
  struct epoll_event out[4];
  struct fs_ep *ep = fs_ep_get(epfd, false);
  ck_assert_ptr_nonnull(ep);
  p.c->policy.spin_us = 0;
  p.c->policy.busy_poll = false;
  __atomic_store_n(&ep->ns_look, 1, __ATOMIC_RELAXED);
  ck_assert_int_eq(epoll_ms(epfd, out, 5), 0);
  ck_assert_uint_eq(__atomic_load_n(&ep->ns_look, __ATOMIC_RELAXED), 1);
  p.c->policy.busy_poll = true;
  ck_assert_int_eq(epoll_ms(epfd, out, 5), 0);
  ck_assert_uint_gt(__atomic_load_n(&ep->ns_look, __ATOMIC_RELAXED), 1);
  close(epfd);
}
END_TEST

/* A kernel, seccomp profile or valgrind without epoll_pwait2 (ENOSYS):
 * the wait falls back to epoll_pwait, and errno is left alone.  Before,
 * every epoll_wait of a tracked set failed, and nginx spun for ever. */
static int no_pwait2_child(void)
{
  struct sock_filter f[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_epoll_pwait2, 0, 1),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = { sizeof f / sizeof f[0], f };
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
    return 10;
  struct timespec z = { 0, 0 };
  int probe = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event out[4];
  if (syscall(__NR_epoll_pwait2, probe, out, 4, &z, NULL, 0) != -1 || errno != ENOSYS)
    return 11;
  struct pair p;
  pair_new(&p);
  int epfd = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 77 };
  if (fs_ready_epoll_ctl(epfd, EPOLL_CTL_ADD, p.sv[0], &ev) != 0)
    return 12;
  errno = 4321;
  if (epoll_ms(epfd, out, 5) != 0 || errno != 4321)
    return 13; /* asleep 5 ms, woken by the clock */
  struct iovec v = { "x", 1 };
  if (fs_ring_put_data(&p.b->tx, &v, 1, 0, 1) != 1)
    return 14;
  fs_chan_shared_publish(p.b);
  if (epoll_ms(epfd, out, 1000) != 1 || out[0].data.u64 != 77 || !(out[0].events & EPOLLIN) || errno != 4321)
    return 15;
  return 0;
}

START_TEST(t_epoll_without_epoll_pwait2)
{
  pid_t pid = fork();
  if (pid == 0)
    _exit(no_pwait2_child());
  ck_child_exits_ok(pid);
}
END_TEST

START_TEST(t_listener_needs_no_setup)
{
  /* Entries waiting for a wake fd are looked at in every epoll_wait, by a
   * walk over all entries: a listener, which never gets one, must not wait
   * (it made nginx's workers walk every connection at every call).  Nor
   * does a socket without a channel, which the set holds plain (the
   * application's registration, no entry), unless a flag makes it an entry. */
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ufd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(lfd, 0);
  ck_assert_int_ge(ufd, 0);
  struct fs_conn *l = fs_conn_new(lfd, AF_INET), *u = fs_conn_new(ufd, AF_INET);
  ck_assert_ptr_nonnull(l);
  ck_assert_ptr_nonnull(u);
  l->state = FS_STATE_LISTEN;
  ck_assert_int_eq(fs_fdtab_install(lfd, l), 0);
  ck_assert_int_eq(fs_fdtab_install(ufd, u), 0);
  int epfd = epoll_create1(EPOLL_CLOEXEC);
  ck_assert_int_ge(epfd, 0);
  struct epoll_event ev = { .events = EPOLLIN | EPOLLEXCLUSIVE, .data.u64 = 1 }, out[4];
  ck_assert_int_eq(fs_ready_epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &ev), 0);
  struct fs_ep *ep = fs_ep_get(epfd, false);
  ck_assert_ptr_nonnull(ep);
  ck_assert_int_eq(ep->nsetup, 0);
  ck_assert_int_eq(ep->nents, 0);       /* passed through, even EXCLUSIVE */
  ck_assert_ptr_null(l->ep_plain);     /* and remembered nowhere: it never upgrades */
  ev.events = EPOLLIN;
  ck_assert_int_eq(fs_ready_epoll_ctl(epfd, EPOLL_CTL_ADD, ufd, &ev), 0);
  ck_assert_int_eq(ep->nsetup, 0);
  ck_assert_int_eq(ep->nents, 0);
  ck_assert_ptr_eq(u->ep_plain, ep);
  ck_assert_int_eq(fs_ready_epoll_ctl(epfd, EPOLL_CTL_ADD, ufd, &ev), -EEXIST);
  /* ONESHOT makes it an entry; added before listen(), it waits, until a
   * call sees it listening. */
  ev.events = EPOLLIN | EPOLLONESHOT;
  ck_assert_int_eq(fs_ready_epoll_ctl(epfd, EPOLL_CTL_MOD, ufd, &ev), 0);
  ck_assert_ptr_null(u->ep_plain);
  ck_assert_int_eq(ep->nents, 1);
  ck_assert_int_eq(ep->nsetup, 1);
  u->state = FS_STATE_LISTEN;
  ck_assert_int_ge(epoll_ms(epfd, out, 0), 0); /* (unconnected sockets report HUP) */
  ck_assert_int_eq(ep->nsetup, 0);
  close(epfd);
}
END_TEST

/* A fake progress for `a` that, at its Nth call, makes the peer write a
 * message into our rx ring: bytes that land in the middle of a look. */
static struct fs_chan *inject_peer;
static int inject_left;

static void inject_progress(struct fs_chan *ch)
{
  (void)ch;
  if (inject_left > 0 && --inject_left == 0) {
    struct iovec v = { "x", 1 };
    ck_assert_uint_eq(fs_ring_put_data(&inject_peer->tx, &v, 1, 0, 1), 1);
  }
}

START_TEST(t_epollet_bytes_landing_during_a_look)
{
  /* EPOLLET: bytes that land while an entry is looked at are reported by
   * that look or by a later one, wherever in the look they land.  The ring
   * positions were taken after the look: bytes landing between the two
   * counted as reported and were never reported (nginx waited forever for
   * a keep-alive request already in its ring).  Landing at each of the
   * look's progress calls in turn finds the window. */
  int late = 0;
  for (int at = 1; at <= 32; at++) {
    struct pair p;
    pair_new(&p);
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    ck_assert_int_ge(epfd, 0);
    struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLET, .data.u64 = 5 }, out[4];
    ck_assert_int_eq(fs_ready_epoll_ctl(epfd, EPOLL_CTL_ADD, p.sv[0], &ev), 0);
    ck_assert_int_eq(epoll_ms(epfd, out, 0), 1); /* the first edge: writable */
    ck_assert(!(out[0].events & EPOLLIN));
    /* An edge to come: the peer reads what we sent (our tx head moves). */
    char buf[64];
    struct iovec w = { buf, 64 }, r = { buf, sizeof buf };
    ck_assert_uint_eq(fs_ring_put_data(&p.a->tx, &w, 1, 0, 64), 64);
    ck_assert_int_eq(fs_ring_get_data(&p.b->rx, &r, 1, 0, sizeof buf, false), 64);
    static struct fs_chan_ops fake;
    fake = *p.a->ops;
    fake.progress = inject_progress;
    p.a->ops = &fake;
    inject_peer = p.b;
    inject_left = at;
    int n = epoll_ms(epfd, out, 0);
    bool in = n == 1 && (out[0].events & EPOLLIN);
    bool landed = inject_left == 0;
    inject_left = 0;
    if (!landed) { /* the look made fewer calls: every one was tried */
      close(epfd);
      break;
    }
    if (!in) { /* landed after the look's rx check: a later look reports it */
      late++;
      n = epoll_ms(epfd, out, 100);
      ck_assert_msg(n == 1 && (out[0].events & EPOLLIN), "bytes landing at progress call %d never reported", at);
    }
    close(epfd);
  }
  ck_assert_int_gt(late, 0); /* the window was there to find */
}
END_TEST

/* A connection of ours in epfd (events, tag) whose peer rings the set's
 * door, as the rendezvous offers it, instead of a wake fd of its own. */
static void pair_in_door(struct pair *p, int epfd, uint32_t events, uint64_t tag)
{
  pair_new(p);
  struct fs_chan *ch = p->c->chan;
  p->c->chan = NULL;
  p->c->wake_fd = -1;
  p->c->dir = FS_DIR_ACCEPT;
  p->c->state = FS_STATE_TCP;
  struct epoll_event ev = { .events = events, .data.u64 = tag };
  ck_assert_int_eq(fs_ready_epoll_ctl(epfd, EPOLL_CTL_ADD, p->sv[0], &ev), 0);
  int efd, memfd;
  uint32_t slot;
  ck_assert_int_eq(fs_ready_door_offer(p->c, &efd, &memfd, &slot), 0);
  p->c->chan = ch;
}

/* A connection on TCP that may upgrade (no channel, no wake fd yet), in a
 * fresh epoll set for EPOLLIN, tagged tag: the set is returned. */
static int set_with_tcp_conn(struct pair *p, uint64_t tag)
{
  pair_new(p);
  p->c->chan = NULL;
  p->c->wake_fd = -1;
  p->c->dir = FS_DIR_CONNECT;
  p->c->state = FS_STATE_TCP;
  return epoll_of(p, tag);
}

START_TEST(t_closed_during_its_rendezvous_makes_nothing)
{
  /* The application closed the connection while its rendezvous ran (an
   * echo over before the agent got to it): the rendezvous asks for a door
   * or a wake fd all the same.  The set's door, made for a connection
   * already gone, stayed for the set's life: nbconnect counted two
   * descriptors more after 20 connections that never upgraded (one run in
   * a few hundred at an upgrade point of 3853 bytes). */
  struct pair p;
  int epfd = set_with_tcp_conn(&p, 1);
  struct fs_conn *c = fs_fdtab_take(p.sv[0]); /* the application's close, as the engine sees it first */
  ck_assert_ptr_eq(c, p.c);
  ck_assert_uint_eq(c->nfds, 0);
  int efd = -1, memfd = -1;
  uint32_t slot;
  ck_assert_int_eq(fs_lend_host.bell(&c->link, &efd, &memfd, &slot), -1);
  ck_assert_int_eq(fs_lend_host.wake(&c->link), FS_REASON_ERROR);
  ck_assert_int_eq(c->wake_fd, -1);
  ck_assert_ptr_null(c->door);
  ck_assert(!fs_door_live());
  /* Still open, the same connection gets its set's door. */
  ck_assert_int_eq(fs_fdtab_install(p.sv[0], c), 0);
  fs_conn_put(c); /* take's reference; the table holds its own again */
  ck_assert_int_eq(fs_lend_host.bell(&c->link, &efd, &memfd, &slot), 0);
  ck_assert_ptr_nonnull(c->door);
  ck_assert(fs_door_live());
  close(epfd);
}
END_TEST

/* An epoll set's door is its bell's eventfd: a set whose connections
 * upgraded held two eventfds, its bell (for wake fds to register) and its
 * door (for its peers' rings).  A ring comes up as the bell and its pass
 * drains the door; the set's close leaves the eventfd to the door, which
 * its connection still holds, and the door closes it when it goes. */
START_TEST(t_set_door_is_its_bell)
{
  struct pair p;
  int epfd = set_with_tcp_conn(&p, 5);
  struct fs_ep *ep = fs_ep_get(epfd, false);
  ck_assert_ptr_nonnull(ep);
  int bell = ep->bell;
  ck_assert_int_ge(bell, 0); /* made when the set took a connection that may upgrade */
  int efd = -1, memfd = -1;
  uint32_t slot;
  ck_assert_int_eq(fs_lend_host.bell(&p.c->link, &efd, &memfd, &slot), 0);
  ck_assert_int_eq(efd, bell);
  struct fs_door *d = p.c->door;
  ck_assert_ptr_nonnull(d);
  ck_assert_int_eq(d->efd, bell);
  /* The peer rings: the set's next wait drains the door. */
  fs_bell_ring(d->page, efd, slot);
  ck_assert_uint_eq(d->page->rung, 1);
  ck_assert_uint_ne(d->page->bits[slot / 64], 0);
  struct epoll_event out[4];
  ck_assert_int_eq(epoll_ms(epfd, out, 20), 0); /* nothing to read on it */
  ck_assert_uint_eq(d->page->rung, 0);
  ck_assert_uint_eq(d->page->bits[slot / 64], 0);
  /* The set goes; the eventfd stays with the door its connection holds. */
  fs_ready_epoll_close(epfd);
  close(epfd);
  ck_assert_int_ge(fcntl(bell, F_GETFD), 0);
  fs_bell_ring(d->page, efd, slot); /* a peer still ringing writes a live eventfd */
  fs_ready_door_release(p.c);
  ck_assert_ptr_null(p.c->door);
  ck_assert_int_eq(fcntl(bell, F_GETFD), -1); /* the door went, and the eventfd with it */
  ck_assert(!fs_door_live());
}
END_TEST

START_TEST(t_epollet_kernel_event_past_a_full_result)
{
  /* One kernel event of a door stands for every connection that rang it,
   * so a batch can fill the result before its last events.  An entry whose
   * TCP bytes came later in that batch went to the next call without the
   * kernel's word, and its registration, edge-triggered as the application
   * asked, never said it again: in a burst of 1000 upgrading connections a
   * few kept their bytes (or their FIN) in the socket for ever (t_manyconn,
   * echosrv -e, about one run in two). */
  int epfd = epoll_create1(EPOLL_CLOEXEC);
  ck_assert_int_ge(epfd, 0);
  struct pair a1, a2, b;
  pair_in_door(&a1, epfd, EPOLLIN | EPOLLET, 1);
  pair_in_door(&a2, epfd, EPOLLIN | EPOLLET, 2);
  pair_new(&b);
  b.c->rx_flow = FS_FLOW_TCP; /* its peer's bytes still come by TCP */
  struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.u64 = 3 }, out[4];
  ck_assert_int_eq(fs_ready_epoll_ctl(epfd, EPOLL_CTL_ADD, b.sv[0], &ev), 0);
  /* Settle: every entry looked at, armed by a sleep, none left to look at
   * again (a sweep of the safety net may queue them all: sleep again). */
  struct fs_ep *ep = fs_ep_get(epfd, false);
  ck_assert_ptr_nonnull(ep);
  bool settled = false;
  for (int i = 0; i < 100 && !settled; i++) {
    while (epoll_max(epfd, out, 4, 0) > 0)
      ;
    ck_assert_int_eq(epoll_max(epfd, out, 4, 2), 0);
    settled = !ep->recheck && !ep->idle && !ep->npend;
  }
  ck_assert(settled);
  ck_assert(a1.c->door && a1.c->door == a2.c->door);
  /* a1's and a2's peers write their rings and ring the door; then b's TCP
   * bytes arrive: one batch of two kernel events, door first. */
  struct iovec v = { "x", 1 };
  ck_assert_uint_eq(fs_ring_put_data(&a1.b->tx, &v, 1, 0, 1), 1);
  ck_assert_uint_eq(fs_ring_put_data(&a2.b->tx, &v, 1, 0, 1), 1);
  fs_bell_ring(a1.c->door->page, a1.c->door->efd, a1.c->door_slot);
  fs_bell_ring(a2.c->door->page, a2.c->door->efd, a2.c->door_slot);
  ck_assert_int_eq(write(b.sv[1], "y", 1), 1);
  ck_assert_int_eq(epoll_max(epfd, out, 2, 0), 2);
  ck_assert(out[0].data.u64 != 3 && out[1].data.u64 != 3);
  int n = epoll_max(epfd, out, 4, 100);
  ck_assert_msg(n == 1 && out[0].data.u64 == 3 && (out[0].events & EPOLLIN),
                "b's TCP bytes never reported (%d events)", n);
  ck_assert_int_eq(epoll_max(epfd, out, 4, 5), 0); /* once */
  close(epfd);
}
END_TEST

/* tx still on TCP (123 bytes sent there), the peer attached: a look that
 * wants POLLOUT writes the SWITCH and answers from the ring, unless a send
 * holds the tx lock, the peer has not attached, or only POLLIN is asked
 * (nginx waited for the kernel to drain a third of its socket buffer). */
static bool switched(struct pair *p, uint64_t at)
{
  uint64_t n = 0;
  return p->c->tx_flow == FS_FLOW_FABRIC && fs_cutover_switch_head(p->b, &n) == 1 && n == at;
}

START_TEST(t_look_switches_tx)
{
  struct pair p;
  pair_new(&p);
  p.c->tx_flow = FS_FLOW_TCP;
  p.c->tcp_tx = 123;
  struct pollfd f = { p.sv[0], POLLOUT, 0 };
  ck_assert_int_eq(fs_ready_poll(&f, 1, &(struct timespec){ 0, 0 }, NULL), 1); /* the kernel's room */
  ck_assert_int_eq(p.c->tx_flow, FS_FLOW_TCP);                                /* not attached yet */
  __atomic_store_n(&p.a->peer->attached, 1, __ATOMIC_RELEASE);
  f.events = POLLIN;
  ck_assert_int_eq(fs_ready_poll(&f, 1, &(struct timespec){ 0, 0 }, NULL), 0);
  ck_assert_int_eq(p.c->tx_flow, FS_FLOW_TCP);
  fs_lock(&p.c->txlock); /* a send inside: it switches itself */
  f.events = POLLOUT;
  ck_assert_int_eq(fs_ready_poll(&f, 1, &(struct timespec){ 0, 0 }, NULL), 1);
  ck_assert_int_eq(p.c->tx_flow, FS_FLOW_TCP);
  fs_unlock(&p.c->txlock);
  ck_assert_int_eq(fs_ready_poll(&f, 1, &(struct timespec){ 0, 0 }, NULL), 1);
  ck_assert(f.revents & POLLOUT);
  ck_assert(switched(&p, 123));
}
END_TEST

START_TEST(t_epollet_look_switches_tx)
{
  struct pair p;
  pair_new(&p);
  p.c->tx_flow = FS_FLOW_TCP;
  p.c->tcp_tx = 77;
  __atomic_store_n(&p.a->peer->attached, 1, __ATOMIC_RELEASE);
  int epfd = epoll_create1(EPOLL_CLOEXEC);
  ck_assert_int_ge(epfd, 0);
  struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLET, .data.u64 = 5 }, out[4];
  ck_assert_int_eq(fs_ready_epoll_ctl(epfd, EPOLL_CTL_ADD, p.sv[0], &ev), 0);
  ck_assert_int_eq(epoll_ms(epfd, out, 0), 1);
  ck_assert(out[0].events & EPOLLOUT);
  ck_assert(switched(&p, 77));
  close(epfd);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("ready");
  TCase *tc = tcase_create("interest");
  tcase_add_test(tc, t_poll_interest_ends_with_the_call);
  tcase_add_test(tc, t_poll_wakes_while_it_waits);
  tcase_add_test(tc, t_other_waiters_keep_it);
  tcase_add_test(tc, t_ready_data_found);
  tcase_add_test(tc, t_epoll_entry_stays_armed);
  tcase_add_test(tc, t_epoll_spin_follows_policy);
  tcase_add_test(tc, t_listener_needs_no_setup);
  tcase_add_test(tc, t_epoll_without_epoll_pwait2);
  tcase_add_test(tc, t_epollet_bytes_landing_during_a_look);
  tcase_add_test(tc, t_look_switches_tx);
  tcase_add_test(tc, t_epollet_look_switches_tx);
  tcase_add_test(tc, t_epollet_kernel_event_past_a_full_result);
  tcase_add_test(tc, t_closed_during_its_rendezvous_makes_nothing);
  tcase_add_test(tc, t_set_door_is_its_bell);
  suite_add_tcase(s, tc);
  return run_suite(s, true);
}
