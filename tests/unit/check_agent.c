/* Unit tests for engine/agent's delayed upgrades: a connection past the
 * byte threshold is upgraded after FS_AGENT_UPGRADE_DELAY_NS, but the
 * agent is not woken for it then; the connection's next I/O after that
 * time wakes it (a nudge), and a connection that closed before costs no
 * wake of its own (the agent reaps it at a lazy deadline, 20 ms on).
 * And its watches: a handful polled, more in an epoll set made for them
 * and closed once they are few again. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/clock.h"
#include "engine/agent.h"
#include "engine/conn.h"
#include "engine/fdtab.h"
#include "engine/io.h"
#include "engine/sock.h"
#include "engine/sockio.h"
#include "tests/unit/check_run.h"

/* A connecting end established on TCP that may upgrade past 4 KiB, with
 * a fabric no build has: its upgrade, once run, fails at once
 * (remote-host) and touches nothing. */
static struct fs_conn *conn_new(int sv[2])
{
  ck_assert(fs_sock_enabled()); /* the engine set up: fs_host */
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  struct fs_conn *c = fs_conn_new(sv[0], AF_INET);
  ck_assert_ptr_nonnull(c);
  c->state = FS_STATE_TCP;
  c->dir = FS_DIR_CONNECT;
  c->policy.upgrade_bytes = 4096;
  c->policy.fabric = 99;
  ck_assert_int_eq(fs_fdtab_install(sv[0], c), 0);
  return c;
}

/* n bytes sent through the library on c's TCP socket (counted; the
 * threshold checked), and drained at the other end. */
static void send_n(struct fs_conn *c, int sv[2], size_t n)
{
  static char buf[8192], sink[8192];
  struct iovec v = { buf, n };
  struct fs_io io = { .op = FS_IO_WRITE, .iov = &v, .iovcnt = 1 };
  ck_assert_int_eq(fs_sock_send(c, sv[0], &io), (ssize_t)n);
  ck_assert_int_eq(read(sv[1], sink, sizeof sink), (ssize_t)n);
}

static bool lazy(struct fs_conn *c)
{
  return __atomic_load_n(&c->upgrade_lazy, __ATOMIC_ACQUIRE);
}

START_TEST(t_delayed_upgrade_waits_for_a_nudge)
{
  int sv[2];
  struct fs_conn *c = conn_new(sv);
  send_n(c, sv, 5000); /* past 4 KiB */
  ck_assert(c->upgrade_queued);
  ck_assert(lazy(c));
  uint64_t due = c->upgrade_due;
  /* The agent sleeps past the due time (it used to wake at it, for every
   * connection), unless the job ran already (the test thread slept 22 ms). */
  ck_assert_uint_ge(fs_agent_wake_at(), due + 10000000ull);
  /* A send before the due time nudges nothing; one after it does. */
  send_n(c, sv, 1);
  if (!lazy(c))
    ck_assert_uint_ge(fs_clock_ns(), due);
  while (fs_clock_ns() < due)
    usleep(200);
  send_n(c, sv, 1);
  ck_assert(!lazy(c));
  uint64_t now = fs_clock_ns();
  ck_assert(fs_agent_wake_at() <= now || fs_conn_state(c) != FS_STATE_UPGRADING);
  /* It runs (and fails: no such fabric) soon, not at the lazy deadline. */
  for (int i = 0; i < 5000 && fs_conn_state(c) == FS_STATE_UPGRADING; i++)
    usleep(1000);
  ck_assert_int_eq(fs_conn_state(c), FS_STATE_TCP);
  ck_assert_int_eq(c->reason, FS_REASON_REMOTE_HOST);
  ck_assert(!lazy(c));
  close(sv[0]);
  close(sv[1]);
}
END_TEST

START_TEST(t_quiet_connection_upgrades_at_the_lazy_deadline)
{
  int sv[2];
  ck_assert_int_eq(fs_agent_ensure(), 0); /* running: no deferred start (t_deferred_*) */
  struct fs_conn *c = conn_new(sv);
  send_n(c, sv, 5000);
  ck_assert(lazy(c));
  /* No more I/O: the agent runs it by itself, a little later. */
  for (int i = 0; i < 5000 && fs_conn_state(c) == FS_STATE_UPGRADING; i++)
    usleep(1000);
  ck_assert_int_eq(fs_conn_state(c), FS_STATE_TCP);
  ck_assert_int_eq(c->reason, FS_REASON_REMOTE_HOST);
  ck_assert(!lazy(c));
  /* Nothing left: it sleeps until kicked (it says so once past its batch). */
  for (int i = 0; i < 5000 && fs_agent_wake_at() != UINT64_MAX; i++)
    usleep(1000);
  ck_assert_uint_eq(fs_agent_wake_at(), UINT64_MAX);
  close(sv[0]);
  close(sv[1]);
}
END_TEST

/* n bytes received through the library on c's TCP socket (counted; the
 * threshold checked): a reply, where send_n is a request. */
static void recv_n(struct fs_conn *c, int sv[2], size_t n)
{
  static char buf[8192], sink[8192];
  ck_assert_int_eq(write(sv[1], buf, n), (ssize_t)n);
  for (size_t got = 0; got < n;) { /* no MSG_WAITALL: it would start the agent */
    struct iovec v = { sink, n - got };
    struct fs_io io = { .op = FS_IO_RECV, .iov = &v, .iovcnt = 1 };
    ssize_t r = fs_sock_recv(c, sv[0], &io);
    ck_assert_int_gt(r, 0);
    got += (size_t)r;
  }
}

/* Threads of this process (the test's own, and the agent's once started). */
static int task_count(void)
{
  DIR *d = opendir("/proc/self/task");
  ck_assert_ptr_nonnull(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static void *write_later(void *arg)
{
  usleep(50000);
  ck_assert_int_eq(write(*(int *)arg, "0123456789", 10), 10);
  return NULL;
}

/* The first delayed upgrade of a process, of a connection that crossed on
 * what it received, starts no thread (a one-shot client exits before it
 * is due): a receive that finds bytes, or the EOF, starts none either; a
 * receive that would block starts it, then blocks; and the agent's first
 * look runs the job.  One that crossed on what it sent starts it at once
 * (it may sleep next, with no socket call to start it). */
START_TEST(t_deferred_until_a_receive_would_block)
{
  int sv[2];
  struct fs_conn *c = conn_new(sv);
  int before = task_count();
  recv_n(c, sv, 5000);
  ck_assert(lazy(c));
  ck_assert(fs_agent_deferred);
  ck_assert_int_eq(task_count(), before);
  char buf[64];
  struct iovec v = { buf, sizeof buf };
  struct fs_io io = { .op = FS_IO_READ, .iov = &v, .iovcnt = 1 };
  ck_assert_int_eq(write(sv[1], "abc", 3), 3);
  errno = 1234;
  ck_assert_int_eq(fs_sock_recv(c, sv[0], &io), 3);
  ck_assert_int_eq(errno, 1234);
  ck_assert_int_eq(memcmp(buf, "abc", 3), 0);
  ck_assert(fs_agent_deferred);
  ck_assert_int_eq(task_count(), before);
  /* Nothing there: it starts, then blocks until the bytes come. */
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, write_later, &sv[1]), 0);
  io = (struct fs_io){ .op = FS_IO_RECV, .iov = &v, .iovcnt = 1 };
  ck_assert_int_eq(fs_sock_recv(c, sv[0], &io), 10);
  ck_assert_int_eq(memcmp(buf, "0123456789", 10), 0);
  ck_assert(!fs_agent_deferred);
  pthread_join(t, NULL);
  for (int i = 0; i < 5000 && fs_conn_state(c) == FS_STATE_UPGRADING; i++)
    usleep(1000);
  ck_assert_int_eq(fs_conn_state(c), FS_STATE_TCP);
  ck_assert_int_eq(c->reason, FS_REASON_REMOTE_HOST);
  close(sv[0]);
  close(sv[1]);
}
END_TEST

/* Crossed on what it sent (_i 0): the thread at once.  On what it
 * received (_i 1): deferred, until a wait that may block (one that polls
 * does not). */
START_TEST(t_deferred_for_a_receiver_until_a_wait)
{
  int sv[2];
  struct fs_conn *c = conn_new(sv);
  int before = task_count();
  (_i == 0 ? send_n : recv_n)(c, sv, 5000);
  ck_assert(fs_agent_deferred == (_i == 1));
  fs_agent_wait_point(false);
  ck_assert(fs_agent_deferred == (_i == 1));
  fs_agent_wait_point(true);
  ck_assert(!fs_agent_deferred);
  ck_assert_int_eq(task_count(), before + 1);
  close(sv[0]);
  close(sv[1]);
}
END_TEST

/* So does a second job: a process with more than one connection to
 * upgrade is not a one-shot client. */
START_TEST(t_deferred_second_job_starts_it)
{
  int sv[2], sv2[2];
  struct fs_conn *c = conn_new(sv), *c2 = conn_new(sv2);
  int before = task_count();
  recv_n(c, sv, 5000);
  ck_assert(fs_agent_deferred);
  ck_assert_int_eq(task_count(), before);
  recv_n(c2, sv2, 5000);
  ck_assert(!fs_agent_deferred);
  ck_assert_int_eq(task_count(), before + 1);
  for (int i = 0; i < 5000 && (fs_conn_state(c) == FS_STATE_UPGRADING || fs_conn_state(c2) == FS_STATE_UPGRADING); i++)
    usleep(1000);
  ck_assert_int_eq(fs_conn_state(c), FS_STATE_TCP);
  ck_assert_int_eq(fs_conn_state(c2), FS_STATE_TCP);
  close(sv[0]);
  close(sv[1]);
  close(sv2[0]);
  close(sv2[1]);
}
END_TEST

/* The agent blocks every signal the application may handle (its handlers
 * run on the application's threads): given with the thread's attributes,
 * not by masking the caller's around the create. */
START_TEST(t_agent_blocks_signals)
{
  sigset_t before, after;
  pthread_sigmask(SIG_SETMASK, NULL, &before);
  ck_assert_int_eq(fs_agent_ensure(), 0);
  pthread_sigmask(SIG_SETMASK, NULL, &after);
  for (int sig = 1; sig < 32; sig++)
    ck_assert_int_eq(sigismember(&before, sig), sigismember(&after, sig)); /* ours untouched */
  DIR *d = opendir("/proc/self/task");
  ck_assert_ptr_nonnull(d);
  int agents = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.' || atoi(e->d_name) == getpid())
      continue;
    char path[300], line[256];
    snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    unsigned long long blk = 0;
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "SigBlk: %llx", &blk) == 1)
        break;
    fclose(f);
    int want[] = { SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGCHLD, SIGPIPE, SIGALRM, SIGIO, SIGWINCH };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
      ck_assert_msg(blk >> (want[i] - 1) & 1, "signal %d not blocked on the agent (SigBlk %llx)", want[i], blk);
    agents++;
  }
  closedir(d);
  ck_assert_int_eq(agents, 1);
}
END_TEST

/* ---- watches ---------------------------------------------------------- */

struct w {
  int fd;
  int calls; /* atomic */
};

static bool w_ready(void *arg)
{
  struct w *w = arg;
  uint64_t v;
  if (read(w->fd, &v, sizeof v) == sizeof v)
    __atomic_add_fetch(&w->calls, 1, __ATOMIC_RELEASE);
  return false;
}

static int epoll_fds(void)
{
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  ck_assert_ptr_nonnull(d);
  struct dirent *e;
  while ((e = readdir(d))) {
    char p[300], l[64];
    snprintf(p, sizeof p, "/proc/self/fd/%s", e->d_name);
    ssize_t k = readlink(p, l, sizeof l - 1);
    if (k > 0) {
      l[k] = 0;
      n += strcmp(l, "anon_inode:[eventpoll]") == 0;
    }
  }
  closedir(d);
  return n;
}

static void w_add(struct w *w)
{
  w->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ck_assert_int_ge(w->fd, 0);
  w->calls = 0;
  fs_agent_pause(); /* the agent's lock, as a fabric holds it */
  ck_assert_int_eq(fs_agent_watch(w->fd, w_ready, w), 0);
  fs_agent_resume();
}

static void w_drop(struct w *w)
{
  fs_agent_pause();
  fs_agent_unwatch(w->fd);
  fs_agent_resume();
  close(w->fd);
}

/* Ring each of ws[0..n) and wait until the agent has served each once
 * more; false if one is not served within 10 s. */
static bool ring_all(struct w *ws, int n)
{
  for (int i = 0; i < n; i++) {
    int want = __atomic_load_n(&ws[i].calls, __ATOMIC_ACQUIRE) + 1;
    uint64_t one = 1;
    ck_assert_int_eq(write(ws[i].fd, &one, sizeof one), (ssize_t)sizeof one);
    for (int t = 0; t < 10000 && __atomic_load_n(&ws[i].calls, __ATOMIC_ACQUIRE) < want; t++)
      usleep(1000);
    if (__atomic_load_n(&ws[i].calls, __ATOMIC_ACQUIRE) < want)
      return false;
  }
  return true;
}

/* CPU time (clock ticks) of this process's threads but the calling one:
 * the agent's. */
static long other_threads_ticks(void)
{
  long sum = 0;
  pid_t me = (pid_t)syscall(SYS_gettid);
  DIR *d = opendir("/proc/self/task");
  ck_assert_ptr_nonnull(d);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.' || atoi(e->d_name) == me)
      continue;
    char p[300], line[1024];
    snprintf(p, sizeof p, "/proc/self/task/%s/stat", e->d_name);
    FILE *f = fopen(p, "r");
    if (!f)
      continue;
    if (fgets(line, sizeof line, f)) {
      const char *q = strrchr(line, ')'); /* after the command name */
      unsigned long ut = 0, st = 0;
      if (q && sscanf(q + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
        sum += (long)(ut + st);
    }
    fclose(f);
  }
  closedir(d);
  return sum;
}

static bool epoll_fds_become(int want)
{
  for (int t = 0; t < 1000 && epoll_fds() != want; t++)
    usleep(10000);
  return epoll_fds() == want;
}

/* A watch added while the agent sleeps is served (it is kicked to take it
 * in); a handful costs no epoll set; twelve are served through one, made
 * for them; dropped back to two, the set goes.  A watch dropped while the
 * agent sleeps on it, its fd closed, stops nothing. */
START_TEST(t_watches_polled_then_in_a_set)
{
  ck_assert_int_eq(fs_agent_ensure(), 0);
  int base = epoll_fds();
  struct w ws[12];
  for (int i = 0; i < 3; i++)
    w_add(&ws[i]);
  usleep(20000); /* the agent asleep with them */
  ck_assert(ring_all(ws, 3));
  ck_assert_int_eq(epoll_fds(), base);
  for (int i = 3; i < 12; i++)
    w_add(&ws[i]);
  ck_assert(ring_all(ws, 12));
  ck_assert_int_eq(epoll_fds(), base + 1);
  for (int i = 2; i < 12; i++)
    w_drop(&ws[i]);
  ck_assert(ring_all(ws, 2)); /* a wake: the next wait closes the set */
  ck_assert(epoll_fds_become(base));
  ck_assert(ring_all(ws, 2));
  w_drop(&ws[1]);
  ck_assert(ring_all(ws, 1));
  /* Closed while watched, without an unwatch: dropped by the agent (a
   * poll() reports it invalid at every call), the others still served. */
  struct w gone;
  w_add(&gone);
  usleep(20000);
  close(gone.fd);
  ck_assert(ring_all(ws, 1));
  int calls = gone.calls;
  ck_assert(ring_all(ws, 1));
  ck_assert_int_eq(gone.calls, calls);
  /* ... and not polled again: an agent that kept it would spin on it. */
  long t0 = other_threads_ticks();
  usleep(1000000);
  ck_assert_int_lt(other_threads_ticks() - t0, 20); /* idle: 0; spinning: most of 100 */
  w_drop(&ws[0]);
}
END_TEST

/* A listener dropped while the agent sleeps on it lets go of its name at
 * its close: a poll() holds its files until it returns, and the socket of
 * a server's rendezvous name, closed after setuid to be bound again under
 * the new user, kept the name (EADDRINUSE: the peers found root's socket
 * and gave up, t_xuser). */
static bool never(void *arg)
{
  (void)arg;
  return false;
}

START_TEST(t_dropped_listener_lets_go_of_its_name)
{
  ck_assert_int_eq(fs_agent_ensure(), 0);
  struct sockaddr_un a = { .sun_family = AF_UNIX };
  int len = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "check-agent-%d", (int)getpid());
  socklen_t al = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
  int u = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(u, 0);
  ck_assert_int_eq(bind(u, (struct sockaddr *)&a, al), 0);
  ck_assert_int_eq(listen(u, 4), 0);
  fs_agent_pause();
  ck_assert_int_eq(fs_agent_watch(u, never, NULL), 0);
  fs_agent_resume();
  usleep(50000); /* the agent asleep on it */
  for (int round = 0; round < 3; round++) {
    fs_agent_pause();
    fs_agent_unwatch(u);
    close(u);
    u = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(u, 0);
    int rc = bind(u, (struct sockaddr *)&a, al);
    int err = errno;
    if (rc == 0)
      ck_assert_int_eq(fs_agent_watch(u, never, NULL), 0);
    fs_agent_resume();
    ck_assert_msg(rc == 0, "bind again: %s", strerror(err));
    ck_assert_int_eq(listen(u, 4), 0);
    usleep(50000);
  }
  fs_agent_pause();
  fs_agent_unwatch(u);
  fs_agent_resume();
  close(u);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("agent");
  TCase *tc = tcase_create("delayed");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, t_delayed_upgrade_waits_for_a_nudge);
  tcase_add_test(tc, t_quiet_connection_upgrades_at_the_lazy_deadline);
  tcase_add_test(tc, t_deferred_until_a_receive_would_block);
  tcase_add_loop_test(tc, t_deferred_for_a_receiver_until_a_wait, 0, 2);
  tcase_add_test(tc, t_deferred_second_job_starts_it);
  tcase_add_test(tc, t_agent_blocks_signals);
  suite_add_tcase(s, tc);
  TCase *tw = tcase_create("watches");
  tcase_set_timeout(tw, 60);
  tcase_add_test(tw, t_watches_polled_then_in_a_set);
  tcase_add_test(tw, t_dropped_listener_lets_go_of_its_name);
  suite_add_tcase(s, tw);
  return run_suite(s, true);
}
