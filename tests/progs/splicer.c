/* splicer: a stream that switches to splice() half way, at both ends.
 *
 *   splicer -l [-P portfile] [-r BYTES] [-w holdfile]   server, one connection
 *   splicer -c -p port -n BYTES [-s BYTES] [-H holdfile] [-w holdfile]
 *
 * The client sends BYTES of a seeded stream: the first -s (default half)
 * with send(), the rest with splice(pipe -> socket), then shuts down its
 * side.  The server reads the first -r bytes (default 512 KiB) with
 * recv(), the rest with splice(socket -> pipe) and read(pipe), until EOF.
 * splice works on the kernel socket only: under libfabsock the connection
 * must go back to TCP, byte-exact, or the call waits forever for bytes
 * sitting in a fabric ring.
 *   -H FILE   client: hold at it_hold(FILE) after connect (the harness lets
 *             go once the connection is on a fabric)
 *   -w FILE   hold at it_hold(FILE) once done, before closing (for a stat)
 * Each prints one line: "splicer: role=R bytes=N crc=X"; exit 0, or 1 on
 * any error (named on stderr). */
#include "tests/progs/common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHUNK 65536

/* Splice exactly n bytes of buf into fd, through a pipe. */
static int splice_out(int fd, const char *buf, size_t n)
{
  int p[2];
  if (pipe(p) < 0)
    return -1;
  size_t done = 0;
  while (done < n) {
    size_t k = n - done < CHUNK ? n - done : CHUNK;
    if (it_write_all(p[1], buf + done, k) < 0)
      return -1;
    size_t moved = 0;
    while (moved < k) {
      ssize_t s = splice(p[0], NULL, fd, NULL, k - moved, SPLICE_F_MOVE);
      if (s < 0 && errno == EINTR)
        continue;
      if (s <= 0)
        return -1;
      moved += (size_t)s;
    }
    done += k;
  }
  close(p[0]);
  close(p[1]);
  return 0;
}

/* splice(fd -> pipe) and read the pipe until EOF: bytes and crc go on. */
static int splice_in(int fd, uint64_t *bytes, uint32_t *crc)
{
  int p[2];
  static char buf[CHUNK];
  if (pipe(p) < 0)
    return -1;
  for (;;) {
    ssize_t s = splice(fd, NULL, p[1], NULL, CHUNK, SPLICE_F_MOVE);
    if (s < 0 && errno == EINTR)
      continue;
    if (s < 0)
      return -1;
    if (s == 0)
      break;
    if (it_read_full(p[0], buf, (size_t)s) != s)
      return -1;
    *crc = it_crc32(*crc, buf, (size_t)s);
    *bytes += (uint64_t)s;
  }
  close(p[0]);
  close(p[1]);
  return 0;
}

int main(int argc, char **argv)
{
  int opt, listen_mode = 0, port = 0;
  uint64_t n = 0, first = 0, rfirst = 512 * 1024;
  const char *portfile = NULL, *hold = NULL, *endhold = NULL;
  it_prog = "splicer";
  while ((opt = getopt(argc, argv, "lcp:P:n:s:r:H:w:")) != -1) {
    switch (opt) {
    case 'l': listen_mode = 1; break;
    case 'c': listen_mode = 0; break;
    case 'p': port = atoi(optarg); break;
    case 'P': portfile = optarg; break;
    case 'n': n = it_size(optarg); break;
    case 's': first = it_size(optarg); break;
    case 'r': rfirst = it_size(optarg); break;
    case 'H': hold = optarg; break;
    case 'w': endhold = optarg; break;
    default: it_die(2, "usage: splicer -l [-P portfile] [-r bytes] [-w f] | -c -p port -n bytes [-s bytes] [-H f] [-w f]");
    }
  }
  uint64_t bytes = 0;
  uint32_t crc = 0;
  if (listen_mode) {
    int bound, lfd = it_listen(0, NULL, 0, 4, &bound);
    if (portfile)
      it_write_port(portfile, bound);
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0)
      it_die(1, "accept:");
    if (it_stream_server_first(fd, rfirst, &bytes, &crc) && splice_in(fd, &bytes, &crc) < 0)
      it_die(1, "splice in after %llu bytes:", (unsigned long long)bytes);
    printf("splicer: role=server bytes=%llu crc=%08x\n", (unsigned long long)bytes, crc);
    fflush(stdout);
    it_hold(endhold);
    return 0;
  }
  int fd;
  char *buf = it_stream_client(port, n, &first, hold, &fd);
  if (splice_out(fd, buf + first, n - first) < 0)
    it_die(1, "splice out:");
  if (shutdown(fd, SHUT_WR) < 0)
    it_die(1, "shutdown:");
  printf("splicer: role=client bytes=%llu crc=%08x\n", (unsigned long long)n, it_crc32(0, buf, n));
  fflush(stdout);
  it_hold(endhold);
  return 0;
}
