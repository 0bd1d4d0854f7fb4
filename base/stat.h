/* Per-process connection table published for `fabsock stat`.
 *
 * File: $FABSOCK_STATDIR (default /dev/shm) / "fabsock.<pid>.stat", mode 0644
 * (the shm rendezvous of another user's process looks up which process holds
 * a socket here: fs_stat_holders; ss(8) shows the same addresses and counts
 * to every user), made when the process first needs it there (fs_stat_publish),
 * unlinked at exit.  Layout (host byte order; readers check magic and
 * version and ignore files they do not know):
 *
 *   struct fs_stat_header                      (offset 0, 256 bytes)
 *   struct fs_stat_conn slots[FS_STAT_SLOTS]  (offset 256, 128 bytes each)
 *
 * The file is sparse: a slot costs memory only once touched.  A slot is live
 * while `used` is 1; the library fills a slot before setting used (release)
 * and readers read used (acquire) first.  Counters are updated with relaxed
 * atomics by the data path and may be read torn-free (64-bit aligned).
 * After fork the child copies the mapping into its own file and maps it at the
 * same address, so slot pointers held by connections stay valid. */
#ifndef FS_BASE_STAT_H
#define FS_BASE_STAT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/proc.h"

#define FS_STAT_MAGIC 0x534b5346u /* "FSKS" */
#define FS_STAT_VERSION 1
#define FS_STAT_SLOTS 65536
#define FS_STAT_STATE_CLOSED 7 /* enum fs_conn_state's CLOSED (engine/conn.h asserts it) */
#define FS_STAT_FABRIC_TCP 3   /* enum fs_fabric's TCP (engine/conn.h asserts it) */

struct fs_stat_header {
  uint32_t magic;
  uint32_t version;
  int32_t pid;
  uint32_t nslots;
  uint64_t start_ns;       /* CLOCK_REALTIME at creation, tells pid reuse apart */
  uint64_t proc_start;     /* field 22 of /proc/self/stat (starttime in ticks)
                              in older files; 0 now (see boot_ns) */
  char program[64];        /* basename, NUL-terminated */
  uint32_t hi_water;       /* slots [0, hi_water) may be live */
  uint32_t pad0;
  uint64_t boot_ns;        /* CLOCK_BOOTTIME at creation (0 in older files):
                              the owner started before it, so a process of
                              that pid whose starttime is later is another
                              one.  Tables have only this now: reading
                              /proc/self/stat cost each fork about 25 us,
                              and three system calls of every process's
                              first socket */
  uint64_t closed[4];      /* connections closed (not listeners, not sockets
                              that never connected), by the fabric that
                              carried some of their data (a slot's
                              fabric_used; enum fs_fabric: [1] rdma, [2] shm),
                              [3] none did (TCP only); [0] unused.  Since this
                              table was made: a forked child's start at 0.
                              Relaxed atomics; 0 in older files */
  uint8_t pad[256 - 144];
};

struct fs_stat_conn {
  uint32_t used;           /* 0 free, 1 live; atomic */
  int32_t fd;
  uint8_t state;           /* enum fs_conn_state */
  uint8_t fabric;          /* enum fs_fabric actually carrying data */
  uint8_t reason;          /* enum fs_reason */
  uint8_t family;          /* AF_INET or AF_INET6 */
  uint8_t dir;             /* enum fs_dir, 0 for listening sockets */
  uint8_t listening;
  uint16_t lport, pport;   /* host order; a connecting end's lport and laddr
                              stay 0 until it upgrades (engine/sock.c) */
  uint8_t laddr[16], paddr[16]; /* IPv4 in the first 4 bytes */
  uint8_t pad0[6];
  uint64_t tx_bytes, rx_bytes;  /* bytes the application sent/received */
  uint64_t tx_msgs, rx_msgs;    /* frames counted by the frame hook, else calls */
  uint64_t fabric_tx, fabric_rx;/* of which carried by the fabric */
  uint32_t inode;          /* the socket's inode (sock_diag's idiag_inode); 0 unknown */
  uint32_t resumes;        /* times the fabric moved the channel onto a new
                              path under the stream (rdma: a new queue pair
                              after a link outage); written by the fabric */
  uint8_t fabric_used;     /* the last fabric other than TCP that carried its
                              data, 0 none yet (kept after a revert) */
  uint8_t pad[128 - 113];
};

_Static_assert(sizeof(struct fs_stat_header) == 256, "stat header size is ABI");
_Static_assert(sizeof(struct fs_stat_conn) == 128, "stat slot size is ABI");

/* The fabric now carrying slot s's data (fabric_used keeps the last one
 * besides TCP, for the closed counts). */
static inline void fs_stat_set_fabric(struct fs_stat_conn *s, uint8_t fabric)
{
  s->fabric = fabric;
  if (fabric != FS_STAT_FABRIC_TCP)
    s->fabric_used = fabric;
}

/* Library side.  All return NULL / -errno and never disturb errno. */
struct fs_stat_conn *fs_stat_slot_alloc(void); /* NULL when stats are off or full */
/* The process's table, made in its own memory at its first slot, becomes
 * the file that `fabsock stat` and other processes read: call where one
 * of its rows starts to matter to someone else (a listener, an accepted
 * end another process may look for by its inode, the agent's start for a
 * first upgrade, a connection kept on TCP for a reason).  One load once
 * done.  Until then a process is not listed; one whose connections never
 * get as far as an upgrade attempt (a one-shot client) never is, and pays
 * no file.  The rows are copied into the file: private only while the
 * process has one thread (a process with more gets its file at its first
 * slot, or at the first slot after its second thread came). */
extern bool fs_stat_settled;
void fs_stat_publish_slow(void);
static inline void fs_stat_publish(void)
{
  if (!__atomic_load_n(&fs_stat_settled, __ATOMIC_ACQUIRE))
    fs_stat_publish_slow();
}
void fs_stat_slot_free(struct fs_stat_conn *s);
/* In a fork child: a copy of the parent's table for its own.  Where the
 * parent's is the file, the child's is a file of its own made at once, or,
 * keep_private, its rows in its own memory, published like any private
 * table (fs_stat_publish) when one of them matters to another process: the
 * caller says whether none does yet (engine/sockfork.c). */
void fs_stat_atfork_child_slow(bool keep_private);
static inline void fs_stat_atfork_child(bool keep_private)
{
  /* A child of a process that never had a table runs none of this
   * module's code (base/proc.h). */
  if (fs_proc_fork_work_has(FS_FORK_STAT))
    fs_stat_atfork_child_slow(keep_private);
}
/* The process execs itself (execve, not posix_spawn): its table leaves with
 * this image, or, failed, comes back (fabsock stat must not list a gone
 * image's sockets under a pid that now runs another program). */
void fs_stat_exec_slow(bool failed);
static inline void fs_stat_exec(bool failed)
{
  /* A process that never had a table (a shell's child on its way to
   * exec) runs none of this module's code: no page of it to fault in. */
  if (fs_proc_fork_work_has(FS_FORK_STAT))
    fs_stat_exec_slow(failed);
}
void fs_stat_shutdown(void);                   /* unlink at exit */
/* The process ends without its exit handlers (_exit, _Exit): its table
 * goes now, as at exit.  A forked child that _exits (sshd's session
 * children, Python's os._exit in multiprocessing workers) left its table
 * in the directory for good, 8 KiB of shared memory each, and every later
 * table creation there slowed with the count.  Only the table this very
 * process made: a vfork child shares its parent's memory, not its pid.
 * No lock (a signal handler may call _exit); errno kept. */
void fs_stat_exit_quick_slow(void);
static inline void fs_stat_exit_quick(void)
{
  if (fs_proc_fork_work_has(FS_FORK_STAT))
    fs_stat_exit_quick_slow();
}

/* Which other processes' tables list a live (not listening, not closed)
 * connection on socket `inode`: up to max of their pids in pids[]; returns
 * how many processes were found (may exceed max), or -errno.  Other
 * processes' files are read defensively (a table of another user is
 * untrusted input).  Tables of processes that no longer exist are skipped. */
int fs_stat_holders(uint32_t inode, int *pids, int max);
/* The same for a listening socket on TCP port `port` (any address). */
int fs_stat_listeners(uint16_t port, int *pids, int max);


#define FS_STAT_ADD(slot, field, n) \
  do { if (slot) __atomic_fetch_add(&(slot)->field, (n), __ATOMIC_RELAXED); } while (0)
/* For a counter with a single writer (a frame hook's message count: the
 * data path runs hooks under the direction's lock): a relaxed load and
 * store, no locked instruction; readers still see whole values. */
#define FS_STAT_BUMP(slot, field, n) \
  do { if (slot) __atomic_store_n(&(slot)->field, \
                                  __atomic_load_n(&(slot)->field, __ATOMIC_RELAXED) + (n), \
                                  __ATOMIC_RELAXED); } while (0)
#define FS_STAT_SET(slot, field, v) \
  do { if (slot) __atomic_store_n(&(slot)->field, (v), __ATOMIC_RELAXED); } while (0)

#endif
