/* uringio: a stream whose ends switch to io_uring, as an io_uring server or
 * client would use it.
 *
 *   uringio -l [-P portfile] [-r BYTES] [-A] [-L] [-w holdfile]   server, one connection
 *   uringio -c -p port -n BYTES [-s BYTES] [-L] [-H holdfile] [-w holdfile]
 *
 * The client sends BYTES of a seeded stream: the first -s (default half)
 * with send(), then sets up a ring and sends the rest with IORING_OP_SEND
 * (no ring when -s is BYTES), then shuts down its side.  The server reads the first -r bytes (default
 * 512 KiB) with recv(), then sets up a ring and reads the rest with
 * IORING_OP_RECV until EOF.  With -A the server sets up its ring before
 * anything else and accepts and reads everything through it (-r ignored).
 * A ring's operations go to the kernel socket without passing through any
 * libc call: under libfabsock the connection must be back on TCP,
 * byte-exact, or the ring waits forever for bytes sitting in a fabric ring.
 *   -L        make the ring with liburing (io_uring_queue_init) rather than
 *             with syscall(SYS_io_uring_setup); exit 77 when built without it
 *   -F        a liburing ring for file reads alone (InnoDB's way), made
 *             before the connection and used again once the stream is done
 *             (server) or sent (client); the stream is send()/recv()'s (the
 *             server reads up to 64 MiB)
 *   -H FILE   client: hold at it_hold(FILE) after connect (the harness lets
 *             go once the connection is on a fabric)
 *   -w FILE   hold at it_hold(FILE) once done, before closing (for a stat)
 *   -V        print "liburing=yes" or "liburing=no" (how it was built), exit
 * Each prints one line: "uringio: role=R bytes=N crc=X"; exit 0, 1 on any
 * error (named on stderr), 77 when this kernel refuses io_uring. */
#include "tests/progs/common.h"

#include <errno.h>
#include <linux/io_uring.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifdef HAVE_LIBURING
#include <liburing.h>
#endif

#define CHUNK 65536

/* A ring with one operation in flight at a time: raw (the system calls
 * through syscall(), as libuv or Rust's libc crate do) or liburing. */
struct ring {
  int lib;
  int fd;
  unsigned *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
  struct io_uring_sqe *sqes;
  struct io_uring_cqe *cqes;
#ifdef HAVE_LIBURING
  struct io_uring u;
#endif
};

static int ring_refused(int e)
{
  return e == ENOSYS || e == EPERM || e == EACCES;
}

static void ring_init(struct ring *r, int lib)
{
  memset(r, 0, sizeof *r);
  r->lib = lib;
  if (lib) {
#ifdef HAVE_LIBURING
    int rc = io_uring_queue_init(8, &r->u, 0);
    if (rc < 0) {
      errno = -rc;
      it_die(ring_refused(-rc) ? 77 : 1, "io_uring_queue_init:");
    }
    return;
#else
    it_die(77, "built without liburing (liburing-dev)");
#endif
  }
  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  r->fd = (int)syscall(SYS_io_uring_setup, 8, &p);
  if (r->fd < 0)
    it_die(ring_refused(errno) ? 77 : 1, "io_uring_setup:");
  size_t sqsz = p.sq_off.array + p.sq_entries * sizeof(unsigned);
  size_t cqsz = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
  if (!(p.features & IORING_FEAT_SINGLE_MMAP))
    it_die(77, "io_uring without IORING_FEAT_SINGLE_MMAP (kernel older than 5.4)");
  size_t sz = sqsz > cqsz ? sqsz : cqsz;
  char *sq = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQ_RING);
  void *sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES);
  if (sq == MAP_FAILED || sqes == MAP_FAILED)
    it_die(1, "mmap io_uring:");
  r->sq_tail = (unsigned *)(sq + p.sq_off.tail);
  r->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
  r->sq_array = (unsigned *)(sq + p.sq_off.array);
  r->cq_head = (unsigned *)(sq + p.cq_off.head);
  r->cq_tail = (unsigned *)(sq + p.cq_off.tail);
  r->cq_mask = (unsigned *)(sq + p.cq_off.ring_mask);
  r->cqes = (struct io_uring_cqe *)(sq + p.cq_off.cqes);
  r->sqes = sqes;
}

/* Run one operation on fd and wait for it: its result (>= 0 or -errno). */
static int ring_op(struct ring *r, int op, int fd, void *buf, size_t n)
{
#ifdef HAVE_LIBURING
  if (r->lib) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->u);
    if (op == IORING_OP_RECV)
      io_uring_prep_recv(sqe, fd, buf, n, 0);
    else if (op == IORING_OP_SEND)
      io_uring_prep_send(sqe, fd, buf, n, 0);
    else
      io_uring_prep_accept(sqe, fd, NULL, NULL, 0);
    int rc = io_uring_submit(&r->u);
    struct io_uring_cqe *cqe = NULL;
    while (rc >= 0 && (rc = io_uring_wait_cqe(&r->u, &cqe)) == -EINTR)
      ;
    if (rc < 0)
      return rc;
    int res = cqe->res;
    io_uring_cqe_seen(&r->u, cqe);
    return res;
  }
#endif
  unsigned tail = *r->sq_tail, idx = tail & *r->sq_mask;
  struct io_uring_sqe *sqe = &r->sqes[idx];
  memset(sqe, 0, sizeof *sqe);
  sqe->opcode = (uint8_t)op;
  sqe->fd = fd;
  sqe->addr = (uint64_t)(uintptr_t)buf;
  sqe->len = (uint32_t)n;
  r->sq_array[idx] = idx;
  __atomic_store_n(r->sq_tail, tail + 1, __ATOMIC_RELEASE);
  unsigned submit = 1;
  for (;;) {
    unsigned head = *r->cq_head;
    if (head != __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE)) {
      int res = r->cqes[head & *r->cq_mask].res;
      __atomic_store_n(r->cq_head, head + 1, __ATOMIC_RELEASE);
      return res;
    }
    long rc = syscall(SYS_io_uring_enter, r->fd, submit, 1, IORING_ENTER_GETEVENTS, NULL, 0);
    if (rc < 0 && errno != EINTR)
      return -errno;
    if (rc >= 0)
      submit = 0;
  }
}

/* As InnoDB (MariaDB) does: file I/O through a liburing ring, the stream
 * never in it.  A 64 KiB scratch file, read through the ring by its fd and
 * as a registered (fixed) file, each read checked. */
static void ring_file_reads(struct ring *r)
{
#ifdef HAVE_LIBURING
  char path[] = "/tmp/uringio.XXXXXX", want[CHUNK], got[CHUNK];
  int ffd = mkstemp(path);
  if (ffd < 0)
    it_die(1, "mkstemp:");
  unlink(path);
  for (size_t i = 0; i < sizeof want; i++)
    want[i] = (char)(i * 7);
  if (it_write_all(ffd, want, sizeof want) != (ssize_t)sizeof want)
    it_die(1, "write scratch file:");
  static int registered; /* the second time, the registered slot is updated */
  int reg = registered++ ? io_uring_register_files_update(&r->u, 0, &ffd, 1) : io_uring_register_files(&r->u, &ffd, 1);
  if (reg < 0)
    it_die(1, "io_uring_register_files: %s", strerror(-reg));
  for (int fixed = 0; fixed < 2; fixed++) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->u);
    memset(got, 0, sizeof got);
    io_uring_prep_read(sqe, fixed ? 0 : ffd, got, sizeof got, 0);
    if (fixed)
      sqe->flags |= IOSQE_FIXED_FILE;
    struct io_uring_cqe *cqe = NULL;
    int rc = io_uring_submit(&r->u);
    while (rc >= 0 && (rc = io_uring_wait_cqe(&r->u, &cqe)) == -EINTR)
      ;
    if (rc < 0 || cqe->res != (int)sizeof got || memcmp(got, want, sizeof got) != 0)
      it_die(1, "ring file read (fixed %d): %d", fixed, rc < 0 ? rc : cqe->res);
    io_uring_cqe_seen(&r->u, cqe);
  }
  close(ffd);
#else
  (void)r;
  it_die(77, "built without liburing (liburing-dev)");
#endif
}

/* Send exactly n bytes of buf through the ring. */
static int ring_send_all(struct ring *r, int fd, const char *buf, size_t n)
{
  size_t done = 0;
  while (done < n) {
    size_t k = n - done < CHUNK ? n - done : CHUNK;
    int s = ring_op(r, IORING_OP_SEND, fd, (void *)(buf + done), k);
    if (s <= 0) {
      errno = s < 0 ? -s : EPIPE;
      return -1;
    }
    done += (size_t)s;
  }
  return 0;
}

/* Receive through the ring until EOF: bytes and crc go on. */
static int ring_recv_all(struct ring *r, int fd, uint64_t *bytes, uint32_t *crc)
{
  static char buf[CHUNK];
  for (;;) {
    int s = ring_op(r, IORING_OP_RECV, fd, buf, sizeof buf);
    if (s < 0) {
      errno = -s;
      return -1;
    }
    if (s == 0)
      return 0;
    *crc = it_crc32(*crc, buf, (size_t)s);
    *bytes += (uint64_t)s;
  }
}

static void report(const char *role, uint64_t bytes, uint32_t crc)
{
  printf("uringio: role=%s bytes=%llu crc=%08x\n", role, (unsigned long long)bytes, crc);
  fflush(stdout);
}

static void serve(const char *portfile, uint64_t rfirst, int ring_first, int lib, int files, const char *endhold)
{
  struct ring r;
  uint64_t bytes = 0;
  uint32_t crc = 0;
  if (files) { /* a ring for files alone: the stream is recv()'s */
    ring_init(&r, 1);
    ring_file_reads(&r);
    rfirst = 64u << 20; /* past any stream the harness sends: recv() to its EOF */
  }
  if (ring_first)
    ring_init(&r, lib);
  int bound, lfd = it_listen(0, NULL, 0, 4, &bound);
  if (portfile)
    it_write_port(portfile, bound);
  int fd;
  if (ring_first) {
    fd = ring_op(&r, IORING_OP_ACCEPT, lfd, NULL, 0);
    if (fd < 0) {
      errno = -fd;
      it_die(1, "ring accept:");
    }
  } else {
    fd = accept(lfd, NULL, NULL);
    if (fd < 0)
      it_die(1, "accept:");
    if (!it_stream_server_first(fd, rfirst, &bytes, &crc))
      goto done; /* EOF before the switch (with -F: the whole stream) */
    ring_init(&r, lib);
  }
  if (ring_recv_all(&r, fd, &bytes, &crc) < 0)
    it_die(1, "ring recv after %llu bytes:", (unsigned long long)bytes);
done:
  if (files)
    ring_file_reads(&r); /* the ring again, the connection on its fabric */
  report("server", bytes, crc);
  it_hold(endhold);
}

int main(int argc, char **argv)
{
  int opt, listen_mode = 0, port = 0, ring_first = 0, lib = 0, files = 0;
  uint64_t n = 0, first = 0, rfirst = 512 * 1024;
  const char *portfile = NULL, *hold = NULL, *endhold = NULL;
  it_prog = "uringio";
  while ((opt = getopt(argc, argv, "lcp:P:n:s:r:ALFH:w:V")) != -1) {
    switch (opt) {
    case 'V':
#ifdef HAVE_LIBURING
      puts("liburing=yes");
#else
      puts("liburing=no");
#endif
      return 0;
    case 'l': listen_mode = 1; break;
    case 'c': listen_mode = 0; break;
    case 'p': port = atoi(optarg); break;
    case 'P': portfile = optarg; break;
    case 'n': n = it_size(optarg); break;
    case 's': first = it_size(optarg); break;
    case 'r': rfirst = it_size(optarg); break;
    case 'A': ring_first = 1; break;
    case 'L': lib = 1; break;
    case 'F': files = 1; break;
    case 'H': hold = optarg; break;
    case 'w': endhold = optarg; break;
    default:
      it_die(2, "usage: uringio -l [-P portfile] [-r bytes] [-A] [-L] [-F] [-w f] | -c -p port -n bytes [-s bytes] "
                "[-L] [-F] [-H f] [-w f]");
    }
  }
  if (listen_mode) {
    serve(portfile, rfirst, ring_first, lib, files, endhold);
    return 0;
  }
  int fd;
  struct ring r;
  if (files) { /* a ring for files alone: the stream is send()'s */
    ring_init(&r, 1);
    ring_file_reads(&r);
    first = n;
  }
  char *buf = it_stream_client(port, n, &first, hold, &fd);
  if (files)
    ring_file_reads(&r);
  if (first < n) {
    ring_init(&r, lib);
    if (ring_send_all(&r, fd, buf + first, n - first) < 0)
      it_die(1, "ring send:");
  }
  if (shutdown(fd, SHUT_WR) < 0)
    it_die(1, "shutdown:");
  report("client", n, it_crc32(0, buf, n));
  it_hold(endhold);
  return 0;
}
