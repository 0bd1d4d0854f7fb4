/* The process's name as ps and pgrep show it, for policy rules and stat;
 * and whether another process holds a socket. */
#ifndef FS_BASE_PROC_H
#define FS_BASE_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The base name of the path the process was executed by (the auxiliary
 * vector's AT_EXECFN: "redis-server" for the /usr/bin/redis-server symlink
 * to redis-check-rdb, "nginx" whatever nginx later writes over its argv).
 * Found once, on first use; never NULL, at most 63 bytes. */
const char *fs_proc_name(void);

/* Read a small file (a /proc entry) into buf, NUL-terminated: its length
 * (> 0), or 0 when it cannot be read or is empty.  errno is kept. */
size_t fs_proc_read(const char *path, char *buf, size_t len);

/* May the library map `bytes` more (a connection's rings) and still leave
 * the application 1/FS_PROC_AS_KEEP of its address-space limit (RLIMIT_AS: a
 * batch system's vmem or h_vmem, ulimit -v)?  0, or -ENOMEM.  Without a
 * limit, 0 at the cost of one getrlimit; with one, /proc/self/statm is read
 * too.  The first refusal is logged.  errno is kept.
 * Half, not a quarter: rings mapped at connect (an upgrade at 0 bytes)
 * come before the application's own growth, and a thread alone is 72 MiB
 * of address space (its stack and glibc's 64 MiB arena): t_aslimit's
 * client, a thread and a fifth of the limit after its 48 connections, ran
 * out at a quarter when its rings were mapped first. */
#define FS_PROC_AS_KEEP 2
int fs_proc_as_room(size_t bytes);

/* How many threads the process has now (/proc/self/task's link count is
 * two plus that), or -1 if it cannot be told. */
int fs_proc_threads(void);

/* Has the process one thread now?  Without a system call where glibc says
 * it never made a second (__libc_single_threaded, 2.32), else as
 * fs_proc_threads.  (A thread made by a bare clone, not pthread_create,
 * escapes glibc's count: such a process is told it has one.) */
bool fs_proc_single_threaded(void);
/* Has the process never had a second thread?  glibc's word
 * (__libc_single_threaded, 2.32), no system call; false where glibc
 * cannot say, and after a threaded parent's fork. */
bool fs_proc_never_threaded(void);

/* This process's pid, without a system call after the first in each
 * process: kept in a page a child finds zeroed (MADV_WIPEONFORK), whatever
 * made it (fork, _Fork, a bare clone).  Not for a vfork child, which shares
 * the parent's memory: getpid() there.  A waiter asked getpid() at every
 * sleep (engine/door.c): 1.7 system calls per MariaDB query. */
int fs_proc_self(void);

/* The same, but a process that has not asked fs_proc_self yet gets
 * getpid() instead of the page (its mmap, madvise and first touch, ~30 us
 * here): for rare callers, such as the window around the stat file a
 * one-shot client makes at its first socket. */
int fs_proc_self_light(void);

/* Does process pid hold socket inode among its descriptors
 * (/proc/PID/fd/N -> "socket:[inode]")?  1 yes, 0 no (or no such
 * process), -errno when it cannot be told (another user's process). */
int fs_proc_holds_socket(int pid, unsigned long inode);

/* What a child must redo after fork, one bit per module that made state a
 * child cannot keep as it is (a lock another thread may hold, a thread, a
 * table, an fd of the parent's).  A module sets its bit before it first
 * makes such state; a child skips every module whose bit is clear without
 * looking at its state.  After fork a page is present in the child only if
 * the parent touched it, and the first touch of any other, read or write,
 * is a fault: a shell that forks and execs, and never made a socket, paid
 * a dozen of them for modules it never used.  The parent reads this word
 * before it forks (fs_proc_fork_work_has), so that its own page is present
 * in the child. */
enum {
  FS_FORK_STAT = 1u << 0,   /* base/stat: its lock was taken, maybe a table */
  FS_FORK_ASIDE = 1u << 1,  /* base/aside: its locks, maybe its thread */
  FS_FORK_AGENT = 1u << 2,  /* engine/agent: started, or jobs or watches queued */
  FS_FORK_FABRIC = 1u << 3, /* a fabric's rendezvous or device state */
  FS_FORK_CANCEL = 1u << 4, /* engine/cancel: its lock, other threads' records */
  FS_FORK_CONN = 1u << 5,   /* engine/conn's pool and engine/wake's leases: locks, eventfds */
};
extern uint32_t fs_proc_fork_work;

/* The fork handlers (preload/proc.c, for the forks libc makes itself:
 * daemon(3), forkpty(3)), registered with pthread_atfork by the wrappers
 * of those two, before the first such call, not at load nor at a first
 * socket: the registration's pages of libc data cost a page fault or two,
 * 20-40 us here, in every process that never calls either (a one-shot
 * client; docs/design.md 1.6).  fs_proc_atfork_set stores them (the
 * constructor: no call into libc); arm registers them once, if stored. */
void fs_proc_atfork_set(void (*prepare)(void), void (*parent)(void), void (*child)(void));
void fs_proc_atfork_arm_slow(void);
extern bool fs_proc_atfork_armed;
static inline void fs_proc_atfork_arm(void)
{
  if (!__atomic_load_n(&fs_proc_atfork_armed, __ATOMIC_RELAXED))
    fs_proc_atfork_arm_slow();
}

static inline void fs_proc_fork_work_add(uint32_t bits)
{
  if ((__atomic_load_n(&fs_proc_fork_work, __ATOMIC_RELAXED) & bits) != bits)
    __atomic_fetch_or(&fs_proc_fork_work, bits, __ATOMIC_RELAXED);
}

static inline bool fs_proc_fork_work_has(uint32_t bits)
{
  return (__atomic_load_n(&fs_proc_fork_work, __ATOMIC_RELAXED) & bits) != 0;
}

#endif
