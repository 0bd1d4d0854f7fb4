/* hookio: one connection, two verified streams, every send and receive
 * call in turn: the program the inline-hook tests (t_hooks) run.
 *
 *   hookio -l [-P portfile] [options]      server (one connection)
 *   hookio -p port [options]               client
 *
 * The client sends stream A (seed 1) and shuts down its write side; the
 * server reads A to EOF, verifying every byte, then sends stream B (seed 2)
 * and shuts down; the client reads B to EOF, verifying it.  Both then close.
 *
 * Options (give both ends the same -n -F -X -I):
 *   -n BYTES   stream length (default 1M); with -F, frames until >= BYTES
 *   -F MAX     framed streams: len32be frames (4-byte big-endian payload
 *              length, then the payload) with payload sizes from 0 to MAX
 *   -X K       frame K (from 0) of each stream announces (and carries) MAX+1
 *              bytes: one oversized frame
 *   -I TEXT@OFF  put TEXT at stream offset OFF of each stream (unframed)
 *   -s SIZE    every write SIZE bytes (default: a deterministic mix of
 *              1..16, 1..4K, 1..64K and 1..1M)
 *   -T LIST    send calls in turn: send,write,writev,sendmsg,sendto,sendfile
 *              (default all)
 *   -R LIST    receive calls in turn: recv,read,readv,recvmsg,recvfrom,
 *              peek (recv MSG_PEEK, then read the same bytes), waitall
 *              (recv MSG_WAITALL) (default all)
 *   -M         stream A is sent by two threads at once (send, write, writev,
 *              sendmsg, sendto in turn; each half of -n bytes from its own
 *              seed): its order is whatever the lock in the library makes
 *              it, so the server does not verify it, only counts and CRCs it
 *              (give -M to both ends)
 *   -W FILE@OFF  sender: after the first OFF bytes of its stream, hold at
 *              it_hold(FILE) (the harness checks the fabric, then lets go);
 *              with -M, both senders hold after OFF/2 bytes each
 *   -E MS      after the first failed call, wait MS ms before closing (so
 *              the peer's view shows what the library did, not our close)
 *   -w FILE    hold the connection at it_hold(FILE) before closing
 *
 * Output, one line on stdout at the end:
 *   hookio: role=client tx=N tx_crc=X tx_end=ok|ERRNAME rx=N rx_crc=X
 *           rx_end=eof|early-eof|ERRNAME|mismatch@OFF frames_tx=N frames_rx=N
 *           xframe_at=OFF t_err=MS t_close=MS
 * tx/rx count the bytes the calls reported moved (rx: verified), crcs are
 * CRC-32 of them, frames_* the whole frames among them, xframe_at the
 * stream offset of the -X frame (0 without -X), t_err the wall clock
 * (ms) of the first failed call (0: none), t_close when close() was called.
 * Exit 0 when both streams went through complete and verified, 1 otherwise. */
#include "tests/progs/common.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAXIO (1u << 20)

/* ---- the streams ----------------------------------------------------------- */

struct stream {
  struct it_gen g;      /* payload bytes */
  uint64_t sizes;       /* PRNG of frame sizes */
  uint64_t pos, len;    /* bytes produced so far, stream length */
  uint64_t frame;       /* index of the current frame */
  uint8_t hdr[4];
  unsigned hdr_left;    /* header bytes still to produce */
  uint64_t body_left;   /* payload bytes still to produce */
  uint64_t frames_done; /* frames whose last byte was produced */
};

static uint64_t nbytes = 1u << 20, frame_max, xframe = UINT64_MAX, xframe_at;
static const char *pause_file;
static uint64_t pause_off;
static int framed;
static const char *inject;
static size_t inject_len;
static uint64_t inject_off;

static uint64_t frame_size(struct stream *s)
{
  uint64_t r = it_rand(&s->sizes);
  if (s->frame == xframe)
    return frame_max + 1;
  if (r % 16 == 0)
    return 0;            /* empty frames count too */
  return (r >> 8) % (frame_max + 1);
}

static void next_frame(struct stream *s)
{
  uint64_t n = frame_size(s);
  for (int i = 0; i < 4; i++)
    s->hdr[i] = (uint8_t)(n >> (24 - 8 * i));
  s->hdr_left = 4;
  s->body_left = n;
}

static void stream_init(struct stream *s, uint64_t seed)
{
  memset(s, 0, sizeof *s);
  it_gen_init(&s->g, seed);
  s->sizes = seed * 1000003;
  s->len = nbytes;
  if (!framed)
    return;
  /* Whole frames only: walk the sizes once to learn the length. */
  uint64_t total = 0;
  struct stream t = *s;
  for (t.frame = 0; total < nbytes; t.frame++) {
    if (t.frame == xframe && seed == 1)
      xframe_at = total; /* reported for stream A */
    total += 4 + frame_size(&t);
  }
  s->len = total;
  next_frame(s);
}

static void stream_fill(struct stream *s, uint8_t *buf, size_t n)
{
  uint64_t start = s->pos;
  if (!framed) {
    it_gen_fill(&s->g, buf, n);
  } else {
    size_t o = 0;
    while (o < n) {
      if (s->hdr_left) {
        buf[o++] = s->hdr[4 - s->hdr_left--];
      } else {
        size_t k = s->body_left < n - o ? (size_t)s->body_left : n - o;
        it_gen_fill(&s->g, buf + o, k);
        o += k;
        s->body_left -= k;
      }
      if (!s->hdr_left && !s->body_left) {
        s->frames_done++;
        s->frame++;
        next_frame(s);
      }
    }
  }
  s->pos += n;
  /* -I: the overlap of [start, start+n) with the injected text */
  for (size_t i = 0; inject && i < inject_len; i++)
    if (inject_off + i >= start && inject_off + i < start + n)
      buf[inject_off + i - start] = (uint8_t)inject[i];
}

/* ---- calls ---------------------------------------------------------------- */

static const char *const tx_names[] = { "send", "write", "writev", "sendmsg", "sendto", "sendfile" };
static const char *const rx_names[] = { "recv", "read", "readv", "recvmsg", "recvfrom", "peek", "waitall" };
#define NTX 6
#define NRX 7
static int tx_list[NTX], ntx, rx_list[NRX], nrx;
static uint64_t fixed_size, sizes_rng = 77;
static int tmpfd = -1;

static int parse_calls(const char *arg, const char *const *names, int n, int *list)
{
  char buf[256], *save = NULL;
  int k = 0;
  snprintf(buf, sizeof buf, "%s", arg);
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int i;
    for (i = 0; i < n && strcmp(t, names[i]); i++)
      ;
    if (i == n || k == n)
      it_die(2, "unknown call '%s'", t);
    list[k++] = i;
  }
  return k;
}

static size_t io_size_r(uint64_t *rng)
{
  static const uint64_t caps[] = { 16, 4096, 65536, MAXIO };
  if (fixed_size)
    return (size_t)fixed_size;
  uint64_t r = it_rand(rng);
  return 1 + (size_t)((r >> 8) % caps[r & 3]);
}

static size_t io_size(void)
{
  return io_size_r(&sizes_rng);
}

/* One send call of up to n bytes with the k-th call kind: bytes or -1. */
static ssize_t tx_call(int fd, int kind, const uint8_t *p, size_t n)
{
  size_t a = n / 3, b = n / 2;
  struct iovec v3[3] = { { (void *)p, a }, { (void *)(p + a), b - a }, { (void *)(p + b), n - b } };
  struct msghdr mh = { .msg_iov = v3 + 1, .msg_iovlen = 2 };
  switch (kind) {
  case 0: return send(fd, p, n, MSG_NOSIGNAL);
  case 1: return write(fd, p, n);
  case 2: return writev(fd, v3, 3);
  case 3: /* two pieces: [0, b) as one, the rest as the other */
    v3[1] = (struct iovec){ (void *)p, b };
    v3[2] = (struct iovec){ (void *)(p + b), n - b };
    return sendmsg(fd, &mh, MSG_NOSIGNAL);
  case 4: return sendto(fd, p, n, MSG_NOSIGNAL, NULL, 0);
  default: { /* sendfile from a temporary file, explicit offset or file position.
              * Each call's bytes go to a fresh part of the file: the kernel's
              * sendfile queues page references, so rewriting a page could
              * change bytes still in flight. */
    static off_t end;
    static int flip;
    off_t at = end;
    if (pwrite(tmpfd, p, n, at) != (ssize_t)n)
      it_die(2, "pwrite:");
    end += (off_t)n;
    if ((flip ^= 1))
      return sendfile(fd, tmpfd, &at, n);
    if (lseek(tmpfd, at, SEEK_SET) < 0)
      it_die(2, "lseek:");
    return sendfile(fd, tmpfd, NULL, n);
  }
  }
}

static ssize_t rx_call(int fd, int kind, uint8_t *p, size_t n, int *peek_bad)
{
  size_t a = n / 3, b = n / 2;
  struct iovec v3[3] = { { p, a }, { p + a, b - a }, { p + b, n - b } };
  struct msghdr mh = { .msg_iov = v3, .msg_iovlen = 3 };
  switch (kind) {
  case 0: return recv(fd, p, n, 0);
  case 1: return read(fd, p, n);
  case 2: return readv(fd, v3, 3);
  case 3: return recvmsg(fd, &mh, 0);
  case 4: return recvfrom(fd, p, n, 0, NULL, NULL);
  case 5: { /* peek, then read exactly what was peeked: the same bytes */
    static uint8_t *pk;
    if (!pk && !(pk = malloc(MAXIO)))
      it_die(2, "out of memory");
    ssize_t r = recv(fd, pk, n, MSG_PEEK);
    if (r <= 0)
      return r;
    ssize_t g = it_read_full(fd, p, (size_t)r);
    if (g == r && memcmp(pk, p, (size_t)r) != 0)
      *peek_bad = 1;
    return g;
  }
  default: return recv(fd, p, n, MSG_WAITALL);
  }
}

/* ---- the two phases ------------------------------------------------------- */

struct side {
  uint64_t bytes, frames;
  uint32_t crc;
  char end[48];
};

static uint64_t t_err;

static uint64_t wall_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void failed(struct side *s, int e)
{
  snprintf(s->end, sizeof s->end, "%s", it_errname(e));
  if (!t_err)
    t_err = wall_ms();
}

static int send_stream(int fd, uint64_t seed, struct side *s)
{
  struct stream st;
  uint8_t *buf = malloc(MAXIO);
  size_t have = 0, off = 0;
  int k = 0;
  if (!buf)
    it_die(2, "out of memory");
  stream_init(&st, seed);
  while (off < have || st.pos < st.len) {
    if (off == have) { /* next piece of the stream */
      size_t n = io_size();
      if (n > st.len - st.pos)
        n = (size_t)(st.len - st.pos);
      if (pause_file && st.pos < pause_off && n > pause_off - st.pos)
        n = (size_t)(pause_off - st.pos); /* stop right at the hold point */
      if (pause_file && st.pos == pause_off) {
        it_hold(pause_file);
        pause_file = NULL;
      }
      stream_fill(&st, buf, n);
      have = n;
      off = 0;
    }
    ssize_t w = tx_call(fd, tx_list[k++ % ntx], buf + off, have - off);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      failed(s, w < 0 ? errno : EIO);
      break;
    }
    s->crc = it_crc32(s->crc, buf + off, (size_t)w);
    s->bytes += (uint64_t)w;
    off += (size_t)w;
  }
  s->frames = st.frames_done;
  if (st.pos == st.len && off == have) {
    snprintf(s->end, sizeof s->end, "ok");
    if (shutdown(fd, SHUT_WR) < 0)
      failed(s, errno);
  }
  free(buf);
  return strcmp(s->end, "ok") == 0 ? 0 : -1;
}

/* -M: two threads sending at once. */
struct mt_half {
  pthread_t t;
  int fd, err;
  uint64_t seed, n, sent;
};

/* -W with -M: each sender stops after half the hold point; the second to
 * get there holds at the file while the first waits, then both go on. */
static pthread_mutex_t mt_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t mt_cond = PTHREAD_COND_INITIALIZER;
static int mt_arrived;
static bool mt_released;

static void mt_pause(void)
{
  pthread_mutex_lock(&mt_lock);
  if (++mt_arrived == 2) {
    pthread_mutex_unlock(&mt_lock);
    it_hold(pause_file);
    pthread_mutex_lock(&mt_lock);
    mt_released = true;
    pthread_cond_broadcast(&mt_cond);
  } else {
    while (!mt_released)
      pthread_cond_wait(&mt_cond, &mt_lock);
  }
  pthread_mutex_unlock(&mt_lock);
}

static void *mt_sender(void *arg)
{
  struct mt_half *h = arg;
  bool held = pause_file == NULL;
  uint64_t half = pause_off / 2;
  struct it_gen g;
  uint8_t *buf = malloc(MAXIO);
  uint64_t rng = h->seed * 31;
  int k = 0;
  if (!buf)
    it_die(2, "out of memory");
  it_gen_init(&g, h->seed);
  while (h->sent < h->n && !h->err) {
    size_t n = io_size_r(&rng), off = 0;
    if (n > h->n - h->sent)
      n = (size_t)(h->n - h->sent);
    if (!held && h->sent >= half) {
      mt_pause();
      held = true;
    }
    if (!held && n > half - h->sent)
      n = (size_t)(half - h->sent); /* stop right at the hold point */
    it_gen_fill(&g, buf, n);
    while (off < n) {
      ssize_t w = tx_call(h->fd, k++ % 5, buf + off, n - off); /* no sendfile: it shares a file */
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0) {
        h->err = w < 0 ? errno : EIO;
        break;
      }
      off += (size_t)w;
    }
    h->sent += off;
  }
  if (!held)
    mt_pause(); /* failed before the hold point: never leave the other one waiting */
  free(buf);
  return NULL;
}

static int send_stream_mt(int fd, struct side *s)
{
  struct mt_half h[2] = { { .fd = fd, .seed = 11, .n = nbytes / 2 },
                          { .fd = fd, .seed = 12, .n = nbytes - nbytes / 2 } };
  for (int i = 0; i < 2; i++)
    if (pthread_create(&h[i].t, NULL, mt_sender, &h[i]) != 0)
      it_die(2, "pthread_create failed");
  for (int i = 0; i < 2; i++)
    pthread_join(h[i].t, NULL);
  s->bytes = h[0].sent + h[1].sent;
  if (h[0].err || h[1].err) {
    failed(s, h[0].err ? h[0].err : h[1].err);
    return -1;
  }
  snprintf(s->end, sizeof s->end, "ok");
  if (shutdown(fd, SHUT_WR) < 0)
    failed(s, errno);
  return strcmp(s->end, "ok") == 0 ? 0 : -1;
}

static int mt;

static int recv_stream(int fd, uint64_t seed, struct side *s)
{
  struct stream st;
  uint8_t *buf = malloc(MAXIO), *want = malloc(MAXIO);
  int k = 0, peek_bad = 0;
  if (!buf || !want)
    it_die(2, "out of memory");
  stream_init(&st, seed);
  for (;;) {
    size_t n = io_size();
    ssize_t r = rx_call(fd, rx_list[k++ % nrx], buf, n, &peek_bad);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      failed(s, errno);
      break;
    }
    if (r == 0) {
      snprintf(s->end, sizeof s->end, st.pos == st.len ? "eof" : "early-eof");
      break;
    }
    if ((uint64_t)r > st.len - st.pos) {
      snprintf(s->end, sizeof s->end, "extra@%llu", (unsigned long long)st.len);
      break;
    }
    stream_fill(&st, want, (size_t)r);
    size_t d = 0;
    while (d < (size_t)r && (buf[d] == want[d] || (mt && seed == 1)))
      d++; /* -M: stream A's order is not known in advance */
    if (d < (size_t)r || peek_bad) {
      snprintf(s->end, sizeof s->end, "%s@%llu", peek_bad ? "peekdiff" : "mismatch",
               (unsigned long long)(s->bytes + d));
      break;
    }
    s->crc = it_crc32(s->crc, buf, (size_t)r);
    s->bytes += (uint64_t)r;
  }
  s->frames = st.frames_done;
  free(buf);
  free(want);
  return strcmp(s->end, "eof") == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
  int opt, port = 0, listen_mode = 0, hold_ms = 0;
  const char *portfile = NULL, *holdfile = NULL, *txl = NULL, *rxl = NULL;
  it_prog = "hookio";
  while ((opt = getopt(argc, argv, "lp:P:n:F:X:I:s:T:R:MW:E:w:")) != -1) {
    switch (opt) {
    case 'l': listen_mode = 1; break;
    case 'p': port = atoi(optarg); break;
    case 'P': portfile = optarg; break;
    case 'n': nbytes = it_size(optarg); break;
    case 'F': framed = 1; frame_max = it_size(optarg); break;
    case 'X': xframe = strtoull(optarg, NULL, 10); break;
    case 'I': {
      const char *at = strrchr(optarg, '@');
      if (!at || at == optarg)
        it_die(2, "-I TEXT@OFFSET");
      inject = optarg;
      inject_len = (size_t)(at - optarg);
      inject_off = it_size(at + 1);
      break;
    }
    case 's': fixed_size = it_size(optarg); break;
    case 'T': txl = optarg; break;
    case 'R': rxl = optarg; break;
    case 'W': {
      char *at = strrchr(optarg, '@');
      if (!at)
        it_die(2, "-W FILE@OFFSET");
      *at = '\0';
      pause_file = optarg;
      pause_off = it_size(at + 1);
      break;
    }
    case 'M': mt = 1; break;
    case 'E': hold_ms = atoi(optarg); break;
    case 'w': holdfile = optarg; break;
    default:
      it_die(2, "usage: hookio -l [-P portfile] | -p port  [-n bytes] [-F max [-X k]] [-I text@off] "
                "[-s size] [-T calls] [-R calls] [-M] [-W file@off] [-E ms] [-w holdfile]");
    }
  }
  if (fixed_size > MAXIO || (!listen_mode && !port))
    it_die(2, "bad arguments");
  ntx = txl ? parse_calls(txl, tx_names, NTX, tx_list) : NTX;
  nrx = rxl ? parse_calls(rxl, rx_names, NRX, rx_list) : NRX;
  for (int i = 0; !txl && i < NTX; i++)
    tx_list[i] = i;
  for (int i = 0; !rxl && i < NRX; i++)
    rx_list[i] = i;
  signal(SIGPIPE, SIG_IGN);
  char tmpl[] = "/tmp/hookio.XXXXXX";
  if ((tmpfd = mkstemp(tmpl)) < 0)
    it_die(2, "mkstemp:");
  unlink(tmpl);

  int fd;
  if (listen_mode) {
    int bound, lfd = it_listen(0, NULL, 0, 4, &bound);
    if (portfile)
      it_write_port(portfile, bound);
    do
      fd = accept(lfd, NULL, NULL);
    while (fd < 0 && errno == EINTR);
    if (fd < 0)
      it_die(2, "accept:");
    close(lfd);
  } else if ((fd = it_connect(0, NULL, port)) < 0) {
    it_die(2, "connect to port %d:", port);
  }

  struct side tx = { .end = "not-run" }, rx = { .end = "not-run" };
  int ok;
  if (listen_mode) {
    ok = recv_stream(fd, 1, &rx) == 0;
    ok &= send_stream(fd, 2, &tx) == 0;
  } else {
    ok = (mt ? send_stream_mt(fd, &tx) : send_stream(fd, 1, &tx)) == 0;
    ok &= recv_stream(fd, 2, &rx) == 0;
  }
  if (t_err && hold_ms > 0)
    it_sleep_us((unsigned)hold_ms * 1000u);
  it_hold(holdfile);
  uint64_t t_close = wall_ms();
  close(fd);
  printf("hookio: role=%s tx=%llu tx_crc=%08x tx_end=%s rx=%llu rx_crc=%08x rx_end=%s "
         "frames_tx=%llu frames_rx=%llu xframe_at=%llu t_err=%llu t_close=%llu\n",
         listen_mode ? "server" : "client", (unsigned long long)tx.bytes, tx.crc, tx.end,
         (unsigned long long)rx.bytes, rx.crc, rx.end, (unsigned long long)tx.frames,
         (unsigned long long)rx.frames, (unsigned long long)xframe_at, (unsigned long long)t_err,
         (unsigned long long)t_close);
  return ok ? 0 : 1;
}
