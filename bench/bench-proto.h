/* fabsock-bench: the wire protocol between its client and server, and the
 * helpers both sides use.
 *
 * Wire protocol (both ends are fabsock-bench; integers big-endian):
 *
 * Every connection starts with a 64-byte hello from the client:
 *     0  char[8] "FSBENCH1"
 *     8  u32     test (enum bench_test)
 *    12  u32     0
 *    16  u64     message size
 *    24  u64     sequence number (connrate: the client's connection count)
 *    32  zero padding to 64
 *
 * ping-pong: the client sends `size` bytes, the server reads all of them and
 *   sends them back; repeated until the client closes.  The client stamps
 *   bytes 0..7 with the round-trip number and the last 8 bytes with its
 *   complement (when size >= 16) and checks the echo.
 * stream: the client sends messages of `size` (>= 16) bytes.  Message byte 0
 *   is the kind (0 data, 1 sync, 2 end), bytes 8..15 a sequence number from 0
 *   that the server checks; the rest is payload (--fill: constant 0x3c,
 *   random bytes, or random lowercase letters).  After a whole sync or end
 *   message the server replies 24 bytes: u64 bytes received since its
 *   previous reply (this message included), u64 nanoseconds from the first of
 *   those bytes to the last, u64 CPU nanoseconds the receiving thread used
 *   meanwhile.  After sync the client waits for that reply, then starts its
 *   timer; after end it closes.
 * connrate: the hello is the request; the server replies 64 bytes ("FSBENCHR",
 *   then the hello's bytes 8..63) and closes.
 *
 * Framed (client --framed, for a frame hook: frame:header=len32be): every
 * unit above is one len32be frame.  The hello is preceded by the 4 bytes
 * 00 00 00 40 (the server tells the two hellos apart by them) and so is the
 * connrate reply; replies are preceded by 00 00 00 18; a ping-pong or stream
 * message of `size` bytes (>= 16) starts with size - 4 as a big-endian u32
 * and keeps its fields 4 bytes later (stream: kind at byte 4, sequence at
 * bytes 8..15 as before; ping-pong: the stamp at bytes 4..11).
 *
 * No message boundaries are assumed on the stream: every read and write
 * loops over partial transfers. */
#ifndef BENCH_PROTO_H
#define BENCH_PROTO_H

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#define HELLO_LEN 64
#define STREAM_HDR 16
#define REPLY_LEN 24
#define FRAME_HDR 4 /* framed: the len32be header */
enum { K_DATA = 0, K_SYNC = 1, K_END = 2 };

static inline void put64(unsigned char *p, uint64_t v) {
  for (int i = 7; i >= 0; i--, v >>= 8) p[i] = (unsigned char)v;
}
static inline uint64_t get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | p[i];
  return v;
}
static inline void put32(unsigned char *p, uint32_t v) {
  for (int i = 3; i >= 0; i--, v >>= 8) p[i] = (unsigned char)v;
}
static inline uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Read exactly n bytes.  Returns n, 0 on EOF before the first byte, -1 on
 * error or EOF in the middle (errno set; EPIPE for a short message). */
static inline ssize_t read_full(int fd, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char *)buf + got, n - got);
    if (r > 0) got += (size_t)r;
    else if (r == 0) {
      if (got == 0) return 0;
      errno = EPIPE;
      return -1;
    } else if (errno != EINTR) return -1;
  }
  return (ssize_t)n;
}

static inline int write_full(int fd, const void *buf, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = write(fd, (const char *)buf + done, n - done);
    if (r > 0) done += (size_t)r;
    else if (r < 0 && errno != EINTR) return -1;
  }
  return 0;
}

static inline void nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

#endif
