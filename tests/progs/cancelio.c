/* cancelio: a thread cancelled while it waits in recv() or send() on a
 * connection (pthread_cancel).  recv and send are cancellation points: the
 * thread must end, and the connection must go on working for the others.
 * Under libfabsock a thread cancelled asleep inside the library unwound
 * with the connection's receive lock held, and the next recv on it waited
 * for good (engine/cancel.h).
 *
 *   cancelio -p PORT [-h HOLDFILE]
 *
 * Against an echo server: 40 round trips of 64 KiB (past the upgrade
 * threshold), then "ready" and, with -h, waits for HOLDFILE (the test sees
 * the connection on its fabric meanwhile).  Then, three times: a thread
 * blocks in recv() (nothing is on the way), is cancelled and joined; a
 * round trip from the main thread follows on the same connection.  Then a
 * thread with a cancel already pending calls send(): cancelled there, as
 * glibc's send acts on it at its start, it must send nothing (the round
 * trip after it checks), where the library used to take the call in and
 * act at a cancellation point inside it, its locks held.  Then a
 * thread that fills the connection with send() while nobody reads (the
 * echo stalls too) is cancelled and joined; the main thread half-closes
 * and reads back what that thread sent (what its last, cancelled send had
 * queued included), then EOF.  Exit 0 when every join returned
 * PTHREAD_CANCELED, every cleanup handler ran, and every byte came back. */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

static int s;
static volatile size_t sent_by_thread;
static volatile int cleanups;

static void cleanup(void *arg)
{
  (void)arg;
  cleanups++;
}

static void *reader(void *arg)
{
  char b[64];
  (void)arg;
  pthread_cleanup_push(cleanup, NULL);
  ssize_t n = recv(s, b, sizeof b, 0);
  it_msg("reader: recv returned %zd (%s): not cancelled", n, n < 0 ? strerror(errno) : "bytes");
  pthread_cleanup_pop(0);
  return NULL;
}

static void *writer(void *arg)
{
  static char b[65536];
  (void)arg;
  pthread_cleanup_push(cleanup, NULL);
  memset(b, 'w', sizeof b);
  for (;;) {
    ssize_t n = send(s, b, sizeof b, 0);
    if (n < 0)
      break;
    sent_by_thread += (size_t)n; /* send returns after each part it queued */
  }
  it_msg("writer: send failed (%s): not cancelled", strerror(errno));
  pthread_cleanup_pop(0);
  return NULL;
}

static sem_t go_ahead;
static volatile int pend_ready;

static void *pending_sender(void *arg)
{
  static char b[65536];
  (void)arg;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
  pend_ready = 1;
  while (sem_wait(&go_ahead) != 0) /* the cancel is asked meanwhile */
    ;
  pthread_cleanup_push(cleanup, NULL);
  pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL); /* deferred: acts at the next point */
  memset(b, 'p', sizeof b);
  ssize_t n = send(s, b, sizeof b, 0);
  it_msg("pending: send returned %zd: not cancelled", n);
  pthread_cleanup_pop(0);
  return NULL;
}

static void round_trip(const char *what)
{
  static char out[65536], in[65536];
  memset(out, what[0], sizeof out);
  if (it_write_all(s, out, sizeof out) != (ssize_t)sizeof out || it_read_full(s, in, sizeof in) != (ssize_t)sizeof in ||
      memcmp(in, out, sizeof in) != 0)
    it_die(1, "%s: the round trip failed", what);
}

static void cancel_join(pthread_t t, const char *what)
{
  void *res = NULL;
  uint64_t t0 = it_now_ns();
  if (pthread_cancel(t) != 0 || pthread_join(t, &res) != 0)
    it_die(1, "%s: cancel or join failed", what);
  if (res != PTHREAD_CANCELED)
    it_die(1, "%s: the thread was not cancelled", what);
  it_msg("%s: cancelled and joined in %.1f ms", what, (double)(it_now_ns() - t0) / 1e6);
}

int main(int argc, char **argv)
{
  int port = 0, o;
  const char *hold = NULL;
  while ((o = getopt(argc, argv, "p:h:")) != -1) {
    if (o == 'p')
      port = atoi(optarg);
    else if (o == 'h')
      hold = optarg;
    else
      it_die(2, "usage: cancelio -p PORT [-h HOLDFILE]");
  }
  s = it_connect(0, "127.0.0.1", port);
  if (s < 0)
    it_die(1, "connect: %s", strerror(errno));
  for (int i = 0; i < 40; i++)
    round_trip("warm-up");
  it_msg("ready");
  while (hold && access(hold, F_OK) != 0)
    it_sleep_us(20000);
  for (int i = 0; i < 3; i++) {
    pthread_t t;
    pthread_create(&t, NULL, reader, NULL);
    it_sleep_us(100000); /* asleep in recv by now */
    cancel_join(t, "reader");
    round_trip("after the reader");
  }
  sem_init(&go_ahead, 0, 0);
  pthread_t t;
  pthread_create(&t, NULL, pending_sender, NULL);
  while (!pend_ready)
    it_sleep_us(1000);
  if (pthread_cancel(t) != 0 || sem_post(&go_ahead) != 0)
    it_die(1, "pending: cancel failed");
  void *res = NULL;
  if (pthread_join(t, &res) != 0 || res != PTHREAD_CANCELED)
    it_die(1, "pending: the thread was not cancelled");
  round_trip("after the pending cancel"); /* nothing of the thread's in the echo */
  it_msg("pending: cancelled at send, nothing sent");
  pthread_create(&t, NULL, writer, NULL);
  it_sleep_us(300000); /* the echo has stalled: the writer waits in send */
  cancel_join(t, "writer");
  /* What the cancelled send had queued goes too: between what the writer
   * counted and 64 KiB more, all of it the writer's, then EOF. */
  size_t n = sent_by_thread, got = 0;
  if (shutdown(s, SHUT_WR) != 0)
    it_die(1, "shutdown: %s", strerror(errno));
  static char b[65536];
  for (;;) {
    ssize_t r = recv(s, b, sizeof b, 0);
    if (r < 0)
      it_die(1, "writer's echo: recv: %s", strerror(errno));
    if (r == 0)
      break;
    for (ssize_t k = 0; k < r; k++)
      if (b[k] != 'w')
        it_die(1, "writer's echo: byte %zu is not the writer's", got + (size_t)k);
    got += (size_t)r;
  }
  if (got < n || got > n + sizeof b)
    it_die(1, "writer's echo: %zu bytes back, the writer sent %zu (+ at most %zu)", got, n, sizeof b);
  if (cleanups != 5)
    it_die(1, "%d cleanup handlers ran, not 5", cleanups);
  it_msg("5 threads cancelled; the writer's %zu bytes (%zu counted) echoed back, then EOF", got, n);
  return 0;
}
