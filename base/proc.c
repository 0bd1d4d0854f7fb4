/* fs_proc_name: which name a process goes by.
 *
 * Not /proc/self/exe: it resolves symlinks (Debian's redis-server is a link
 * to redis-check-rdb, and a rule for "redis-server" must match).  Not
 * argv[0] (program_invocation_short_name) either: servers that set their
 * process title (nginx, PostgreSQL, redis) write over argv in place, so
 * "nginx" reads "ter process" by the time the first socket is made.  The
 * kernel keeps the path given to execve in the auxiliary vector (AT_EXECFN),
 * beyond argv and the environment strings that such titles reuse; the
 * kernel's own comm, which ps shows, is that path's base name too.
 * Fallbacks: /proc/self/comm, then argv[0]. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>
#define FS_HAVE_SINGLE_THREADED 1
#endif
#endif
#ifndef FS_HAVE_SINGLE_THREADED
#define FS_HAVE_SINGLE_THREADED 0
#endif

#include "base/aside.h"
#include "base/hot.h"
#include "base/fdreg.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/real.h"

extern char *program_invocation_short_name;

/* FS_HOT (base/hot.h): the exit of a process that never made a socket
 * reads it (engine/exit.c); the constructor's stores and every arm's load
 * land there too. */
uint32_t fs_proc_fork_work FS_HOT;
static void (*fs_proc_atfork_fn[3])(void) FS_HOT;
bool fs_proc_atfork_armed FS_HOT;

void fs_proc_atfork_set(void (*prepare)(void), void (*parent)(void), void (*child)(void))
{
  fs_proc_atfork_fn[0] = prepare;
  fs_proc_atfork_fn[1] = parent;
  __atomic_store_n(&fs_proc_atfork_fn[2], child, __ATOMIC_RELEASE);
}

/* Registered after the handlers other libraries registered at their load,
 * ours run before theirs in the parent and after theirs in the child, as
 * for any library that registers late.  glibc 2.36 (Debian 12) runs each
 * handler with its atfork lock released, so this may even be reached from
 * another library's handler (docs/design.md 1.6).  A failure (out of
 * memory) leaves the process as a build without handlers: forks through
 * fork() are ours anyway (preload/proc.c). */
void fs_proc_atfork_arm_slow(void)
{
  if (!__atomic_load_n(&fs_proc_atfork_fn[2], __ATOMIC_ACQUIRE) ||
      __atomic_exchange_n(&fs_proc_atfork_armed, true, __ATOMIC_ACQ_REL))
    return;
  int saved = errno;
  (void)pthread_atfork(fs_proc_atfork_fn[0], fs_proc_atfork_fn[1], fs_proc_atfork_fn[2]);
  errno = saved;
}

static char fs_proc_buf[64] FS_HOT;
static pthread_once_t fs_proc_once FS_HOT = PTHREAD_ONCE_INIT;

static void fs_proc_set(const char *s, size_t n)
{
  if (n >= sizeof fs_proc_buf)
    n = sizeof fs_proc_buf - 1;
  memcpy(fs_proc_buf, s, n);
  fs_proc_buf[n] = '\0';
}

static void fs_proc_find(void)
{
  int saved = errno;
  const char *fn = (const char *)getauxval(AT_EXECFN);
  if (fn && *fn) {
    const char *slash = strrchr(fn, '/');
    const char *base = slash ? slash + 1 : fn;
    if (*base) {
      fs_proc_set(base, strlen(base));
      goto out;
    }
  }
  char b[65];
  size_t n = fs_proc_read("/proc/self/comm", b, sizeof b);
  while (n > 0 && b[n - 1] == '\n')
    n--;
  if (n > 0) {
    fs_proc_set(b, n);
    goto out;
  }
  if (program_invocation_short_name)
    fs_proc_set(program_invocation_short_name, strlen(program_invocation_short_name));
out:
  errno = saved;
}

const char *fs_proc_name(void)
{
  pthread_once(&fs_proc_once, fs_proc_find);
  return fs_proc_buf;
}

struct fs_proc_holds_job {
  int pid;
  unsigned long inode;
};

/* Lists /proc/PID/fd: runs aside (base/aside.h), so the directory's
 * descriptor is never one of the application's numbers. */
static int fs_proc_holds_job(void *arg)
{
  const struct fs_proc_holds_job *j = arg;
  char path[64], want[48], link[64];
  snprintf(path, sizeof path, "/proc/%d/fd", j->pid);
  snprintf(want, sizeof want, "socket:[%lu]", j->inode);
  size_t wl = strlen(want);
  struct fs_fdreg_dir d;
  int rc = fs_fdreg_dir_open(&d, path);
  if (rc < 0)
    return rc == -ENOENT ? 0 : rc;
  for (const char *name; rc == 0 && (name = fs_fdreg_dir_next(&d)) != NULL;) {
    if (name[0] == '.')
      continue;
    ssize_t n = readlinkat(d.fd, name, link, sizeof link);
    rc = n == (ssize_t)wl && memcmp(link, want, wl) == 0;
  }
  fs_fdreg_dir_close(&d);
  return rc;
}

int fs_proc_holds_socket(int pid, unsigned long inode)
{
  struct fs_proc_holds_job j = { pid, inode };
  return fs_aside_run(fs_proc_holds_job, &j); /* keeps errno */
}

size_t fs_proc_read(const char *path, char *buf, size_t len)
{
  int saved = errno;
  ssize_t n = -1;
  fs_fdreg_make_begin(); /* at the lowest free number, for a moment */
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    n = FS_REAL(read)(fd, buf, len - 1);
    FS_REAL(close)(fd);
  }
  fs_fdreg_make_end();
  errno = saved;
  if (n <= 0) {
    buf[0] = '\0';
    return 0;
  }
  buf[n] = '\0';
  return (size_t)n;
}

/* Rings took whatever address space was left: under ulimit -v 384 MiB a
 * Python client that plain TCP served failed with MemoryError after 48
 * upgraded connections (4 MiB rings, mapped by both ends; t_aslimit). */
int fs_proc_as_room(size_t bytes)
{
  struct rlimit rl;
  char buf[96];
  int saved = errno, rc = 0;
  if (getrlimit(RLIMIT_AS, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
    goto out;
  if (fs_proc_read("/proc/self/statm", buf, sizeof buf) == 0)
    goto out; /* cannot tell: the mapping itself may still fail */
  unsigned long long vm = strtoull(buf, NULL, 10) * (unsigned long long)sysconf(_SC_PAGESIZE);
  unsigned long long lim = rl.rlim_cur, keep = lim / FS_PROC_AS_KEEP;
  if (vm < lim && bytes <= lim - vm && lim - vm - bytes >= keep)
    goto out;
  rc = -ENOMEM;
  static int told;
  if (!__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
    fs_log(FS_LOG_INFO, "address space: %llu of %llu KiB (RLIMIT_AS) in use; connections whose rings would leave "
           "the application less than half of it stay on tcp (reason resources)", vm >> 10, lim >> 10);
out:
  errno = saved;
  return rc;
}

int fs_proc_threads(void)
{
  struct stat st;
  int saved = errno;
  int n = stat("/proc/self/task", &st) == 0 && st.st_nlink > 2 ? (int)(st.st_nlink - 2) : -1;
  errno = saved;
  return n;
}

bool fs_proc_never_threaded(void)
{
#if FS_HAVE_SINGLE_THREADED
  return __libc_single_threaded;
#else
  return false;
#endif
}

bool fs_proc_single_threaded(void)
{
  return fs_proc_never_threaded() || fs_proc_threads() == 1;
}

/* The page holding the pid; FS_PROC_SELF_NONE where the kernel has no
 * MADV_WIPEONFORK (before 4.14): getpid() each time there. */
#define FS_PROC_SELF_NONE ((int *)1)
static int *fs_proc_self_slot FS_HOT;

int fs_proc_self_light(void)
{
  int *s = __atomic_load_n(&fs_proc_self_slot, __ATOMIC_ACQUIRE);
  return s == NULL || s == FS_PROC_SELF_NONE ? (int)getpid() : fs_proc_self();
}

int fs_proc_self(void)
{
  int *s = __atomic_load_n(&fs_proc_self_slot, __ATOMIC_ACQUIRE);
  if (__builtin_expect(s != NULL && s != FS_PROC_SELF_NONE, 1)) {
    int pid = __atomic_load_n(s, __ATOMIC_RELAXED);
    if (__builtin_expect(pid != 0, 1))
      return pid;
    pid = (int)getpid(); /* a child: the page came zeroed */
    __atomic_store_n(s, pid, __ATOMIC_RELAXED);
    return pid;
  }
  if (s == FS_PROC_SELF_NONE)
    return (int)getpid();
  int saved = errno;
  long pg = sysconf(_SC_PAGESIZE);
  size_t len = pg > 0 ? (size_t)pg : 4096;
  int *page = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  int *want = FS_PROC_SELF_NONE;
  if (page != MAP_FAILED) {
    if (madvise(page, len, MADV_WIPEONFORK) == 0)
      want = page;
    else
      munmap(page, len);
  }
  int *none = NULL;
  if (!__atomic_compare_exchange_n(&fs_proc_self_slot, &none, want, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
      want != FS_PROC_SELF_NONE)
    munmap(want, len); /* another thread's page won */
  errno = saved;
  return fs_proc_self();
}
