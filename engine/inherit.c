/* Listening sockets a process was handed rather than made.
 *
 * Socket activation (systemd, systemd-socket-activate, and the inetd-style
 * managers that follow sd_listen_fds(3)) creates the listener in the
 * manager and execs the service with it as fd 3 onwards: the service never
 * calls socket() or listen(), so the engine never saw it, no rendezvous was
 * served beside it and every connection stayed on TCP unseen.  The manager
 * says which descriptors they are: LISTEN_FDS=n for fds 3..3+n-1, valid
 * when LISTEN_PID is this process.  Each one that is really a listening
 * TCP socket is adopted as listen() would have, the first time an accept()
 * runs on a descriptor the table does not know (a service may never make a
 * socket of its own, so this cannot wait for the first socket()). */
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/hot.h"
#include "base/log.h"
#include "base/real.h"
#include "engine/adopt.h"
#include "engine/fdtab.h"
#include "engine/inherit.h"
#include "engine/sock.h"

#define FS_INHERIT_FD_START 3   /* SD_LISTEN_FDS_START */
#define FS_INHERIT_MAX 1024     /* more than any manager passes */

static pthread_once_t fs_inherit_once FS_HOT = PTHREAD_ONCE_INIT;
static bool fs_inherit_done FS_HOT;

/* A non-negative decimal number that fits an int, or -1. */
static long fs_inherit_num(const char *s)
{
  if (!s || !*s)
    return -1;
  char *end;
  long v = strtol(s, &end, 10);
  return *end || v < 0 || v > 0x7fffffff ? -1 : v;
}

static int fs_inherit_opt(int fd, int opt)
{
  int v = -1;
  socklen_t l = sizeof v;
  return FS_REAL(getsockopt)(fd, SOL_SOCKET, opt, &v, &l) == 0 ? v : -1;
}

static void fs_inherit_adopt(int fd)
{
  int domain = fs_inherit_opt(fd, SO_DOMAIN);
  if ((domain != AF_INET && domain != AF_INET6) || fs_inherit_opt(fd, SO_TYPE) != SOCK_STREAM ||
      fs_inherit_opt(fd, SO_PROTOCOL) != IPPROTO_TCP || fs_inherit_opt(fd, SO_ACCEPTCONN) != 1)
    return;
  struct fs_conn *c = fs_fdtab_get(fd);
  if (c) { /* already known (a listen() of ours in this image) */
    fs_conn_put(c);
    return;
  }
  if (fs_adopt_listener(fd, domain, false))
    fs_log(FS_LOG_DEBUG, "fd %d: listener handed over (LISTEN_FDS), served as if listen()ed here", fd);
}

static void fs_inherit_scan(void)
{
  long n = fs_inherit_num(getenv("LISTEN_FDS"));
  long pid = fs_inherit_num(getenv("LISTEN_PID"));
  if (n > 0 && pid == (long)getpid()) {
    if (n > FS_INHERIT_MAX)
      n = FS_INHERIT_MAX;
    for (int fd = FS_INHERIT_FD_START; fd < FS_INHERIT_FD_START + n; fd++)
      fs_inherit_adopt(fd);
  }
  __atomic_store_n(&fs_inherit_done, true, __ATOMIC_RELEASE);
}

struct fs_conn *fs_inherit_listener(int fd)
{
  if (__atomic_load_n(&fs_inherit_done, __ATOMIC_ACQUIRE))
    return NULL;
  pthread_once(&fs_inherit_once, fs_inherit_scan);
  return fs_fdtab_get(fd);
}
