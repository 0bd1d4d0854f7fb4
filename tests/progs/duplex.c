/* duplex: large full-duplex transfer, verified both ways.
 *
 *   duplex -l [-6] [-P portfile] -n bytes [-w holdfile] [-z bytes]    (server, one connection)
 *   duplex -p port [-6] -n bytes [-w holdfile] [-z bytes]            (client)
 *
 * On the connection each side runs two threads at once: a sender writing
 * `bytes` of its stream (client seed 1, server seed 2) with write() in random
 * sizes of 1..256 KiB and occasional short random sleeps, and a receiver
 * reading with read() in random sizes and verifying the peer's stream byte
 * for byte.  When done the sender shuts down its write side; the receiver
 * expects EOF exactly after `bytes`.  Prints CRC-32s and throughput.
 * -w: before shutting down, hold the connection at it_hold().
 * -z: the sender rests 2.5 s after each that many bytes (long enough for
 *     libfabsock to take the idle ring's memory back mid-stream). */
#include "tests/progs/common.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAXIO (256 * 1024)

static int fd;
static uint64_t bytes;
static uint64_t tx_seed, rx_seed, rest_every;
static uint32_t tx_crc, rx_crc;
static char tx_err[256], rx_err[256];
static const char *holdfile;
static pthread_barrier_t hold_barrier;

/* Both threads meet here once (sender: all sent; receiver: all received or
 * failed); one of them holds the connection open for the harness. */
static void hold_sync(void)
{
  if (!holdfile)
    return;
  if (pthread_barrier_wait(&hold_barrier) == PTHREAD_BARRIER_SERIAL_THREAD)
    it_hold(holdfile);
  pthread_barrier_wait(&hold_barrier);
}

static void *sender(void *arg)
{
  struct it_gen g;
  uint64_t rs = tx_seed * 77 + 5, done = 0;
  unsigned char *buf = malloc(MAXIO);
  it_gen_init(&g, tx_seed);
  while (done < bytes) {
    size_t n = 1 + (size_t)(it_rand(&rs) % MAXIO);
    if (n > bytes - done)
      n = (size_t)(bytes - done);
    it_gen_fill(&g, buf, n);
    tx_crc = it_crc32(tx_crc, buf, n);
    if (it_write_all(fd, buf, n) < 0) {
      snprintf(tx_err, sizeof tx_err, "write: %s after %llu bytes", it_errname(errno), (unsigned long long)done);
      break;
    }
    done += n;
    if (rest_every && done / rest_every != (done - n) / rest_every && done < bytes)
      it_sleep_us(2500000);
    if (it_rand(&rs) % 32 == 0)
      it_sleep_us((unsigned)(it_rand(&rs) % 500));
  }
  hold_sync();
  if (!tx_err[0] && shutdown(fd, SHUT_WR) < 0)
    snprintf(tx_err, sizeof tx_err, "shutdown: %s", it_errname(errno));
  free(buf);
  return arg;
}

static void *receiver(void *arg)
{
  struct it_gen g;
  uint64_t rs = rx_seed * 131 + 9, done = 0;
  int held = 0;
  unsigned char *buf = malloc(MAXIO), *want = malloc(MAXIO);
  it_gen_init(&g, rx_seed);
  for (;;) {
    size_t n = 1 + (size_t)(it_rand(&rs) % MAXIO);
    ssize_t r = read(fd, buf, n);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      snprintf(rx_err, sizeof rx_err, "read: %s after %llu bytes", it_errname(errno), (unsigned long long)done);
      break;
    }
    if (r == 0) {
      if (done != bytes)
        snprintf(rx_err, sizeof rx_err, "EOF after %llu of %llu bytes", (unsigned long long)done,
                 (unsigned long long)bytes);
      break;
    }
    if (done + (uint64_t)r > bytes) {
      snprintf(rx_err, sizeof rx_err, "%llu bytes more than the %llu expected",
               (unsigned long long)(done + (uint64_t)r - bytes), (unsigned long long)bytes);
      break;
    }
    it_gen_fill(&g, want, (size_t)r);
    if (memcmp(buf, want, (size_t)r) != 0) {
      size_t i = 0;
      while (buf[i] == want[i])
        i++;
      snprintf(rx_err, sizeof rx_err, "data mismatch at offset %llu", (unsigned long long)(done + i));
      break;
    }
    rx_crc = it_crc32(rx_crc, buf, (size_t)r);
    done += (uint64_t)r;
    if (done == bytes && !held) {
      held = 1; /* everything arrived: hold while the connection is still open */
      hold_sync();
    }
    if (it_rand(&rs) % 64 == 0)
      it_sleep_us((unsigned)(it_rand(&rs) % 300));
  }
  if (!held)
    hold_sync();
  free(buf);
  free(want);
  return arg;
}

int main(int argc, char **argv)
{
  int listen_mode = 0, v6 = 0, port = 0, opt;
  const char *portfile = NULL;
  it_prog = "duplex";
  while ((opt = getopt(argc, argv, "l6p:P:n:w:z:")) != -1) {
    switch (opt) {
    case 'l': listen_mode = 1; break;
    case '6': v6 = 1; break;
    case 'p': port = atoi(optarg); break;
    case 'P': portfile = optarg; break;
    case 'n': bytes = it_size(optarg); break;
    case 'w': holdfile = optarg; break;
    case 'z': rest_every = it_size(optarg); break;
    default: it_die(2, "usage: duplex -l [-6] [-P portfile] -n bytes [-z bytes] | duplex -p port [-6] -n bytes [-z bytes]");
    }
  }
  if (!bytes || (!listen_mode && !port))
    it_die(2, "need -n and (-l or -p)");
  signal(SIGPIPE, SIG_IGN);
  if (listen_mode) {
    int bound, lfd = it_listen(v6, NULL, port, 16, &bound);
    if (portfile)
      it_write_port(portfile, bound);
    do
      fd = accept(lfd, NULL, NULL);
    while (fd < 0 && errno == EINTR);
    if (fd < 0)
      it_die(1, "accept:");
    close(lfd);
    tx_seed = 2;
    rx_seed = 1;
  } else {
    fd = it_connect(v6, NULL, port);
    if (fd < 0)
      it_die(1, "connect:");
    tx_seed = 1;
    rx_seed = 2;
  }
  if (holdfile)
    pthread_barrier_init(&hold_barrier, NULL, 2);

  pthread_t ts, tr;
  uint64_t t0 = it_now_ns();
  pthread_create(&ts, NULL, sender, NULL);
  pthread_create(&tr, NULL, receiver, NULL);
  pthread_join(ts, NULL);
  pthread_join(tr, NULL);
  double secs = (double)(it_now_ns() - t0) / 1e9;
  close(fd);
  if (tx_err[0] || rx_err[0]) {
    printf("FAIL %s%s%s%s%s\n", tx_err[0] ? "send: " : "", tx_err, tx_err[0] && rx_err[0] ? "; " : "",
           rx_err[0] ? "recv: " : "", rx_err);
    return 1;
  }
  printf("ok %s bytes=%llu tx_crc=%08x rx_crc=%08x secs=%.2f MiB/s=%.0f\n", listen_mode ? "server" : "client",
         (unsigned long long)bytes, tx_crc, rx_crc, secs, 2.0 * (double)bytes / 1048576.0 / secs);
  return 0;
}
