/* Socket engine, fork and exec: what each connection does before and after
 * a fork (in both processes) and before an exec (engine/sock.h).  Split
 * from engine/sock.c, whose lifecycle it completes. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "base/hot.h"
#include "base/proc.h"
#include "base/stat.h"
#include "gpu/gpu.h"
#include "engine/agent.h"
#include "engine/cancel.h"
#include "engine/cutover.h"
#include "engine/fdtab.h"
#include "engine/sock.h"
#include "engine/sockio.h"
#include "engine/wait.h"
#include "engine/wake.h"
#include "fabric/chan.h"
#include "base/real.h"

/* Marks a connection visited by the walk before a fork (epoch) and after it
 * (epoch + 1): no store to this page after the fork (a fault in each). */
static uint32_t fs_sock_epoch FS_HOT;

/* Whether the child may keep its stat table in its own memory until one of
 * its rows matters to another process (base/stat.h, fs_stat_atfork_child):
 * decided by the walk before the fork, read by the child in its copy.  A
 * child's table as a file was most of what a fork cost a server that forks
 * per connection (bench/fork-loop: 64 of its 168 us, eleven system calls),
 * for rows that nobody reads while the connection stays under its
 * threshold.  Not where a row already has something to say (a fabric, a
 * reason), where the caller cannot know the child's pid (a fork inside
 * libc), nor for an accepted connection forked before: another process
 * holding a connection upgrades only if it finds no other holder, in the
 * stat tables or, for the children it knows by pid, in /proc (fs_sock_alone),
 * so a child that keeps its table to itself must be the first one forked
 * with each of its connections, known by pid to its parent (fork_first) and
 * to the siblings forked after it (their copies).  A private child that
 * forks in turn publishes first (fs_sock_before_fork). */
static bool fs_sock_fork_private FS_HOT;
static bool fs_sock_fork_publish FS_HOT; /* the walk found what others may look for */

static void fs_sock_fork_prep(int fd, struct fs_conn *c, void *arg)
{
  (void)arg;
  if (c->visit == fs_sock_epoch)
    return;
  c->visit = fs_sock_epoch;
  struct fs_chan *ch = __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE);
  if (!ch)
    fs_sock_publish_ino(c, fd); /* the child may be the one left holding it */
  int state = fs_conn_state(c);
  if (ch || (c->reason != FS_REASON_NONE && c->reason != FS_REASON_PENDING) ||
      (state != FS_STATE_TCP && state != FS_STATE_LISTEN && state != FS_STATE_UNCONNECTED) ||
      (c->dir == FS_DIR_ACCEPT && c->fork_first != 0))
    fs_sock_fork_private = false;
  if (state == FS_STATE_LISTEN || (c->dir == FS_DIR_ACCEPT && c->ino != 0))
    fs_sock_fork_publish = true;
  if (ch && !ch->ops->fork_shares(ch)) {
    /* The child cannot use this end (a queue pair): both go back to TCP first. */
    fs_sock_downgrade(c, fd, FS_REASON_FORK);
  } else if (ch) { /* the child will hold this end too */
    __atomic_fetch_add(&ch->me->refs, 1, __ATOMIC_ACQ_REL);
  }
}

static void *volatile fs_sock_no_ptr;
static bool fs_sock_prebound FS_HOT; /* this image bound them before a fork */

/* What a child may call first that its parent may never have: bound in
 * the parent, once per image (the child inherits the bound entries).
 * Each was bound lazily in every child, a symbol lookup through every
 * library of the process (tests/integration/t_forkcost.sh): free (an epoll
 * set a PostgreSQL backend closes), a blocking send's cleanup handler (a
 * first send on a connection its parent only accepted), munmap (rings a
 * child lets go), stat (is the child single-threaded: glibc's flag stays
 * false after a fork of a threaded parent) and realloc (a door's or a wake
 * pool's first growth; the free after it binds free).  A volatile null:
 * with one it can see, the compiler may make the realloc a malloc.  errno
 * kept.  A list, not all of the library's imports
 * (its PLT walked and bound): that is about 130 lookups, paid also by
 * every process that forks just once (docs/design.md 1.6). */
static void fs_sock_prebind(void)
{
  if (fs_sock_prebound)
    return;
  int saved = errno;
  free(realloc(fs_sock_no_ptr, 1));
  fs_sockio_tcp_bind();
  (void)munmap(NULL, 0); /* EINVAL, bound */
  (void)mremap(NULL, 0, 0, 0); /* EINVAL, bound: a child's table made its own (base/stat.c) */
  /* A table still private is published by a child that downgrades a
   * connection at the fork (fs_conn_set_state): the file's calls (open
   * is bound already, by the policy's read); and a child's table gives a
   * new slot's page its block (madvise), which a parent whose table was
   * private until its first upgrade never did. */
  (void)fchmod(-1, 0);
  (void)ftruncate(-1, 0);
  (void)madvise(NULL, 0, MADV_NORMAL); /* 0: nothing to do */
  (void)fs_proc_threads();
  errno = saved;
  fs_sock_prebound = true;
}

void fs_sock_before_fork(bool pid_known)
{
  /* The child's first send finds the driver question answered (gpu.h).
   * Before the agent's lock: the probe may take the loader's. */
  if (__atomic_load_n(&fs_fdtab_hiwater, __ATOMIC_ACQUIRE) != 0) {
    fs_gpu_before_fork();
    fs_sock_prebind();
  }
  /* Agent lock first: no channel can be attached between the count of
   * shared ends below and the fork. */
  fs_agent_before_fork();
  (void)fs_proc_fork_work_has(0); /* its page, present in the child (base/proc.h) */
  if (__atomic_load_n(&fs_fdtab_hiwater, __ATOMIC_ACQUIRE) == 0)
    return; /* never a socket: no walk, and no store to the epoch's page */
  fs_sock_epoch += 2;
  fs_sock_fork_private = pid_known;
  fs_sock_fork_publish = false;
  fs_fdtab_foreach(fs_sock_fork_prep, NULL);
  /* A private table (a child's, above) goes where others look before its
   * own children come: they hold its listeners and connections too (an
   * nginx master forked by the process that listen()ed; a child forked with
   * a connection that its own parent closed). */
  if (fs_sock_fork_publish)
    fs_stat_publish();
}

/* The child's stat table is a copy of the parent's slots as they were when
 * the child copied them, not when it forked: the parent goes on meanwhile.
 * A slot it freed arrives empty (a server that closes its copy of an
 * accepted connection right after fork), and one it freed and gave to its
 * next connection arrives naming that one (the postmaster accepting the
 * next client).  So every row is written again from the connection the
 * child holds; counters restart at zero where the row was not its own. */
FS_FORK_TEXT static void fs_sock_stat_refill(struct fs_conn *c, struct fs_chan *ch)
{
  struct fs_stat_conn *s = c->stat;
  if (!s)
    return;
  bool used = __atomic_load_n(&s->used, __ATOMIC_ACQUIRE);
  uint16_t lport = s->lport, pport = s->pport;
  uint32_t ino = s->inode;
  int fd = s->fd;
  fs_sock_stat_addrs(c);
  if (s->family == 0)
    s->family = (uint8_t)c->family;
  if (!used || ino != c->ino || lport != s->lport || pport != s->pport || fd != c->fd) {
    __atomic_store_n(&s->used, 0, __ATOMIC_RELEASE);
    s->tx_bytes = s->rx_bytes = s->tx_msgs = s->rx_msgs = s->fabric_tx = s->fabric_rx = s->resumes = 0;
  }
  s->fd = c->fd;
  s->state = (uint8_t)fs_conn_state(c);
  s->reason = c->reason;
  fs_stat_set_fabric(s, (uint8_t)(ch ? ch->ops->fabric : FS_FABRIC_TCP));
  s->listening = fs_conn_state(c) == FS_STATE_LISTEN;
  __atomic_store_n(&s->used, 1, __ATOMIC_RELEASE);
}

FS_FORK_TEXT static void fs_sock_fork_fix(int fd, struct fs_conn *c, void *arg)
{
  pid_t pid = *(pid_t *)arg;
  (void)fd;
  if (c->visit == fs_sock_epoch + 1)
    return;
  c->visit = fs_sock_epoch + 1;
  struct fs_chan *ch = __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE);
  if (pid == 0) { /* the threads that held these are gone */
    fs_lock_fork_reset(&c->lock);
    fs_lock_init(&c->txlock);
    fs_lock_init(&c->rxlock);
    fs_sock_stat_refill(c, ch);
    fs_wake_fork_child_conn(c);
    c->hold_ns = 0; /* a request held here waits its own bound (engine/hold.h) */
    c->served = false, c->name_tried_ns = 0; /* the parent serves its listeners' names */
  }
  if (ch && !ch->ops->fork_shares(ch)) { /* downgraded before the fork, unless a thread was inside a call */
    if (pid == 0) {
      ch->ops->forget(ch);
      fs_cutover_tcp_for_good(c, FS_REASON_FORK); /* the child has TCP only */
    }
    return;
  }
  if (pid < 0) {
    if (ch)
      __atomic_fetch_sub(&ch->me->refs, 1, __ATOMIC_ACQ_REL);
    return;
  }
  if (ch)
    c->fork_shared = true; /* in both processes */
  fs_wait_timeo_forget(c); /* either may set them now */
  if (fs_conn_state(c) == FS_STATE_LISTEN)
    c->listener_shared = true;
  /* Two processes now share the TCP socket: our byte counts no longer see
   * all of it.  An accepted end may still upgrade once one process alone
   * holds it (servers that fork after accept and close their copy), with
   * counts from the kernel; any other stays on TCP. */
  if (!ch && !c->no_upgrade && fs_conn_state(c) != FS_STATE_LISTEN) {
    if (c->dir == FS_DIR_ACCEPT && c->ino != 0 && c->stat) {
      c->shared_hist = true;
      if (pid > 0 && pid != FS_SOCK_FORK_PID_UNKNOWN) {
        c->fork_child = (int32_t)pid;
        if (c->fork_first == 0)
          c->fork_first = (int32_t)pid;
      }
    } else {
      c->no_upgrade = true;
      fs_conn_set_state(c, FS_STATE_TCP, FS_REASON_FORK);
    }
  }
}

FS_FORK_TEXT void fs_sock_after_fork(pid_t pid)
{
  if (pid == 0) {
    fs_stat_atfork_child(fs_sock_fork_private);
    fs_conn_pool_fork_child();
  }
  fs_fdtab_foreach(fs_sock_fork_fix, &pid);
  if (pid == 0)
    fs_wake_fork_child();
  if (pid == 0 && fs_proc_fork_work_has(FS_FORK_CANCEL))
    fs_cancel_fork_child();
  /* Agent lock last, as it was taken first: until the walk above has marked
   * every connection that forked without a channel no_upgrade, the parent's
   * agent must not attach one (a rendezvous acked just before the fork).
   * Such a channel would be the parent's alone, its end counted once: the
   * parent's close() then writes EOF on it while the child, which really
   * serves the connection, stays on TCP, and the peer reads EOF early. */
  fs_agent_after_fork(pid == 0);
}

/* The last child forked with it is asked directly: its table may not list
 * it yet (a moment after fork), or ever (it exec'd a program without
 * libfabsock).  So is the first, whose table may stay in its own memory
 * until its end crosses (fs_sock_fork_private): siblings forked after it
 * know it from their copies. */
bool fs_sock_forked_hold(struct fs_conn *c)
{
  return (c->fork_child > 0 && fs_proc_holds_socket(c->fork_child, c->ino) != 0) ||
         (c->fork_first > 0 && c->fork_first != c->fork_child && fs_proc_holds_socket(c->fork_first, c->ino) != 0);
}

/* Both from here, not at fork: a child serving a short connection pays for
 * neither.  A peer whose end crossed first, on bytes still in flight to
 * this one, finds no row yet and looks again (fabric/shm/rdvio.c). */
void fs_sock_forked_crossed(void)
{
  fs_stat_publish();
  fs_agent_serve_proc();
}

static void fs_sock_exec_one(int fd, struct fs_conn *c, void *arg)
{
  (void)arg;
  int fl = FS_REAL(fcntl)(fd, F_GETFD, 0);
  if (fl >= 0 && !(fl & FD_CLOEXEC)) {
    fs_sock_publish_ino(c, fd); /* a spawned child that adopts it is not alone with it */
    fs_sock_downgrade(c, fd, FS_REASON_EXEC);
  }
}

FS_FORK_TEXT void fs_sock_before_exec(void)
{
  fs_fdtab_foreach(fs_sock_exec_one, NULL);
}

