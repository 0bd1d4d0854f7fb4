/* Descriptors that cross processes with SCM_RIGHTS.  See engine/adopt.h. */
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/addr.h"
#include "base/proc.h"
#include "base/real.h"
#include "engine/adopt.h"
#include "engine/agent.h"
#include "engine/fdtab.h"
#include "engine/sock.h"
#include "engine/wait.h"

/* fn(fd) for each descriptor of msg's SCM_RIGHTS messages. */
static void fs_adopt_each_fd(const struct msghdr *msg, void (*fn)(int fd))
{
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm; cm = CMSG_NXTHDR((struct msghdr *)msg, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
      continue;
    size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
      fn(fd);
    }
  }
}

static void fs_adopt_leaving(int fd)
{
  struct fs_conn *c = fs_fdtab_get(fd);
  if (!c)
    return;
  fs_wait_timeo_forget(c); /* the receiver may set them */
  if (fs_conn_state(c) == FS_STATE_LISTEN) {
    c->listener_shared = true; /* as after fork: both may accept now */
  } else {
    fs_sock_publish_ino(c, fd); /* while we hold it too, the receiver is not alone with it */
    fs_sock_downgrade(c, fd, FS_REASON_FD_PASSED);
  }
  fs_conn_put(c);
  fs_agent_retry_held(); /* a request held for it (engine/hold.h) goes to its new holder */
}

bool fs_adopt_listener(int fd, int dom, bool shared)
{
  int fl = FS_REAL(fcntl)(fd, F_GETFL, 0);
  fs_sock_created(fd, dom, SOCK_STREAM | (fl >= 0 && (fl & O_NONBLOCK) ? SOCK_NONBLOCK : 0), IPPROTO_TCP);
  struct fs_conn *c = fs_fdtab_get(fd);
  if (!c)
    return false;
  fs_wait_timeo_forget(c); /* set by whoever made it */
  if (shared)
    c->listener_shared = true;
  fs_sock_listening(c, fd);
  fs_conn_put(c);
  return true;
}

void fs_adopt_scm_sent(const struct msghdr *msg)
{
  fs_adopt_each_fd(msg, fs_adopt_leaving);
}

/* Is port in this host's ephemeral range (where connect() picks local
 * ports)?  A received connection whose local port is not was accepted. */
static bool fs_adopt_ephemeral(uint16_t port)
{
  static int lo = -1, hi = -1;
  if (__atomic_load_n(&lo, __ATOMIC_RELAXED) < 0) {
    int l = 32768, h = 60999;
    char b[64];
    if (fs_proc_read("/proc/sys/net/ipv4/ip_local_port_range", b, sizeof b) > 0) {
      char *e;
      long a = strtol(b, &e, 10), z = strtol(e, NULL, 10);
      if (a > 0 && z >= a && z < 65536)
        l = (int)a, h = (int)z;
    }
    __atomic_store_n(&hi, h, __ATOMIC_RELAXED);
    __atomic_store_n(&lo, l, __ATOMIC_RELAXED);
  }
  return port >= __atomic_load_n(&lo, __ATOMIC_RELAXED) && port <= __atomic_load_n(&hi, __ATOMIC_RELAXED);
}

/* A connection this process was handed with SCM_RIGHTS (node cluster: the
 * primary accepts, a worker serves).  Adopt an accepted TCP connection as
 * one forked with: it upgrades once the sender closed its copy, with byte
 * counts from the kernel (fs_sock_alone, fs_cutover_resync_*). */
static void fs_adopt_one(int fd)
{
  int type = 0, proto = 0, dom = 0, acc = 1;
  socklen_t l = sizeof type;
  if (!fs_sock_enabled())
    return;
  struct fs_conn *known = fs_fdtab_get(fd);
  if (known) {
    fs_conn_put(known);
    return;
  }
  if (FS_REAL(getsockopt)(fd, SOL_SOCKET, SO_TYPE, &type, &l) < 0 || type != SOCK_STREAM)
    return;
  l = sizeof proto;
  if (FS_REAL(getsockopt)(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &l) < 0 || proto != IPPROTO_TCP)
    return;
  l = sizeof dom;
  if (FS_REAL(getsockopt)(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l) < 0 || (dom != AF_INET && dom != AF_INET6))
    return;
  l = sizeof acc;
  if (FS_REAL(getsockopt)(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l) < 0)
    return;
  if (acc) { /* a listener handed over: shared with its sender (see adopt.h) */
    fs_adopt_listener(fd, dom, true);
    return;
  }
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0 || fs_adopt_ephemeral(fs_addr_port((struct sockaddr *)&ss)))
    return; /* not known to be an accepted end */
  struct fs_conn *c = fs_conn_new(fd, dom);
  if (!c)
    return;
  int fl = FS_REAL(fcntl)(fd, F_GETFL, 0);
  c->nonblock = fl >= 0 && (fl & O_NONBLOCK);
  if (fs_fdtab_install(fd, c) == 0)
    fs_sock_adopted(c, fd);
  fs_conn_put(c);
}

void fs_adopt_scm_received(const struct msghdr *msg)
{
  fs_adopt_each_fd(msg, fs_adopt_one);
}

/* fstat made directly at load: libc's, which a program that never calls it
 * had not touched, cost every preloaded start 18-28 us here in its cold
 * pages (bench/start-cost.sh: an empty library's constructor making the
 * three calls through libc, against the same three made directly, as
 * preload/proc.c makes exit_group).  The call glibc makes for fstat
 * (newfstatat, "", AT_EMPTY_PATH): a seccomp allow-list written from a
 * trace of the program allows it.  x86-64's struct stat is the kernel's. */
static inline __attribute__((always_inline)) int fs_adopt_fstat(int fd, struct stat *st)
{
#if defined(__x86_64__)
  register long flags __asm__("r10") = AT_EMPTY_PATH;
  /* The empty path on the stack, not a literal in .rodata: the kernel
   * reads it, and that page of .rodata, touched by nothing else at load,
   * cost every start a page fault (~20 us here). */
  volatile char empty = '\0';
  long r;
  __asm__ volatile("syscall"
                   : "=a"(r)
                   : "0"((long)SYS_newfstatat), "D"((long)fd), "S"(&empty), "d"(st), "r"(flags)
                   : "rcx", "r11", "memory");
  return r < 0 ? -1 : 0; /* errno untouched: the caller only asks whether it worked */
#else
  return fstat(fd, st); /* errno: the constructor keeps the application's */
#endif
}

/* Run at load by every process: kept beside the constructors (.text.startup,
 * at the start of .text), whose page the loader's first fault maps with
 * it, not a page fault of its own in the middle of the library. */
__attribute__((section(".text.startup"))) void fs_adopt_stdio(void)
{
  struct stat st[3] = { 0 }; /* one whose fstat failed is no socket below */
  for (int fd = 0; fd < 3; fd++) {
    if (fs_adopt_fstat(fd, &st[fd]) < 0 || !S_ISSOCK(st[fd].st_mode))
      continue;
    /* inetd hands one socket as 0 and 1 (and often 2): one connection. */
    struct fs_conn *same = NULL;
    for (int j = 0; j < fd && !same; j++)
      if (S_ISSOCK(st[j].st_mode) && st[j].st_ino == st[fd].st_ino && st[j].st_dev == st[fd].st_dev)
        same = fs_fdtab_get(j);
    if (same) {
      fs_fdtab_install(fd, same);
      fs_conn_put(same);
    } else {
      fs_adopt_one(fd);
    }
  }
}
