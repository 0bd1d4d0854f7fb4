/* The per-process connection table behind `fabsock stat` (format: base/stat.h).
 *
 * The table is made by the first fs_stat_slot_alloc() in the process's own
 * memory (anonymous, private), and becomes the file only when something
 * needs it there (fs_stat_publish: a listener, an accepted end another
 * process may look for, the agent's start, a connection kept on TCP for a
 * reason): a process whose connections never get as far as an upgrade
 * attempt (a one-shot client) makes no file, and one that never opens a
 * tracked socket no table at all.  Which slots
 * are taken is known only to this process (a bitmap under a mutex); readers
 * go by each slot's `used` word.  A failure to make the table turns stats
 * off for the process (alloc returns NULL), one to make the file leaves it
 * private (unlisted), each logged once at debug level: statistics never
 * make an application call fail.  Every entry point preserves errno.
 *
 * The file is sparse: a slot's page gets its block when a slot in it is
 * first handed out, by a call that can fail, never by a store through the
 * mapping.  A store into a hole of a full file system raises SIGBUS, which
 * killed the application at its 31st socket once /dev/shm was full (a
 * container's 64 MB /dev/shm, filled by the application's own segments);
 * now that socket is just not listed. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/aside.h"
#include "base/fdreg.h"
#include "base/hot.h"
#include "base/lock.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/stat.h"
#include "base/real.h"

#define FS_STAT_HDR_LEN sizeof(struct fs_stat_header)
#define FS_STAT_MAP_LEN (FS_STAT_HDR_LEN + (size_t)FS_STAT_SLOTS * sizeof(struct fs_stat_conn))
#define FS_STAT_WORDS (FS_STAT_SLOTS / 64)
#define FS_STAT_PAGES_MAX (FS_STAT_MAP_LEN / 4096 + 1) /* pages of the smallest size */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

enum { FS_STAT_UNTRIED = 0, FS_STAT_ON, FS_STAT_OFF };

/* Scalars and the path FS_HOT (base/hot.h): with them in .bss, a one-shot
 * client's first socket wrote four pages of it here (~10 us each); now
 * one, busy's first word. */
static fs_lock_t fs_stat_lock FS_HOT; /* base/lock.h: two a connection, inline */
static int fs_stat_mode FS_HOT;                     /* FS_STAT_UNTRIED/ON/OFF */
/* The mapping is the file (fs_stat_path names it); before, private memory. */
static bool fs_stat_public FS_HOT;
/* Nothing left for fs_stat_publish to do: published, failed, or off. */
bool fs_stat_settled FS_HOT;
static struct fs_stat_header *fs_stat_hdr FS_HOT;   /* the mapping; stays mapped once made */
static uint32_t fs_stat_hint FS_HOT;                /* every slot below this is taken */
static uint32_t fs_stat_top FS_HOT;                 /* no slot at or above this was ever
                                                       taken (the header's hi_water, kept
                                                       here too: a child after fork reads
                                                       its own pages, not the file's) */
static bool fs_stat_logged FS_HOT, fs_stat_full_logged FS_HOT, fs_stat_room_logged FS_HOT;
static size_t fs_stat_pgsz FS_HOT;

/* "<dir>/fabsock.<pid>.stat": the directory (at most 255 bytes) and 32 */
#define FS_STAT_PATH_LEN (256 + 32)
/* Our file; "" when there is none.  Its first fs_stat_dirc_len bytes are
 * FABSOCK_STATDIR as it was when the first table was made, for the tables
 * made after (a fork child's): the environment is looked up once. */
static char fs_stat_path[FS_STAT_PATH_LEN] FS_HOT;
static size_t fs_stat_dirc_len FS_HOT;
/* A file of ours to remove (exit, _exit, exec): fs_stat_path names one only
 * while the mapping is it; a fork child's private table keeps its parent's
 * name there, for the directory. */
static inline bool fs_stat_file_ours(void)
{
  return fs_stat_public && fs_stat_path[0] != '\0';
}
/* Slot i taken: bit i%64 of word i/64.  Word 0 in FS_HOT: a process's
 * first sockets touch no page of .bss for it (tests/t_libshape.sh). */
static uint64_t fs_stat_busy0 FS_HOT;
static uint64_t fs_stat_busy_more[FS_STAT_WORDS - 1];
static inline __attribute__((always_inline)) uint64_t *fs_stat_busy(uint32_t w)
{
  return w == 0 ? &fs_stat_busy0 : &fs_stat_busy_more[w - 1];
}
/* Page p > 0 of the file has its block (fs_stat_back): bit p%64 of word
 * p/64 (page 0, the header's, always has).  Beside fs_stat_top: a forked
 * child writes both (one page copied). */
static uint64_t fs_stat_backed[(FS_STAT_PAGES_MAX + 63) / 64];

static struct fs_stat_conn *fs_stat_slots(void)
{
  return (struct fs_stat_conn *)((char *)fs_stat_hdr + FS_STAT_HDR_LEN);
}

static void fs_stat_fail(const char *what, int err)
{
  if (!fs_stat_logged) {
    fs_stat_logged = true;
    fs_log(FS_LOG_DEBUG, "stat: %s: %s; connection statistics off", what, strerror(err));
  }
}

/* unlink and pwrite through the real table where it is resolved (before
 * every fork: a child's calls), else through the PLT.  Through the PLT, a
 * child whose parent never called them (its table made in place, unlinked
 * only at exit) bound them lazily, a symbol lookup through every library of
 * the process; and a first FS_REAL is a dlsym, which may wait for the
 * loader's lock: _exit may run in a signal handler, exec in a vfork child. */
FS_FORK_TEXT static int fs_stat_unlink(const char *path)
{
  int (*u)(const char *) = __atomic_load_n(&fs_real_tab.unlink, __ATOMIC_ACQUIRE);
  return (u ? u : unlink)(path);
}

FS_FORK_TEXT static ssize_t fs_stat_pwrite_raw(int fd, const void *buf, size_t n, off_t at)
{
  ssize_t (*w)(int, const void *, size_t, off_t) = __atomic_load_n(&fs_real_tab.pwrite, __ATOMIC_ACQUIRE);
  return (w ? w : pwrite)(fd, buf, n, at);
}

static void fs_stat_program(char *out, size_t len)
{
  const char *name = fs_proc_name();
  size_t n = strnlen(name, len - 1);
  memset(out, 0, len);
  memcpy(out, name, n);
}

/* Header fields for a table owned by pid; magic is left for the caller to
 * publish last, so a reader never trusts a half-written header.  proc_start
 * stays 0: boot_ns, taken after the owner started, tells a reused pid apart
 * (base/stat.h), and reading /proc/self/stat cost three system calls of a
 * process's first socket (a one-shot client's). */
FS_FORK_TEXT static void fs_stat_fill_header(struct fs_stat_header *h, int pid, uint32_t hi_water)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  h->version = FS_STAT_VERSION;
  h->pid = pid;
  h->nslots = FS_STAT_SLOTS;
  h->start_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
  h->proc_start = 0;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  h->boot_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
  fs_stat_program(h->program, sizeof h->program);
  h->hi_water = hi_water;
}

/* Create "<dir>/fabsock.<pid>.stat" at full (sparse) size; returns the fd or
 * -errno, the path in path.  A file already there carries our pid, so its
 * owner is gone (a dead process, or our own image before exec): replace it. */
static const char *fs_stat_dir(void)
{
  const char *dir = secure_getenv("FABSOCK_STATDIR");
  return dir == NULL || *dir == '\0' ? "/dev/shm" : dir;
}

/* "<dir>/fabsock.<pid>.stat" into path, or -ENAMETOOLONG.  Not snprintf:
 * a forked child names its table, and stdio's formatting is half a dozen
 * pages of libc code the child would fault in (base/proc.h says why). */
static int fs_stat_name(char *path, size_t len, const char *dir, size_t dirlen, int pid)
{
  char num[12];
  size_t n = 0;
  unsigned u = (unsigned)pid;
  do {
    num[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (dirlen + sizeof "/fabsock." - 1 + n + sizeof ".stat" > len)
    return -ENAMETOOLONG;
  memmove(path, dir, dirlen); /* a fork child names its table in place */
  char *p = path + dirlen;
  memcpy(p, "/fabsock.", sizeof "/fabsock." - 1);
  p += sizeof "/fabsock." - 1;
  while (n > 0)
    *p++ = num[--n];
  memcpy(p, ".stat", sizeof ".stat");
  return 0;
}

FS_FORK_TEXT static int fs_stat_create(int pid, char *path, size_t len)
{
  const char *dir = fs_stat_path; /* a table made before: its directory */
  if (fs_stat_dirc_len == 0) { /* the first table of this image */
    dir = fs_stat_dir();
    size_t dl = strlen(dir);
    if (dl >= 256)
      return -ENAMETOOLONG;
    fs_stat_dirc_len = dl;
  }
  int rc = fs_stat_name(path, len, dir, fs_stat_dirc_len, pid);
  if (rc < 0)
    return rc;
  int fd = -1;
  for (int attempt = 0; attempt < 2 && fd < 0; attempt++) {
    fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && (errno != EEXIST || attempt > 0 || fs_stat_unlink(path) < 0))
      return -errno;
  }
  /* Readable by all whatever the umask: a peer of another user finds
   * which of our processes holds a connection here (fs_stat_holders). */
  if (fchmod(fd, 0644) < 0 || ftruncate(fd, (off_t)FS_STAT_MAP_LEN) < 0) {
    int err = errno;
    fs_stat_unlink(path);
    FS_REAL(close)(fd);
    return -err;
  }
  return fd;
}

/* pwrite all of it: 0, or -errno (-ENOSPC for a short write: tmpfs full). */
static int fs_stat_pwrite(int fd, const void *buf, size_t n, off_t at)
{
  ssize_t w = fs_stat_pwrite_raw(fd, buf, n, at);
  return w == (ssize_t)n ? 0 : w < 0 ? -errno : -ENOSPC;
}

/* The first slot in use at or after i, or UINT32_MAX: the walk over the
 * rows a new file (fs_stat_fill_file) or a fork child's own memory
 * (fs_stat_private_child) is given. */
FS_FORK_TEXT static uint32_t fs_stat_next_busy(uint32_t i)
{
  for (uint32_t w = i / 64; w < (fs_stat_top + 63) / 64; w++) {
    uint64_t bits = *fs_stat_busy(w) & (w == i / 64 ? ~0ull << (i % 64) : ~0ull);
    if (bits != 0)
      return w * 64 + (uint32_t)__builtin_ctzll(bits);
  }
  return UINT32_MAX;
}

/* The file's contents: the rows of the slots we hold (none in a new table),
 * then the header, the magic last: a reader (pread, never a mapping) skips
 * the file until then (pwrite: fs_stat_pwrite_raw says why not through
 * the PLT).  0 or -errno; *top: the header's hi_water (one past the last
 * row written). */
FS_FORK_TEXT static int fs_stat_fill_file(int fd, int pid, bool forked, uint32_t *top)
{
  int rc = 0;
  uint32_t hi = 0;
  if (fs_stat_hdr != NULL) {
    const struct fs_stat_conn *from = fs_stat_slots();
    for (uint32_t i = fs_stat_next_busy(0); i != UINT32_MAX && rc == 0; i = fs_stat_next_busy(i + 1)) {
      rc = fs_stat_pwrite(fd, &from[i], sizeof from[i], (off_t)(FS_STAT_HDR_LEN + (size_t)i * sizeof from[i]));
      hi = i + 1;
    }
  }
  struct fs_stat_header nh;
  memset(&nh, 0, sizeof nh);
  fs_stat_fill_header(&nh, pid, hi);
  if (!forked && fs_stat_hdr != NULL) /* the same process (a failed exec): its counts go on */
    for (size_t k = 0; k < sizeof nh.closed / sizeof nh.closed[0]; k++)
      nh.closed[k] = __atomic_load_n(&fs_stat_hdr->closed[k], __ATOMIC_RELAXED);
  uint32_t magic = FS_STAT_MAGIC;
  if (rc == 0)
    rc = fs_stat_pwrite(fd, &nh, sizeof nh, 0);
  if (rc == 0)
    rc = fs_stat_pwrite(fd, &magic, sizeof magic, (off_t)offsetof(struct fs_stat_header, magic));
  *top = hi;
  return rc;
}

/* A new file: only the header's page has its block (written at creation,
 * so a process's first 30 sockets cost no call for it; fs_stat_back knows
 * page 0 without a bit, and a process's first table finds these zero). */
FS_FORK_TEXT static void fs_stat_backed_reset(void)
{
  memset(fs_stat_backed, 0, sizeof fs_stat_backed);
}

/* First allocation: the table in private memory (fs_stat_publish makes
 * it the file).  Called with the lock held.  The file cost a one-shot
 * client six system calls at its first socket() (a tmpfs inode made, sized
 * and mapped) and an unlink at exit, about a third of what its first
 * socket() cost here, for a table that nobody but `fabsock stat` reads. */
static void fs_stat_init(void)
{
  const char *env = getenv("FABSOCK_STAT");
  fs_stat_mode = FS_STAT_OFF;
  if (env != NULL && strcmp(env, "0") == 0) {
    fs_stat_settled = true;
    return;
  }
  void *map = mmap(NULL, FS_STAT_MAP_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (map == MAP_FAILED) {
    fs_stat_fail("table", errno);
    fs_stat_settled = true;
    return;
  }
  /* Nobody reads a private table's header but its closed counts: the
   * file gets a header of its own (fs_stat_fill_file).  Its pid, clocks
   * and program name here were two page faults of a one-shot client's
   * first socket() (getpid's code, the clocks' data page). */
  struct fs_stat_header *h = map;
  h->version = FS_STAT_VERSION;
  h->nslots = FS_STAT_SLOTS;
  __atomic_store_n(&h->magic, FS_STAT_MAGIC, __ATOMIC_RELEASE);
  __atomic_store_n(&fs_stat_hdr, h, __ATOMIC_RELEASE);
  /* busy, backed, hint and top are still zero: this is the image's only
   * call, before its first slot (a memset of busy wrote two pages more). */
  fs_stat_mode = FS_STAT_ON;
}

/* Slot i's bytes in the file, through our own fd on it (kernels before
 * MADV_POPULATE_WRITE): the slot is free, so zeros are what it holds. */
static int fs_stat_back_by_write(uint32_t i)
{
  if (fs_stat_path[0] == '\0')
    return -ENOENT; /* unlinked for an exec: not ours to write */
  fs_fdreg_make_begin();
  int fd = open(fs_stat_path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  int rc = fd < 0 ? -errno : 0;
  if (fd >= 0) {
    static const struct fs_stat_conn zero;
    rc = fs_stat_pwrite(fd, &zero, sizeof zero, (off_t)(FS_STAT_HDR_LEN + (size_t)i * sizeof zero));
    FS_REAL(close)(fd);
  }
  fs_fdreg_make_end();
  return rc;
}

/* Give slot i's page its block before anything is stored in it (lock held):
 * 0, or -errno (-ENOSPC: the file system is full, where a store would have
 * raised SIGBUS; -ENOMEM).  Once per page: a page stays backed (slots are
 * zeroed, never punched). */
static int fs_stat_back(uint32_t i)
{
  if (!fs_stat_public)
    return 0; /* private memory has no holes */
  if (fs_stat_pgsz == 0) {
    /* Asked here, not at the table's start: sysconf's code and table were
     * two page faults of a one-shot client's first socket(). */
    long pg = sysconf(_SC_PAGESIZE);
    fs_stat_pgsz = pg >= 4096 ? (size_t)pg : 4096;
  }
  size_t p = (FS_STAT_HDR_LEN + (size_t)i * sizeof(struct fs_stat_conn)) / fs_stat_pgsz;
  if (p == 0 || fs_stat_backed[p / 64] & (1ull << (p % 64)))
    return 0;
  int rc = madvise((char *)fs_stat_hdr + p * fs_stat_pgsz, fs_stat_pgsz, MADV_POPULATE_WRITE) == 0 ? 0 : -errno;
  if (rc == -EINVAL)
    rc = fs_stat_back_by_write(i);
  if (rc == -EFAULT)
    rc = -ENOSPC; /* the fault that would have been SIGBUS */
  if (rc == 0)
    fs_stat_backed[p / 64] |= 1ull << (p % 64);
  else if (!fs_stat_room_logged) {
    fs_stat_room_logged = true;
    fs_log(FS_LOG_INFO, "stat: no room in %.*s (%s): sockets are not listed in fabsock stat until there is",
           (int)fs_stat_dirc_len, fs_stat_path, strerror(-rc));
  }
  return rc;
}

static void fs_stat_publish_locked(void);

struct fs_stat_conn *fs_stat_slot_alloc(void)
{
  int saved = errno;
  struct fs_stat_conn *s = NULL;
  fs_proc_fork_work_add(FS_FORK_STAT);
  fs_lock(&fs_stat_lock);
  if (fs_stat_mode == FS_STAT_UNTRIED)
    fs_stat_init();
  /* Private only while the process has one thread: then nobody writes a
   * row while fs_stat_publish copies them.  A process with threads (from
   * the start, or since) has its file before this slot is handed out; a
   * row another thread writes during that copy may miss it (at most once
   * per process: its table stays the file). */
  if (!__atomic_load_n(&fs_stat_settled, __ATOMIC_RELAXED) && fs_stat_mode == FS_STAT_ON &&
      !fs_proc_never_threaded())
    fs_stat_publish_locked();
  bool room = true;
  if (fs_stat_mode == FS_STAT_ON) {
    for (uint32_t w = fs_stat_hint / 64; w < FS_STAT_WORDS; w++) {
      if (*fs_stat_busy(w) == UINT64_MAX)
        continue;
      uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(~*fs_stat_busy(w));
      if (fs_stat_back(i) < 0) {
        room = false; /* the socket is not listed (a later one may be) */
        break;
      }
      *fs_stat_busy(w) |= 1ull << (i % 64);
      fs_stat_hint = i + 1;
      if (i + 1 > fs_stat_top) {
        fs_stat_top = i + 1;
        __atomic_store_n(&fs_stat_hdr->hi_water, i + 1, __ATOMIC_RELEASE);
      }
      s = &fs_stat_slots()[i];
      break;
    }
    if (s == NULL && room && !fs_stat_full_logged) {
      fs_stat_full_logged = true;
      fs_log(FS_LOG_DEBUG, "stat: all %d slots taken; further sockets are not listed", FS_STAT_SLOTS);
    }
  }
  fs_unlock(&fs_stat_lock);
  errno = saved;
  return s;
}

void fs_stat_slot_free(struct fs_stat_conn *s)
{
  int saved = errno;
  struct fs_stat_header *h = __atomic_load_n(&fs_stat_hdr, __ATOMIC_ACQUIRE);
  if (s == NULL || h == NULL)
    goto out;
  /* Only our own slots: anything else (a stray pointer) is ignored. */
  uintptr_t off = (uintptr_t)s - ((uintptr_t)h + FS_STAT_HDR_LEN);
  if (off >= (uintptr_t)FS_STAT_SLOTS * sizeof *s || off % sizeof *s != 0)
    goto out;
  uint32_t i = (uint32_t)(off / sizeof *s);
  uint64_t bit = 1ull << (i % 64);
  fs_proc_fork_work_add(FS_FORK_STAT);
  fs_lock(&fs_stat_lock);
  if (*fs_stat_busy(i / 64) & bit) { /* not allocated: nothing to do */
    if (s->dir != 0 && !s->listening) {
      unsigned f = s->fabric_used ? s->fabric_used : FS_STAT_FABRIC_TCP;
      if (f < sizeof h->closed / sizeof h->closed[0])
        __atomic_fetch_add(&h->closed[f], 1, __ATOMIC_RELAXED);
    }
    /* Unpublish first, so a reader never sees a live slot half zeroed. */
    __atomic_store_n(&s->used, 0, __ATOMIC_RELEASE);
    memset((char *)s + sizeof s->used, 0, sizeof *s - sizeof s->used);
    *fs_stat_busy(i / 64) &= ~bit;
    if (i < fs_stat_hint)
      fs_stat_hint = i;
  }
  fs_unlock(&fs_stat_lock);
out:
  errno = saved;
}

/* Give the child its own file with the slots it owns (its copy of the
 * bitmap; the parent may have moved on since fork), then map that file over
 * the old mapping, which is still the parent's file, so slot pointers held by
 * connections stay valid.  No temporary mapping: its mmap, munmap and faults
 * were a third of what a fork cost a process with a table. */
FS_FORK_TEXT static int fs_stat_rehome(char *path, size_t len, bool forked)
{
  int pid = (int)getpid();
  /* A window only after a failed exec: a fork child is here at the fork,
   * its one thread, with nobody to close its numbers meanwhile (and each
   * write to the library's pages is a page copied). */
  if (!forked)
    fs_fdreg_make_begin();
  int fd = fs_stat_create(pid, path, len);
  if (fd < 0) {
    if (!forked)
      fs_fdreg_make_end();
    return fd;
  }
  uint32_t top;
  int rc = fs_stat_fill_file(fd, pid, forked, &top);
  if (rc == 0 &&
      mmap(fs_stat_hdr, FS_STAT_MAP_LEN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
    rc = -errno;
  FS_REAL(close)(fd);
  if (!forked)
    fs_fdreg_make_end();
  if (rc < 0) {
    fs_stat_unlink(path);
  } else {
    fs_stat_top = top; /* the new file's hi_water: a slot above it raises it */
    fs_stat_backed_reset(); /* a new file: its holes are new */
  }
  return rc;
}

/* The child's rows, copied from the parent's file into memory of its own
 * that then takes the file's place (mremap: slot pointers held stay
 * valid).  A fresh header (this pid, closed counts from 0).  fs_stat_path
 * keeps the parent's name, for its directory (fs_stat_create); no file is
 * ours until fs_stat_publish (fs_stat_public says which).  0 or -errno. */
FS_FORK_TEXT static int fs_stat_private_child(void)
{
  void *m = mmap(NULL, FS_STAT_MAP_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED)
    return -errno;
  struct fs_stat_conn *to = (struct fs_stat_conn *)((char *)m + FS_STAT_HDR_LEN);
  const struct fs_stat_conn *from = fs_stat_slots();
  uint32_t hi = 0;
  for (uint32_t i = fs_stat_next_busy(0); i != UINT32_MAX; i = fs_stat_next_busy(i + 1)) {
    memcpy(&to[i], &from[i], sizeof to[i]);
    hi = i + 1;
  }
  struct fs_stat_header *h = m;
  fs_stat_fill_header(h, fs_proc_self_light(), hi);
  h->magic = FS_STAT_MAGIC;
  if (mremap(m, FS_STAT_MAP_LEN, FS_STAT_MAP_LEN, MREMAP_MAYMOVE | MREMAP_FIXED, fs_stat_hdr) == MAP_FAILED) {
    int err = -errno;
    munmap(m, FS_STAT_MAP_LEN);
    return err;
  }
  fs_stat_top = hi;
  fs_stat_public = false;
  __atomic_store_n(&fs_stat_settled, false, __ATOMIC_RELEASE);
  return 0;
}

FS_FORK_TEXT void fs_stat_atfork_child_slow(bool keep_private)
{
  int saved = errno;
  fs_lock_fork_reset(&fs_stat_lock);
  if (fs_stat_hdr == NULL || !fs_stat_public)
    goto out; /* none, or private memory: fork made the child its own copy */
  if (keep_private && fs_stat_mode == FS_STAT_ON && fs_stat_private_child() == 0)
    goto out;
  /* Named in place: the parent's name is of no use here, and a PATH_MAX
   * buffer on the stack is one more page to fault in. */
  int rc = fs_stat_mode == FS_STAT_ON ? fs_stat_rehome(fs_stat_path, sizeof fs_stat_path, true) : -ENOENT;
  if (rc == 0)
    goto out;
  /* Never write into the parent's file: park the slots on private memory. */
  if (fs_stat_mode == FS_STAT_ON)
    fs_stat_fail("fork", -rc);
  fs_stat_mode = FS_STAT_OFF;
  fs_stat_public = false;
  fs_stat_settled = true;
  fs_stat_path[0] = '\0';
  if (mmap(fs_stat_hdr, FS_STAT_MAP_LEN, PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
    fs_log(FS_LOG_WARN, "stat: cannot detach the parent's table after fork: %s", strerror(errno));
out:
  errno = saved;
}

/* Lock held.  The rows are copied from private memory into the file, then
 * the file is mapped in its place: a store another thread makes in between
 * is lost.  Hence only while the process has one thread (below). */
static void fs_stat_publish_locked(void)
{
  if (fs_stat_mode == FS_STAT_ON && !fs_stat_public) {
    char path[FS_STAT_PATH_LEN] = "";
    int rc = fs_stat_rehome(path, sizeof path, false);
    if (rc == 0) {
      memcpy(fs_stat_path, path, strlen(path) + 1);
      fs_stat_public = true;
    } else {
      fs_stat_fail(rc == -ENAMETOOLONG ? "FABSOCK_STATDIR" : path, -rc); /* stays private: counts go on */
    }
  }
  /* A process with no table yet (no tracked socket) settles at its first. */
  if (fs_stat_mode != FS_STAT_UNTRIED)
    __atomic_store_n(&fs_stat_settled, true, __ATOMIC_RELEASE);
}

void fs_stat_publish_slow(void)
{
  int saved = errno;
  fs_lock(&fs_stat_lock);
  fs_stat_publish_locked();
  fs_unlock(&fs_stat_lock);
  errno = saved;
}

static bool fs_stat_unlinked FS_HOT; /* by fs_stat_exec, until the exec is known to have failed */

void fs_stat_exec_slow(bool failed)
{
  int saved = errno;
  fs_lock(&fs_stat_lock);
  if (!failed && fs_stat_mode == FS_STAT_ON && fs_stat_file_ours()) {
    fs_stat_unlink(fs_stat_path);
    fs_stat_unlinked = true;
  } else if (failed && fs_stat_unlinked) {
    char path[FS_STAT_PATH_LEN];
    if (fs_stat_rehome(path, sizeof path, false) == 0)
      memcpy(fs_stat_path, path, sizeof path);
    else
      fs_stat_path[0] = '\0'; /* the table stays ours, unlisted */
    fs_stat_unlinked = false;
  }
  fs_unlock(&fs_stat_lock);
  errno = saved;
}

void fs_stat_shutdown(void)
{
  int saved = errno;
  fs_proc_fork_work_add(FS_FORK_STAT);
  fs_lock(&fs_stat_lock);
  if (fs_stat_file_ours())
    fs_stat_unlink(fs_stat_path);
  fs_stat_path[0] = '\0';
  /* Keep the mapping: late frees and counter updates still land in it. */
  fs_stat_mode = FS_STAT_OFF;
  fs_stat_settled = true;
  fs_unlock(&fs_stat_lock);
  errno = saved;
}

FS_FORK_TEXT void fs_stat_exit_quick_slow(void)
{
  struct fs_stat_header *h = __atomic_load_n(&fs_stat_hdr, __ATOMIC_ACQUIRE);
  if (h == NULL || __atomic_load_n(&fs_stat_mode, __ATOMIC_RELAXED) != FS_STAT_ON || !fs_stat_file_ours())
    return;
  int saved = errno;
  if (__atomic_load_n(&h->pid, __ATOMIC_RELAXED) == (int32_t)getpid())
    fs_stat_unlink(fs_stat_path); /* no dlsym: a signal handler may be here */
  errno = saved;
}

/* ---- reading other processes' tables --------------------------------- */

/* Does the table in fd (owner pid) list a live connection on inode?  Read
 * with pread, never mapped: its owner may truncate it under us (SIGBUS),
 * and every bound comes from our own constants, not from the file. */
/* What a scan looks for: a live connection on inode, or (inode 0) a
 * listening socket on port. */
struct fs_stat_want {
  uint32_t inode;
  uint16_t port;
};

static bool fs_stat_row_is(const struct fs_stat_conn *r, const struct fs_stat_want *w)
{
  if (r->used != 1 || r->state == FS_STAT_STATE_CLOSED)
    return false;
  return w->inode ? r->inode == w->inode && !r->listening : r->listening && r->lport == w->port;
}

static bool fs_stat_file_has(int fd, int pid, const struct fs_stat_want *w)
{
  struct fs_stat_header h;
  if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || h.magic != FS_STAT_MAGIC ||
      h.version != FS_STAT_VERSION || h.pid != pid)
    return false;
  uint32_t n = h.hi_water < FS_STAT_SLOTS ? h.hi_water : FS_STAT_SLOTS;
  struct fs_stat_conn buf[64];
  for (uint32_t i = 0; i < n; i += 64) {
    uint32_t k = n - i < 64 ? n - i : 64;
    ssize_t r = pread(fd, buf, k * sizeof buf[0], (off_t)(FS_STAT_HDR_LEN + (size_t)i * sizeof buf[0]));
    if (r <= 0)
      return false;
    for (uint32_t j = 0; j < (uint32_t)r / sizeof buf[0]; j++)
      if (fs_stat_row_is(&buf[j], w))
        return true;
  }
  return false;
}

struct fs_stat_find_job {
  const struct fs_stat_want *w;
  int *pids, max;
};

/* The scan itself: opens the directory and every table in it, so it runs
 * aside (base/aside.h), where those descriptors never meet the
 * application's.  Returns the number of holders, or -errno. */
static int fs_stat_find_job(void *arg)
{
  const struct fs_stat_find_job *j = arg;
  struct fs_fdreg_dir d;
  int rc = fs_fdreg_dir_open(&d, fs_stat_dir());
  if (rc < 0)
    return rc;
  int self = (int)getpid(), found = 0;
  for (const char *name; (name = fs_fdreg_dir_next(&d)) != NULL;) {
    char *end;
    if (strncmp(name, "fabsock.", 8) != 0)
      continue;
    long pid = strtol(name + 8, &end, 10);
    if (end == name + 8 || strcmp(end, ".stat") != 0 || pid <= 0 || pid > INT_MAX || pid == self)
      continue;
    if (kill((pid_t)pid, 0) < 0 && errno == ESRCH) {
      /* Left by a killed process (no exit handler ran): remove it where
       * we may, or every lookup pays for it.  A new process of that pid
       * replaces the file (O_EXCL) rather than reusing it. */
      (void)unlinkat(d.fd, name, 0);
      continue;
    }
    int fd = fs_fdreg_high(openat(d.fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    if (fd < 0)
      continue;
    if (fs_stat_file_has(fd, (int)pid, j->w)) {
      if (found < j->max)
        j->pids[found] = (int)pid;
      found++;
    }
    FS_REAL(close)(fd);
  }
  fs_fdreg_dir_close(&d);
  return found;
}

static int fs_stat_find(const struct fs_stat_want *w, int *pids, int max)
{
  struct fs_stat_find_job j = { w, pids, max };
  return fs_aside_run(fs_stat_find_job, &j); /* keeps errno */
}

int fs_stat_holders(uint32_t inode, int *pids, int max)
{
  if (inode == 0)
    return -EINVAL;
  struct fs_stat_want w = { inode, 0 };
  return fs_stat_find(&w, pids, max);
}

int fs_stat_listeners(uint16_t port, int *pids, int max)
{
  if (port == 0)
    return -EINVAL;
  struct fs_stat_want w = { 0, port };
  return fs_stat_find(&w, pids, max);
}
