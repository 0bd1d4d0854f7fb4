/* A process that forbids itself new threads (engine/nproc.h).
 *
 * HAProxy's workers, unless insecure-fork-wanted, set RLIMIT_NPROC to 0
 * once they run (after chroot and setuid): no Lua script may fork.  Every
 * later thread creation fails with EAGAIN, the agent's too, so none of
 * their connections could upgrade (reason resources, a warning per
 * connection). */
#include <errno.h>

#include "engine/agent.h"
#include "engine/conn.h"
#include "engine/fdtab.h"
#include "engine/nproc.h"
#include "engine/sock.h"

static void fs_nproc_one(int fd, struct fs_conn *c, void *arg)
{
  (void)fd;
  if (fs_conn_state(c) == FS_STATE_LISTEN)
    *(int *)arg |= c->listener_shared ? 2 : 1;
}

void fs_nproc_limiting(void)
{
  int saved = errno;
  int listens = 0;
  if (fs_sock_enabled() && !fs_sock_refuse_all())
    fs_fdtab_foreach(fs_nproc_one, &listens);
  if (listens & 2)
    fs_agent_serve_proc();
  else if (listens)
    (void)fs_agent_ensure();
  fs_agent_wait_point(true); /* a deferred upgrade's thread: now or never */
  errno = saved;
}
