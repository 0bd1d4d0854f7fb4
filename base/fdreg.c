/* The registry of the library's own descriptors.  See base/fdreg.h. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/hot.h"
#include "base/aside.h"
#include "base/clock.h"
#include "base/fdreg.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/real.h"

static uint64_t fs_fdreg_bits[FS_FDREG_MAX / 64];
static uint32_t fs_fdreg_n FS_HOT; /* bits set (fs_fdreg_budget_ok) */
static bool fs_fdreg_grown FS_HOT; /* a descriptor went up there: the kernel's table reaches it */

void fs_fdreg_set(int fd, bool on)
{
  if (fd < 0 || fd >= FS_FDREG_MAX)
    return;
  uint64_t bit = 1ull << (fd & 63), was;
  if (on) {
    /* Counted first: fs_fdreg_n is never below the bits set, so a zero
     * there says no bit is (fs_fdreg_is). */
    __atomic_add_fetch(&fs_fdreg_n, 1, __ATOMIC_SEQ_CST);
    was = __atomic_fetch_or(&fs_fdreg_bits[fd / 64], bit, __ATOMIC_RELEASE);
    if (was & bit)
      __atomic_sub_fetch(&fs_fdreg_n, 1, __ATOMIC_RELAXED);
  } else {
    was = __atomic_fetch_and(&fs_fdreg_bits[fd / 64], ~bit, __ATOMIC_RELEASE);
    if (was & bit)
      __atomic_sub_fetch(&fs_fdreg_n, 1, __ATOMIC_RELAXED);
  }
}

bool fs_fdreg_is(int fd)
{
  /* None yet (the common case of a process's close): the bitmap's page,
   * whose first read costs ~10 us here, is not read. */
  if (fd < 0 || fd >= FS_FDREG_MAX || __atomic_load_n(&fs_fdreg_n, __ATOMIC_ACQUIRE) == 0)
    return false;
  return (__atomic_load_n(&fs_fdreg_bits[fd / 64], __ATOMIC_ACQUIRE) >> (fd & 63)) & 1;
}

/* The soft RLIMIT_NOFILE (1024 where it cannot be read or is infinite),
 * asked once and again only after the process changed it: every high fd
 * asked it, 8 times per rendezvous at each end.  Another process may change
 * our limit (prlimit --pid) unseen: lower, a dup up there fails and the fd
 * stays where it was (fs_fdreg_high); higher, our fds sit lower than they
 * could.  Neither breaks anything. */
static unsigned long fs_fdreg_lim FS_HOT; /* 0: ask; atomic */

static unsigned long fs_fdreg_limit_ask(void)
{
  struct rlimit rl;
  unsigned long l = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur > 0
                        ? (unsigned long)rl.rlim_cur
                        : 1024;
  __atomic_store_n(&fs_fdreg_lim, l, __ATOMIC_RELAXED);
  return l;
}

static unsigned long fs_fdreg_limit(void)
{
  unsigned long l = __atomic_load_n(&fs_fdreg_lim, __ATOMIC_RELAXED);
  return l ? l : fs_fdreg_limit_ask();
}

void fs_fdreg_limit_changed(void)
{
  __atomic_store_n(&fs_fdreg_lim, 0, __ATOMIC_RELAXED);
}

/* The top quarter of RLIMIT_NOFILE: where the engine stops accelerating. */
static unsigned long fs_fdreg_base(void)
{
  unsigned long base = fs_fdreg_limit() / 4 * 3;
  return base > FS_FDREG_MAX * 3ul / 4 ? FS_FDREG_MAX * 3ul / 4 : base;
}

void fs_fdreg_reserve(int fd)
{
  if (fs_aside_here() || fd < 0)
    return;
  int saved = errno;
  int hi = FS_REAL(fcntl)(fd, F_DUPFD_CLOEXEC, (int)fs_fdreg_base());
  if (hi >= 0) {
    FS_REAL(close)(hi);
    __atomic_store_n(&fs_fdreg_grown, true, __ATOMIC_RELAXED);
  }
  errno = saved;
}

int fs_fdreg_high(int fd)
{
  if (fs_aside_here())
    return fd; /* not the application's table (base/aside.h) */
  int saved = errno;
  unsigned long base = fs_fdreg_base();
  if (fd >= 0 && (unsigned long)fd < base) {
    int hi = FS_REAL(fcntl)(fd, F_DUPFD_CLOEXEC, (int)base);
    if (hi >= 0) {
      FS_REAL(close)(fd);
      fd = hi;
      __atomic_store_n(&fs_fdreg_grown, true, __ATOMIC_RELAXED);
    }
  }
  errno = saved;
  return fd;
}

int fs_fdreg_move_high(int fd)
{
  fd = fs_fdreg_high(fd);
  fs_fdreg_set(fd, true);
  return fd;
}

int fs_fdreg_move_high_now(int fd)
{
  if (fd >= 0 && !__atomic_load_n(&fs_fdreg_grown, __ATOMIC_RELAXED) && !fs_proc_single_threaded()) {
    fs_fdreg_set(fd, true);
    return fd; /* growing a shared table would hold this thread ~10 ms */
  }
  return fs_fdreg_move_high(fd);
}

/* Windows (fs_fdreg_make_begin): one word, changed only by compare and
 * swap: the pid of the process whose threads are in windows (high half)
 * and how many are (low half).  A fork child finds its parent's pid
 * there: its first window starts the count anew, a settle does not wait,
 * and an end never takes a count that is not its own process's. */
uint64_t fs_fdreg_win FS_HOT;
static bool fs_fdreg_gave_up FS_HOT;       /* a wait ran out: windows no longer held off */
static __thread uint32_t fs_fdreg_my_windows;
static __thread int fs_fdreg_my_cancel;

#define FS_FDREG_WIN_PID(w) ((w) & ~0xffffffffull)
#define FS_FDREG_WIN_N(w) ((w) & 0xffffffffull)

static uint64_t fs_fdreg_win_self(void)
{
  return (uint64_t)(uint32_t)fs_proc_self_light() << 32;
}

void fs_fdreg_make_begin(void)
{
  if (fs_aside_here() || fs_fdreg_my_windows++ > 0)
    return;
  /* Not cancelled inside (an eventfd's close, the stat file's pwrite are
   * cancellation points): a window never ended would hold every close()
   * of the process for good. */
  (void)pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &fs_fdreg_my_cancel);
  uint64_t self = fs_fdreg_win_self(), old = __atomic_load_n(&fs_fdreg_win, __ATOMIC_RELAXED), nw;
  do
    nw = FS_FDREG_WIN_PID(old) == self ? old + 1 : self | 1;
  while (!__atomic_compare_exchange_n(&fs_fdreg_win, &old, nw, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
}

void fs_fdreg_make_end(void)
{
  if (fs_aside_here() || --fs_fdreg_my_windows > 0)
    return;
  uint64_t self = fs_fdreg_win_self(), old = __atomic_load_n(&fs_fdreg_win, __ATOMIC_RELAXED);
  while (FS_FDREG_WIN_PID(old) == self && FS_FDREG_WIN_N(old) > 0 &&
         !__atomic_compare_exchange_n(&fs_fdreg_win, &old, old - 1, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
    ;
  (void)pthread_setcancelstate(fs_fdreg_my_cancel, NULL);
}

bool fs_fdreg_settle_slow(void)
{
  if (fs_fdreg_my_windows > 0 || fs_aside_here() || __atomic_load_n(&fs_fdreg_gave_up, __ATOMIC_RELAXED))
    return false;
  uint64_t self = fs_fdreg_win_self(), w = __atomic_load_n(&fs_fdreg_win, __ATOMIC_ACQUIRE);
  if (FS_FDREG_WIN_PID(w) != self) {
    /* a fork child: the parent's threads in their windows are not here */
    (void)__atomic_compare_exchange_n(&fs_fdreg_win, &w, FS_FDREG_WIN_PID(w), false, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED);
    return false;
  }
  int saved = errno;
  /* A window is a few system calls (an eventfd made and moved): yield
   * first, as a sleep costs more than that here; a long one (rdma-core
   * loading, milliseconds, once) is slept out. */
  uint64_t t0 = fs_clock_ns(), now = t0;
  struct timespec nap = { 0, 20000 };
  while (FS_FDREG_WIN_N(w) != 0 && FS_FDREG_WIN_PID(w) == self) {
    if (now - t0 >= FS_FDREG_SETTLE_MS * 1000000ull) {
      /* Something holds a window for good (a thread stopped inside it):
       * each close() must not pay this again. */
      __atomic_store_n(&fs_fdreg_gave_up, true, __ATOMIC_RELAXED);
      fs_log(FS_LOG_INFO, "a descriptor of the library's was in the making for %d ms: close() no longer waits for one",
             FS_FDREG_SETTLE_MS);
      break;
    }
    if (now - t0 < 50000)
      sched_yield();
    else
      nanosleep(&nap, NULL);
    now = fs_clock_ns();
    w = __atomic_load_n(&fs_fdreg_win, __ATOMIC_ACQUIRE);
  }
  errno = saved;
  return true;
}

void fs_fdreg_close(int fd)
{
  fs_fdreg_set(fd, false);
  FS_REAL(close)(fd);
}

int fs_fdreg_dir_open(struct fs_fdreg_dir *d, const char *path)
{
  d->fd = fs_fdreg_high(open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  d->pos = d->len = 0;
  return d->fd < 0 ? -errno : 0;
}

/* getdents64's record: d_ino, d_off, d_reclen, d_type, then the name. */
struct fs_fdreg_dirent {
  uint64_t ino;
  int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[];
};

const char *fs_fdreg_dir_next(struct fs_fdreg_dir *d)
{
  if (d->pos >= d->len) {
    long n = syscall(SYS_getdents64, d->fd, d->buf, sizeof d->buf);
    if (n <= 0)
      return NULL;
    d->pos = 0;
    d->len = (unsigned)n;
  }
  /* Read through memcpy, not a cast: the buffer is a char array. */
  const char *rec = d->buf + d->pos;
  unsigned short reclen;
  memcpy(&reclen, rec + offsetof(struct fs_fdreg_dirent, reclen), sizeof reclen);
  d->pos += reclen;
  return rec + offsetof(struct fs_fdreg_dirent, name);
}

void fs_fdreg_dir_close(struct fs_fdreg_dir *d)
{
  if (d->fd >= 0)
    FS_REAL(close)(d->fd);
  d->fd = -1;
}

/* An upgraded connection costs up to two fds of ours (its wake eventfd,
 * the peer's; none where both ring doorbells, engine/door.h).  See
 * base/fdreg.h; the limit is read again only when the answer would be
 * no (ulimit may have been raised). */
bool fs_fdreg_budget_ok(int fd, int need)
{
  unsigned long lim = fs_fdreg_limit();
  /* fd stands for the application's count (it takes the lowest free
   * numbers); ours are counted: both together stay under 3/4. */
  unsigned long n = (unsigned long)fd + __atomic_load_n(&fs_fdreg_n, __ATOMIC_RELAXED) + (unsigned long)need;
  if (n > lim / 4 * 3)
    lim = fs_fdreg_limit_ask(); /* raised, perhaps by another process (prlimit --pid) */
  return fd >= 0 && n <= lim / 4 * 3;
}

bool fs_fdreg_share_ok(int fd, unsigned kept)
{
  return fs_fdreg_budget_ok(fd, 1) && (unsigned long)kept + 1 <= fs_fdreg_limit() / 16;
}
