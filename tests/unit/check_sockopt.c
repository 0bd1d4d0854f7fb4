/* Unit tests for engine/sockopt's TCP_CORK and the engine's sendfile: a
 * cork set while tx is on a fabric stays out of the kernel (and comes back
 * to it before the next send on TCP), and bytes it held back when tx
 * switches are pushed out; a sendfile on TCP is the kernel's, on a fabric
 * it reads the file into the ring.  And the engine's bad buffers: on a
 * fabric, EFAULT as from the kernel, not a crash.  And what the engine
 * notes of a connection's traffic before the upgrade to size its rings by:
 * its largest call, and the peer's largest reply, however it was read. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/conn.h"
#include "engine/fdtab.h"
#include "engine/io.h"
#include "engine/sock.h"
#include "engine/sockio.h"
#include "engine/sockopt.h"
#include "engine/wake.h"
#include "fabric/chan.h"
#include "fabric/ring.h"
#include "fabric/shm/shm.h"
#include "tests/unit/check_run.h"

/* A loopback TCP connection: fd ours (tracked), peer the other end. */
struct tcp {
  int fd, peer;
  struct fs_conn *c;
  int theirs, memfd;
  struct fs_chan *a, *b;
};

static void tcp_new(struct tcp *t)
{
  memset(t, 0, sizeof *t);
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  socklen_t sl = sizeof sa;
  ck_assert_int_eq(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
  ck_assert_int_eq(getsockname(l, (struct sockaddr *)&sa, &sl), 0);
  ck_assert_int_eq(listen(l, 1), 0);
  t->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ck_assert_int_eq(connect(t->fd, (struct sockaddr *)&sa, sizeof sa), 0);
  t->peer = accept(l, NULL, NULL);
  ck_assert_int_ge(t->peer, 0);
  close(l);
  t->c = fs_conn_new(t->fd, AF_INET);
  ck_assert_ptr_nonnull(t->c);
  t->c->state = FS_STATE_TCP;
  t->c->dir = FS_DIR_CONNECT;
  ck_assert_int_eq(fs_fdtab_install(t->fd, t->c), 0);
}

/* A shm channel on it, tx moved onto it (what a SWITCH does). */
static void tcp_onto_fabric(struct tcp *t)
{
  ck_assert_int_eq(fs_wake_get(t->c), 0);
  t->theirs = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ck_assert_int_eq(fs_shm_create(fs_shm_ring_size(0), t->c->wake_fd, &t->memfd, &t->a), 0);
  ck_assert_int_eq(fs_shm_set_peer(t->a, &(struct fs_shm_wake){ t->theirs, -1, 0, -1 }), 0);
  ck_assert_int_eq(fs_shm_attach(t->memfd, t->theirs, &(struct fs_shm_wake){ t->c->wake_fd, -1, 0, -1 }, &t->b), 0);
  ck_assert_int_eq(fs_sock_attach(t->c, t->a), 0);
  t->c->tx_flow = FS_FLOW_FABRIC;
}

static int kernel_cork(int fd)
{
  int v = -1;
  socklen_t l = sizeof v;
  ck_assert_int_eq(getsockopt(fd, IPPROTO_TCP, TCP_CORK, &v, &l), 0);
  return v;
}

/* The application's view: its getsockopt after the kernel's. */
static int app_cork(struct tcp *t)
{
  int v = kernel_cork(t->fd);
  socklen_t l = sizeof v;
  fs_sockopt_get(t->c, IPPROTO_TCP, TCP_CORK, &v, &l);
  return v;
}

START_TEST(t_cork_on_tcp_goes_to_kernel)
{
  struct tcp t;
  tcp_new(&t);
  int one = 1;
  ck_assert(!fs_sockopt_set_here(t.c, IPPROTO_TCP, TCP_CORK, &one, sizeof one));
}
END_TEST

START_TEST(t_cork_on_fabric_kept_here)
{
  struct tcp t;
  tcp_new(&t);
  tcp_onto_fabric(&t);
  int one = 1, zero = 0;
  errno = 4321;
  ck_assert(fs_sockopt_set_here(t.c, IPPROTO_TCP, TCP_CORK, &one, sizeof one));
  ck_assert_int_eq(errno, 4321);
  ck_assert_int_eq(kernel_cork(t.fd), 0); /* no system call */
  ck_assert_int_eq(app_cork(&t), 1);      /* but the application sees its value */
  ck_assert(fs_sockopt_set_here(t.c, IPPROTO_TCP, TCP_CORK, &zero, sizeof zero));
  ck_assert_int_eq(app_cork(&t), 0);
  /* Malformed: the kernel answers it (EINVAL), as without us. */
  ck_assert(!fs_sockopt_set_here(t.c, IPPROTO_TCP, TCP_CORK, &one, 2));
  ck_assert(!fs_sockopt_set_here(t.c, IPPROTO_TCP, TCP_CORK, NULL, sizeof one));
  /* Other options are not ours. */
  ck_assert(!fs_sockopt_set_here(t.c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
}
END_TEST

/* Corked in the kernel before the switch (bytes may wait under it): the
 * uncork must reach the kernel. */
START_TEST(t_uncork_reaches_corked_kernel)
{
  struct tcp t;
  tcp_new(&t);
  int one = 1, zero = 0;
  ck_assert_int_eq(setsockopt(t.fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one), 0);
  fs_sockopt_set(t.c, t.fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one);
  tcp_onto_fabric(&t);
  ck_assert(!fs_sockopt_set_here(t.c, IPPROTO_TCP, TCP_CORK, &zero, sizeof zero));
}
END_TEST

/* Back on TCP: the kernel gets the application's value before a send. */
START_TEST(t_cork_synced_back_on_tcp)
{
  struct tcp t;
  tcp_new(&t);
  tcp_onto_fabric(&t);
  int one = 1;
  ck_assert(fs_sockopt_set_here(t.c, IPPROTO_TCP, TCP_CORK, &one, sizeof one));
  fs_sockopt_cork_sync(t.c, t.fd); /* still on the fabric: nothing */
  ck_assert_int_eq(kernel_cork(t.fd), 0);
  t.c->tx_flow = FS_FLOW_TCP;
  errno = 4321;
  fs_sockopt_cork_sync(t.c, t.fd);
  ck_assert_int_eq(errno, 4321);
  ck_assert_int_eq(kernel_cork(t.fd), 1);
  ck_assert_int_eq(t.c->cork_kernel, t.c->cork_app);
}
END_TEST

/* Bytes the kernel queued on fd but has not sent. */
static int unsent(int fd)
{
  int n = -1;
  ck_assert_int_eq(ioctl(fd, SIOCOUTQNSD, &n), 0);
  return n;
}

static ssize_t send_str(struct tcp *t, const char *s, int flags)
{
  struct iovec v = { (void *)s, strlen(s) };
  struct fs_io io = { .op = FS_IO_SEND, .flags = flags, .iov = &v, .iovcnt = 1 };
  return fs_sock_send(t->c, t->fd, &io);
}

/* The last bytes sent on TCP before the SWITCH, held by the kernel under
 * the application's cork (nginx's tcp_nopush) or a MSG_MORE, go out when
 * tx switches: the peer reads TCP up to the SWITCH's count first, and
 * waited for them up to 200 ms (the kernel's cork ceiling) each upgrade. */
static void switch_pushes(bool cork)
{
  struct tcp t;
  tcp_new(&t);
  t.c->upgrade_queued = true; /* the test attaches the channel, not the agent */
  int one = 1;
  if (cork) {
    ck_assert_int_eq(setsockopt(t.fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one), 0);
    fs_sockopt_set(t.c, t.fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one);
  }
  ck_assert_int_eq(send_str(&t, "held back", cork ? 0 : MSG_MORE), 9);
  ck_assert_int_eq(unsent(t.fd), 9); /* a partial frame: the kernel waits */
  /* A channel both ends attached: the next send writes the SWITCH. */
  tcp_onto_fabric(&t);
  t.c->tx_flow = FS_FLOW_TCP;
  __atomic_store_n(&t.a->peer->attached, 1, __ATOMIC_RELEASE);
  errno = 4321;
  ck_assert_int_eq(send_str(&t, "ring", 0), 4);
  ck_assert_int_eq(errno, 4321);
  ck_assert_int_eq(t.c->tx_flow, FS_FLOW_FABRIC);
  ck_assert_int_eq(unsent(t.fd), 0);
  char got[16] = { 0 };
  ck_assert_int_eq(recv(t.peer, got, sizeof got, MSG_DONTWAIT), 9);
  ck_assert_str_eq(got, "held back");
  ck_assert_int_eq(app_cork(&t), cork); /* still the application's */
}

START_TEST(t_switch_pushes_corked)
{
  switch_pushes(true);
}
END_TEST

START_TEST(t_switch_pushes_more)
{
  switch_pushes(false);
}
END_TEST

static int tmpfile_with(const char *data, size_t n)
{
  char path[] = "/tmp/check_sockopt.XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  unlink(path);
  ck_assert_int_eq(write(fd, data, n), (ssize_t)n);
  return fd;
}

START_TEST(t_sendfile_on_tcp_is_the_kernels)
{
  struct tcp t;
  tcp_new(&t);
  t.c->no_upgrade = true;
  int in = tmpfile_with("0123456789", 10);
  off_t off = 2;
  struct fs_io io = { .op = FS_IO_SENDFILE, .in_fd = in, .off = &off, .count = 5 };
  ck_assert_int_eq(fs_sock_send(t.c, t.fd, &io), 5);
  ck_assert_int_eq(off, 7);
  char got[8] = { 0 };
  ck_assert_int_eq(recv(t.peer, got, sizeof got, 0), 5);
  ck_assert_str_eq(got, "23456");
  /* Errors are the kernel's: a file not open for reading. */
  int wr = open("/dev/null", O_WRONLY | O_CLOEXEC);
  io = (struct fs_io){ .op = FS_IO_SENDFILE, .in_fd = wr, .off = NULL, .count = 5 };
  ck_assert_int_eq(fs_sock_send(t.c, t.fd, &io), -EBADF);
  close(wr);
  close(in);
}
END_TEST

/* On a fabric the file goes straight into the ring, in order, and a
 * sendfile at the file's end returns 0 (as the kernel's). */
START_TEST(t_sendfile_on_fabric_fills_the_ring)
{
  struct tcp t;
  tcp_new(&t);
  tcp_onto_fabric(&t);
  size_t big = 3 * fs_ring_limit(&t.a->tx) / 4; /* wraps on the second call */
  char *data = malloc(big), *got = malloc(2 * big);
  for (size_t i = 0; i < big; i++)
    data[i] = (char)(i * 7 + 1);
  int in = tmpfile_with(data, big);
  t.c->nonblock = true;
  off_t off = 0;
  struct fs_io io = { .op = FS_IO_SENDFILE, .in_fd = in, .off = &off, .count = big + 100 };
  ck_assert_int_eq(fs_sock_send(t.c, t.fd, &io), (ssize_t)big); /* the file's end: short */
  ck_assert_int_eq(off, (off_t)big);
  ck_assert_int_eq(lseek(in, 0, SEEK_CUR), (off_t)big); /* pread: its position is not ours to move */
  struct iovec v = { got, 2 * big };
  ck_assert_int_eq(fs_ring_get_data(&t.b->rx, &v, 1, 0, 2 * big, false), (ssize_t)big);
  ck_assert(memcmp(got, data, big) == 0);
  ck_assert_int_eq(fs_sock_send(t.c, t.fd, &io), 0); /* at the end */
  /* From the file's position: read, and moved by what was sent. */
  ck_assert_int_eq(lseek(in, 10, SEEK_SET), 10);
  io = (struct fs_io){ .op = FS_IO_SENDFILE, .in_fd = in, .off = NULL, .count = big - 10 };
  ck_assert_int_eq(fs_sock_send(t.c, t.fd, &io), (ssize_t)(big - 10));
  ck_assert_int_eq(lseek(in, 0, SEEK_CUR), (off_t)big);
  ck_assert_int_eq(fs_ring_get_data(&t.b->rx, &v, 1, 0, 2 * big, false), (ssize_t)(big - 10));
  ck_assert(memcmp(got, data + 10, big - 10) == 0);
  /* A file it cannot read: the read's error. */
  int wr = open("/dev/null", O_WRONLY | O_CLOEXEC);
  io = (struct fs_io){ .op = FS_IO_SENDFILE, .in_fd = wr, .off = NULL, .count = 5 };
  ck_assert_int_eq(fs_sock_send(t.c, t.fd, &io), -EBADF);
  close(wr);
  close(in);
  free(data);
  free(got);
}
END_TEST

/* A buffer no process can have mapped fails with EFAULT on a fabric, as the
 * kernel's copy does on TCP (errnos' send((void *)16, 10) killed the
 * process whenever its connection was on shm by then); one after good
 * bytes ends the call there, with their count.  Nothing is consumed. */
START_TEST(t_bad_buffer_on_fabric_is_efault)
{
  struct tcp t;
  tcp_new(&t);
  tcp_onto_fabric(&t);
  t.c->nonblock = true;
  struct iovec bad = { (void *)16, 10 };
  struct fs_io io = { .op = FS_IO_SEND, .flags = MSG_NOSIGNAL, .iov = &bad, .iovcnt = 1 };
  ck_assert_int_eq(fs_sock_send(t.c, t.fd, &io), -EFAULT);
  bad.iov_base = (void *)~(uintptr_t)0x0f;
  ck_assert_int_eq(fs_sock_send(t.c, t.fd, &io), -EFAULT);
  struct iovec two[2] = { { "good", 4 }, { (void *)16, 10 } };
  io = (struct fs_io){ .op = FS_IO_WRITEV, .iov = two, .iovcnt = 2 };
  ck_assert_int_eq(fs_sock_send(t.c, t.fd, &io), 4);
  char got[16] = { 0 };
  struct iovec v = { got, sizeof got };
  ck_assert_int_eq(fs_ring_get_data(&t.b->rx, &v, 1, 0, sizeof got, false), 4);
  ck_assert_str_eq(got, "good");
  /* Receive: the peer's bytes stay in the ring for a good buffer. */
  t.c->rx_flow = FS_FLOW_FABRIC;
  struct iovec src = { "hello", 5 };
  ck_assert_int_eq(fs_ring_put_data(&t.b->tx, &src, 1, 0, 5), 5);
  t.b->ops->publish(t.b);
  struct iovec rbad = { (void *)16, 10 };
  io = (struct fs_io){ .op = FS_IO_RECV, .iov = &rbad, .iovcnt = 1 };
  ck_assert_int_eq(fs_sock_recv(t.c, t.fd, &io), -EFAULT);
  memset(got, 0, sizeof got);
  io = (struct fs_io){ .op = FS_IO_RECV, .iov = &v, .iovcnt = 1 };
  ck_assert_int_eq(fs_sock_recv(t.c, t.fd, &io), 5);
  ck_assert_str_eq(got, "hello");
}
END_TEST

static ssize_t recv_some(struct tcp *t, size_t n)
{
  static char buf[8192];
  struct iovec v = { buf, n < sizeof buf ? n : sizeof buf };
  struct fs_io io = { .op = FS_IO_RECV, .iov = &v, .iovcnt = 1 };
  return fs_sock_recv(t->c, t->fd, &io);
}

/* A reply of 300,000 bytes read 8 KiB at a time counts as one burst (what
 * came back before our next send); a send starts the next.  Counted while
 * the rendezvous is queued, and the shm rings are sized by it: a ring that
 * holds the reply, up to 1 MiB, beside 32 times the largest call. */
START_TEST(t_reply_sizes_seen_before_the_upgrade)
{
  struct tcp t;
  tcp_new(&t);
  t.c->upgrade_queued = true; /* queued: no rendezvous from here, still counted */
  ck_assert_int_eq(send_str(&t, "GET /", 0), 5);
  static char chunk[30000];
  for (int i = 0; i < 10; i++) {
    ck_assert_int_eq(write(t.peer, chunk, sizeof chunk), (ssize_t)sizeof chunk);
    size_t got = 0;
    while (got < sizeof chunk) {
      ssize_t n = recv_some(&t, sizeof chunk - got);
      ck_assert_int_gt(n, 0);
      got += (size_t)n;
    }
  }
  ck_assert_uint_eq(t.c->rx_burst, 300000);
  ck_assert_uint_eq(t.c->rx_run, 300000);
  ck_assert_uint_eq(t.c->io_max, 8192);
  ck_assert_int_eq(send_str(&t, "GET /", 0), 5);
  ck_assert_uint_eq(t.c->rx_run, 0);
  ck_assert_int_eq(write(t.peer, chunk, 5000), 5000);
  ck_assert_int_eq(recv_some(&t, 5000), 5000);
  ck_assert_uint_eq(t.c->rx_run, 5000);
  ck_assert_uint_eq(t.c->rx_burst, 300000);
  /* The rules: the default alone, a reply's ring (a power of two, at most
   * 1 MiB), 32 calls' ring (at most 4 MiB), whichever is more. */
  ck_assert_uint_eq(fs_shm_ring_for(0, 8192, 0), 256u << 10);
  ck_assert_uint_eq(fs_shm_ring_for(0, 8192, t.c->rx_burst), 512u << 10);
  ck_assert_uint_eq(fs_shm_ring_for(0, 8192, 1048732), 1u << 20);
  ck_assert_uint_eq(fs_shm_ring_for(0, 8192, 50u << 20), 1u << 20);
  ck_assert_uint_eq(fs_shm_ring_for(0, 64u << 10, 300000), 2u << 20);
  ck_assert_uint_eq(fs_shm_ring_for(0, 1u << 20, 0), 4u << 20);
  ck_assert_uint_eq(fs_shm_ring_for(8u << 20, 8192, 1u << 20), 8u << 20);
  /* On a fabric nothing more is counted. */
  tcp_onto_fabric(&t);
  ck_assert_int_eq(send_str(&t, "x", 0), 1);
  ck_assert_uint_eq(t.c->rx_run, 5000);
}
END_TEST

/* The options whose effect the kernel alone gives (zerocopy completions,
 * timestamps, a peek offset), turned on, send a connection back to TCP;
 * turned off, or any other option, do not. */
START_TEST(t_kernel_only_options)
{
  int on = 1, off = 0, minus = -1, zero = 0;
  ck_assert(fs_sockopt_kernel_only(SOL_SOCKET, SO_ZEROCOPY, &on, sizeof on));
  ck_assert(!fs_sockopt_kernel_only(SOL_SOCKET, SO_ZEROCOPY, &off, sizeof off));
  ck_assert(fs_sockopt_kernel_only(SOL_SOCKET, SO_TIMESTAMP, &on, sizeof on));
  ck_assert(fs_sockopt_kernel_only(SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on));
  ck_assert(fs_sockopt_kernel_only(SOL_SOCKET, SO_TIMESTAMPING, &on, sizeof on));
  ck_assert(!fs_sockopt_kernel_only(SOL_SOCKET, SO_TIMESTAMPING, &off, sizeof off));
  ck_assert(fs_sockopt_kernel_only(SOL_SOCKET, SO_PEEK_OFF, &zero, sizeof zero));
  ck_assert(!fs_sockopt_kernel_only(SOL_SOCKET, SO_PEEK_OFF, &minus, sizeof minus));
  ck_assert(!fs_sockopt_kernel_only(SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on));
  ck_assert(!fs_sockopt_kernel_only(IPPROTO_TCP, TCP_NODELAY, &on, sizeof on));
  ck_assert(!fs_sockopt_kernel_only(SOL_SOCKET, SO_ZEROCOPY, NULL, 0));
  ck_assert(!fs_sockopt_kernel_only(SOL_SOCKET, SO_ZEROCOPY, &on, 1)); /* too short: the kernel refused it */
}
END_TEST

static int fionread(struct tcp *t)
{
  int n = -1;
  int rc = fs_sockopt_fionread(t->c, t->fd, &n);
  if (rc == -ENOTSUP)
    ck_assert_int_eq(ioctl(t->fd, FIONREAD, &n), 0);
  else
    ck_assert_int_eq(rc, 0);
  return n;
}

/* FIONREAD while the peer's SWITCH heads our ring and rx is still on TCP
 * (until the next read pops it): the TCP bytes due before it, then the
 * ring's.  It said 0 with the ring full (the kernel's count alone), and a
 * program that takes "readable, 0 bytes" for a closed peer closed. */
START_TEST(t_fionread_counts_past_the_switch)
{
  struct tcp t;
  tcp_new(&t);
  tcp_onto_fabric(&t);
  ck_assert_int_eq(write(t.peer, "abc", 3), 3);
  ck_assert_int_eq(fs_ring_put_ctl(&t.b->tx, FS_REC_SWITCH, 6), 0);
  struct iovec v = { "fabric", 6 };
  ck_assert_uint_eq(fs_ring_put_data(&t.b->tx, &v, 1, 0, 6), 6);
  usleep(20000);
  ck_assert_int_eq(fionread(&t), 3); /* 3 more due on TCP first */
  ck_assert_int_eq(write(t.peer, "def", 3), 3);
  usleep(20000);
  ck_assert_int_eq(fionread(&t), 12);
  char b[32];
  struct iovec r = { b, sizeof b };
  struct fs_io io = { .op = FS_IO_RECV, .flags = MSG_DONTWAIT, .iov = &r, .iovcnt = 1 };
  ck_assert_int_eq(fs_sock_recv(t.c, t.fd, &io), 6);
  ck_assert_int_eq(memcmp(b, "abcdef", 6), 0);
  ck_assert_int_eq(fionread(&t), 6);
  ck_assert_int_eq(fs_sock_recv(t.c, t.fd, &io), 6);
  ck_assert_int_eq(memcmp(b, "fabric", 6), 0);
  ck_assert_int_eq(fionread(&t), 0);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("sockopt");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, t_cork_on_tcp_goes_to_kernel);
  tcase_add_test(tc, t_cork_on_fabric_kept_here);
  tcase_add_test(tc, t_uncork_reaches_corked_kernel);
  tcase_add_test(tc, t_cork_synced_back_on_tcp);
  tcase_add_test(tc, t_switch_pushes_corked);
  tcase_add_test(tc, t_switch_pushes_more);
  tcase_add_test(tc, t_sendfile_on_tcp_is_the_kernels);
  tcase_add_test(tc, t_kernel_only_options);
  tcase_add_test(tc, t_sendfile_on_fabric_fills_the_ring);
  tcase_add_test(tc, t_bad_buffer_on_fabric_is_efault);
  tcase_add_test(tc, t_reply_sizes_seen_before_the_upgrade);
  tcase_add_test(tc, t_fionread_counts_past_the_switch);
  suite_add_tcase(s, tc);
  return run_suite(s, true);
}
