/* Shared helpers for the integration test programs (tests/progs/).
 *
 * These programs are ordinary socket applications: they know nothing about
 * libfabsock and link nothing of it, so the integration harness can run them
 * with and without LD_PRELOAD and compare.  Data integrity is checked with a
 * deterministic byte stream (gen_*): the receiver regenerates what the sender
 * wrote, whatever the chunking, and reports the first differing offset.
 *
 * Exit codes used by all programs: 0 ok, 1 verification/behaviour failure,
 * 2 setup failure (bad usage, cannot listen, ...). */
#ifndef IT_COMMON_H
#define IT_COMMON_H

#ifndef _GNU_SOURCE /* config.h defines it in the build; keep a standalone gcc happy */
#define _GNU_SOURCE 1
#endif

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

extern const char *it_prog;

/* Print "prog: msg" (and strerror(errno) when the format ends with ':'), exit. */
void it_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
void it_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "ECONNREFUSED" for ECONNREFUSED, "E0" for 0, "E<n>" when unknown. */
const char *it_errname(int e);

/* Parse "123", "4K", "20M", "1G"; exits on garbage. */
uint64_t it_size(const char *s);

uint64_t it_now_ns(void);
void it_sleep_us(unsigned us);

/* host NULL means loopback of the family (127.0.0.1 or ::1). */
int it_listen(int v6, const char *host, int port, int backlog, int *bound_port);
int it_connect(int v6, const char *host, int port); /* blocking; -1 + errno */
/* Write the port (then "\n") to path atomically (tmp + rename). */
void it_write_file(const char *path, const char *text);
void it_write_port(const char *path, int port);

ssize_t it_write_all(int fd, const void *buf, size_t n);
ssize_t it_read_full(int fd, void *buf, size_t n); /* < n only at EOF */

/* Deterministic byte stream: chunking-independent. */
struct it_gen {
  uint64_t state;
  uint64_t word;
  unsigned used; /* bytes of word already handed out (8 = none left) */
};
void it_gen_init(struct it_gen *g, uint64_t seed);
void it_gen_fill(struct it_gen *g, void *buf, size_t n);

/* Small PRNG for sizes and sleeps. */
uint64_t it_rand(uint64_t *s);

uint32_t it_crc32(uint32_t crc, const void *buf, size_t n);

/* Send n bytes of stream(seed) on fd and receive/verify the n echoed bytes,
 * interleaved with poll() and MSG_DONTWAIT (so no deadlock against a bounded
 * echo server). Leaves the connection open.  0 ok, else -1 with a message
 * in err. */
int it_echo_roundtrip(int fd, uint64_t n, uint64_t seed, size_t chunk, char *err, size_t errlen);
/* shutdown(SHUT_WR), then expect EOF with no extra byte. */
int it_echo_finish(int fd, char *err, size_t errlen);
/* How long a poll() in the helpers waits before calling it a hang:
 * $FABSOCK_IT_POLL_MS, default 15000. */
int it_poll_ms(void);

/* Harness hold point (fabric checks): when path is non-NULL, create
 * "<path>.ready" and wait (up to 30 s) until "<path>" exists. */
void it_hold(const char *path);

/* Open descriptors of this process (entries of /proc/self/fd, less the
 * one the count itself opens). */
int it_count_fds(void);
/* How many descriptors are open (all, one listing), and those below MAX
 * as a 0/1 map (open_fds NULL: none); then each one open now that was not in the map, with what
 * it is, to OUT (to name a leak). */
int it_fd_snapshot(unsigned char *open_fds, int max);
void it_fd_report_new(const unsigned char *before, int max, FILE *out);

/* Client of a one-way stream test (splicer, uringio): n bytes of
 * stream(42) in a new buffer, a connection to port on 127.0.0.1 (held at
 * it_hold(hold)), and the first *first bytes (0 or over n: half) sent with
 * send().  Exits on any failure. */
char *it_stream_client(int port, uint64_t n, uint64_t *first, const char *hold, int *fd);
/* Its server: read the first rfirst bytes of fd with read(); bytes and crc
 * go on.  False at EOF before that many.  Exits on any failure. */
bool it_stream_server_first(int fd, uint64_t rfirst, uint64_t *bytes, uint32_t *crc);

#endif
