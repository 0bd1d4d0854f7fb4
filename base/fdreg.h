/* The registry of the library's own descriptors.
 *
 * A bit per fd, lock-free.  The preload boundary asks it before it lets
 * the application close(), closefrom() or close_range() a descriptor; every
 * layer that keeps a descriptor longer than one call registers it here. */
#ifndef FS_BASE_FDREG_H
#define FS_BASE_FDREG_H

#include <stdbool.h>
#include <stdint.h>

/* Descriptors libfabsock itself holds (wake eventfds, the agent's epoll and
 * unix sockets, rdma event channels and device fds).  An application that
 * closes "everything" (close() in a loop, closefrom, close_range) must not
 * take them from under the library, which would then use numbers the
 * application reuses.  Covers fds below FS_FDREG_MAX. */
#define FS_FDREG_MAX 65536
void fs_fdreg_set(int fd, bool on);
bool fs_fdreg_is(int fd);
/* Close one of the library's descriptors (and forget that it was ours). */
void fs_fdreg_close(int fd);
/* A descriptor the library just created in the background (the agent
 * thread), moved to the top quarter of RLIMIT_NOFILE (close-on-exec; errno
 * kept).  An application hands out the lowest free numbers and may be
 * closing "everything" in another thread that very moment; a library fd at
 * a number it just closed would look like its own fd still open, and take
 * the number its next open() expects.  Returns the fd to use (the same one
 * if there is no room up there, or fd < 0, or on the aside thread, whose
 * table is its own: base/aside.h). */
int fs_fdreg_high(int fd);
/* The process changed its RLIMIT_NOFILE (preload/proc.c, after setrlimit
 * or prlimit): fs_fdreg_high asks it again. */
void fs_fdreg_limit_changed(void);
/* Grow the kernel's fd table to reach fs_fdreg_high's numbers now (a dup
 * of fd up there, closed at once; errno kept).  The kernel grows a table
 * more than one thread shares only after an RCU grace period
 * (expand_fdtable: synchronize_rcu, 8-12 ms here): the first high fd of a
 * process with the agent running held its first rendezvous that long.
 * With one thread it takes microseconds.  The table never shrinks. */
void fs_fdreg_reserve(int fd);
/* fs_fdreg_high, and the fd is marked ours (one the library keeps: closed
 * with fs_fdreg_close). */
int fs_fdreg_move_high(int fd);
/* The same from an application's thread (its listen(), its epoll_ctl):
 * moved only where that costs no wait (the kernel's table already reaches
 * the high numbers, or the process has one thread); else marked ours where
 * it is.  A table more than one thread shares grows only after an RCU
 * grace period (fs_fdreg_reserve). */
int fs_fdreg_move_high_now(int fd);
/* A window in which this thread makes descriptors of the library's: from
 * the call that creates one (at the application's lowest free number) to
 * its move high and its mark (fs_fdreg_move_high), or to its close where it
 * is not kept (a probe's dlopen, a device opened and closed).  Windows nest
 * on a thread and run on several at once.  Meanwhile an application's
 * close() or fcntl() of a number not ours waits for them (fs_fdreg_settle):
 * a program closing "everything" from another thread found one of ours at
 * the number it had just closed (`closeall` over rdma, while the agent
 * opened the device), or closed it before it was marked.  The window on
 * the aside thread is none: its table is its own. */
void fs_fdreg_make_begin(void);
void fs_fdreg_make_end(void);
/* move(expr) with expr, the descriptor's creation, inside a window:
 * FS_FDREG_MAKE for one the library keeps (fs_fdreg_move_high), _NOW from
 * an application's thread (fs_fdreg_move_high_now), _HIGH for one it
 * closes soon (fs_fdreg_high, not marked). */
#define FS_FDREG_MADE_(move, expr) \
  ({                               \
    fs_fdreg_make_begin();         \
    int fd_made_ = move(expr);     \
    fs_fdreg_make_end();           \
    fd_made_;                      \
  })
#define FS_FDREG_MAKE(expr) FS_FDREG_MADE_(fs_fdreg_move_high, expr)
#define FS_FDREG_MAKE_NOW(expr) FS_FDREG_MADE_(fs_fdreg_move_high_now, expr)
#define FS_FDREG_MAKE_HIGH(expr) FS_FDREG_MADE_(fs_fdreg_high, expr)
/* Before the application's close() or fcntl() of fd (any fd < 0: before
 * its close_range or closefrom): while another thread of this process is
 * in a window and fd is not ours, wait for the windows to end (errno
 * kept).  One load otherwise.  A window a fork child inherited from a
 * thread it does not have counts for nothing.  Returns at once on a thread
 * that is in a window itself (the libraries it calls close their own fds).
 * A wait that runs FS_FDREG_SETTLE_MS (a thread stopped inside a window)
 * ends the waits for the rest of the process, logged.  True if it waited. */
#define FS_FDREG_SETTLE_MS 1000
extern uint64_t fs_fdreg_win;
bool fs_fdreg_settle_slow(void);
static inline bool fs_fdreg_windows_open(void)
{
  return __builtin_expect((__atomic_load_n(&fs_fdreg_win, __ATOMIC_ACQUIRE) & 0xffffffffu) != 0, 0);
}
static inline bool fs_fdreg_settle(int fd)
{
  return fs_fdreg_windows_open() && !fs_fdreg_is(fd) && fs_fdreg_settle_slow();
}
/* May a connection whose socket is fd take `need` more descriptors of the
 * library's (a wake eventfd, a peer's)?  The application must get every
 * fd it would get without us: only while fd (the application's count,
 * roughly: it takes the lowest free numbers) plus the library's
 * registered fds plus need stay within 3/4 of the soft RLIMIT_NOFILE.
 * With fd alone as the measure, a blocking server's 100 upgraded
 * connections under ulimit -n 140 held 200 eventfds, and its accept()
 * failed with EMFILE. */
bool fs_fdreg_budget_ok(int fd, int need);
/* One more descriptor kept for a peer process (its doorbell: one per
 * peer process, not per connection of ours) where `kept` are kept
 * already: fs_fdreg_budget_ok(fd, 1), and kept + 1 within a sixteenth of
 * the soft limit.  The 3/4 rule alone let a server take its peers'
 * doorbells while it was small: with 100 client processes under ulimit -n
 * 128 it held 35 of them once it had accepted 84, and its accept() failed
 * with EMFILE.  (The registered count is no measure: it holds the fds of
 * rendezvous in flight too.) */
bool fs_fdreg_share_ok(int fd, unsigned kept);
/* A directory read without malloc, its descriptor moved high at once
 * (fs_fdreg_high): for the scans (stat tables, /proc/PID/fd, sysfs), which
 * run aside (base/aside.h), or in the application's table where they
 * cannot.  Not opendir: its DIR is a malloc, and the first malloc of the
 * aside thread reserved a glibc arena, 64 MiB of the application's address
 * space (ulimit -v: t_aslimit's preloaded client ran out with three arenas
 * where plain TCP had one).  The buffer lives in the caller's frame. */
struct fs_fdreg_dir {
  int fd;
  unsigned pos, len;
  char buf[2048] __attribute__((aligned(8)));
};
/* 0, or -errno (nothing to close). */
int fs_fdreg_dir_open(struct fs_fdreg_dir *d, const char *path);
/* The next entry's name ("." and ".." included), or NULL at the end or on
 * an error. */
const char *fs_fdreg_dir_next(struct fs_fdreg_dir *d);
void fs_fdreg_dir_close(struct fs_fdreg_dir *d);

#endif
