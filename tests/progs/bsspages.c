/* bsspages: how many pages of a preloaded library's .bss a short program
 * touched (tests/t_libshape.sh, check 4).  Each first touch of one is a
 * page fault, 10-14 us here, paid by every process start that runs the
 * path: the library keeps the state such a process touches in .data (its
 * FS_HOT), whose page the loader writes anyway.
 *
 * usage: bsspages none|client|server LIBNAME
 *   none    reads and writes a pipe and closes it (a shell tool: cat)
 *   client  a one-shot client: socket, connect, send, recv a 4,500-byte
 *           reply (past half the upgrade threshold, as curl's of a 4 KiB
 *           file), close
 *   server  the same with the listener and accepted end in this process
 * Prints "bss_kb N": KiB of LIBNAME's .bss present after the run, past the
 * page where its file data ends (-1: not loaded, e.g. not preloaded); and
 * "stat_file 0|1": whether its stat table is a file ($FABSOCK_STATDIR,
 * default /dev/shm) at the end (t_libshape check 7: a one-shot client
 * keeps its table in its own memory, a server publishes it). */
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common.h"

struct bss_find {
  const char *lib;
  uintptr_t lo, hi; /* the .bss pages past the file's last one */
};

static int bss_find_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
  (void)size;
  struct bss_find *b = arg;
  if (!info->dlpi_name || !strstr(info->dlpi_name, b->lib))
    return 0;
  long pg = sysconf(_SC_PAGESIZE);
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W))
      continue;
    uintptr_t file_end = info->dlpi_addr + ph->p_vaddr + ph->p_filesz;
    b->lo = (file_end + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
    b->hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
    return 1;
  }
  return 0;
}

/* KiB of lib's .bss present (pagemap's bit 63), past the page where the
 * file's data ends (the loader writes that one anyway); -1 if lib is not
 * loaded or pagemap cannot be read. */
static long bss_kb(const char *lib)
{
  struct bss_find b = { lib, 0, 0 };
  if (!dl_iterate_phdr(bss_find_cb, &b))
    return -1;
  int fd = open("/proc/self/pagemap", O_RDONLY);
  if (fd < 0)
    return -1;
  long pg = sysconf(_SC_PAGESIZE), kb = 0;
  for (uintptr_t a = b.lo; a < b.hi; a += (uintptr_t)pg) {
    uint64_t e;
    if (pread(fd, &e, sizeof e, (off_t)(a / (uintptr_t)pg * sizeof e)) != sizeof e) {
      kb = -1;
      break;
    }
    if (e >> 63 & 1)
      kb += pg / 1024;
  }
  close(fd);
  return kb;
}

int main(int argc, char **argv)
{
  it_prog = "bsspages";
  if (argc != 3)
    it_die(2, "usage: bsspages none|client|server LIBNAME");
  char buf[8192] = "hello";
  if (strcmp(argv[1], "none") == 0) {
    int p[2];
    if (pipe(p) < 0 || write(p[1], buf, 5) != 5 || read(p[0], buf, sizeof buf) != 5)
      it_die(2, "pipe:");
    close(p[0]);
    close(p[1]);
  } else if (strcmp(argv[1], "client") == 0 || strcmp(argv[1], "server") == 0) {
    bool server = argv[1][0] == 's';
    int port = 0, lfd = -1;
    if (server) {
      lfd = it_listen(0, NULL, 0, 4, &port);
    } else {
      /* The listener is made with raw system calls, which the library
       * never sees: only the connecting end runs its paths. */
      struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
      socklen_t sl = sizeof sa;
      lfd = (int)syscall(SYS_socket, AF_INET, SOCK_STREAM, 0);
      if (lfd < 0 || syscall(SYS_bind, lfd, &sa, sizeof sa) < 0 || syscall(SYS_listen, lfd, 4) < 0 ||
          syscall(SYS_getsockname, lfd, &sa, &sl) < 0)
        it_die(2, "raw listener:");
      port = ntohs(sa.sin_port);
    }
    int c = it_connect(0, NULL, port);
    int a = server ? accept(lfd, NULL, NULL) : (int)syscall(SYS_accept4, lfd, NULL, NULL, 0);
    if (c < 0 || a < 0 || send(c, buf, 5, 0) != 5)
      it_die(2, "connect:");
    /* The reply: 5 bytes to the server, 4,500 to the client. */
    long reply = server ? 5 : 4500;
    if (server ? recv(a, buf, 16, 0) != 5 || send(a, buf, 5, 0) != 5
               : syscall(SYS_recvfrom, a, buf, 16, 0, NULL, NULL) != 5 ||
                     syscall(SYS_sendto, a, buf, reply, 0, NULL, 0) != reply)
      it_die(2, "echo:");
    for (long got = 0, n; got < reply; got += n)
      if ((n = recv(c, buf, sizeof buf, 0)) <= 0)
        it_die(2, "recv:");
    close(c);
    if (server) {
      close(a);
      close(lfd);
    } else {
      syscall(SYS_close, a); /* the library interposes syscall(SYS_close) as close: harmless here */
      syscall(SYS_close, lfd);
    }
  } else {
    it_die(2, "unknown mode %s", argv[1]);
  }
  const char *dir = getenv("FABSOCK_STATDIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/fabsock.%d.stat", dir && *dir ? dir : "/dev/shm", (int)getpid());
  printf("bss_kb %ld\nstat_file %d\n", bss_kb(argv[2]), access(path, F_OK) == 0);
  return 0;
}
