/* The process's end: see engine/exit.h. */
#include <errno.h>

#include "base/clock.h"
#include "base/hot.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/stat.h"
#include "engine/agent.h"
#include "engine/exit.h"
#include "engine/fdtab.h"
#include "fabric/chan.h"
#include "fabric/fabric.h"

#define FS_EXIT_MS 2000 /* the most an exit waits for writes to land */

static void fs_exit_look(int fd, struct fs_conn *c, void *arg)
{
  (void)fd;
  struct fs_chan *ch = __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE);
  if (ch && ch->ops->lingering(ch))
    ++*(int *)arg;
}

static bool fs_exit_pending(void)
{
  for (const struct fs_fabric_ops *const *f = fs_fabrics; *f; f++)
    if ((*f)->exit_pending())
      return true;
  return false;
}

/* Process exit: a fabric's writes we posted may not have left the device
 * yet (rdma: the kernel flushes them with the queue pair, where TCP would
 * deliver them after the process is gone; the peer would read EOF early).
 * So wait, bounded, until the writes of open and of closed connections
 * landed (or their peers are gone).  Costs a load per fabric where none
 * was set up. */
FS_FORK_TEXT static void fs_exit_drain(void)
{
  /* No fabric ever set up (each says so before it makes state): nothing
   * in flight, and none of their pages to fault in. */
  if (!fs_proc_fork_work_has(FS_FORK_FABRIC) || !fs_exit_pending())
    return;
  int saved = errno;
  uint64_t t0 = fs_clock_ns(), deadline = t0 + (uint64_t)FS_EXIT_MS * 1000000u;
  int busy;
  for (;;) {
    busy = 0;
    fs_fdtab_foreach(fs_exit_look, &busy);
    if (!busy || !fs_clock_nap(deadline, 100000))
      break;
  }
  bool closed_ok = fs_agent_exit_drain(deadline);
  uint64_t ms = (fs_clock_ns() - t0) / 1000000u;
  if (busy || !closed_ok)
    fs_log(FS_LOG_WARN, "exit: fabric writes still unconfirmed after %llu ms; the peer may miss the last bytes",
           (unsigned long long)ms);
  else
    fs_log(FS_LOG_DEBUG, "exit: fabric writes confirmed (%llu ms)", (unsigned long long)ms);
  errno = saved;
}

__attribute__((destructor)) static void fs_exit_fini(void)
{
  /* Its gate here too: the call alone faulted in fs_exit_drain's page of
   * code (25-40 us in a firecracker guest) at the exit of every process,
   * most of which never set a fabric up. */
  if (fs_proc_fork_work_has(FS_FORK_FABRIC))
    fs_exit_drain();
  /* No table, nothing to unlink (and none of its pages to fault in). */
  if (fs_proc_fork_work_has(FS_FORK_STAT))
    fs_stat_shutdown();
}

FS_FORK_TEXT void fs_exit_quick(void)
{
  fs_exit_drain();      /* a fabric with writes in flight checks its owner */
  fs_stat_exit_quick(); /* and so does the table */
}
