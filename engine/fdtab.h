/* fd -> connection table.
 *
 * Atomic pointers indexed by fd: the first FS_FDTAB_LOW fds in a static
 * array (a program's own fds are low: the lookup of one we do not track is
 * a check against the high water and one load, or that check alone), the
 * rest in a table mapped at the first install that needs it (two loads:
 * its address, then the slot).  Untouched
 * pages cost nothing.  The whole table was static: 8 MiB of .bss (16 with the
 * epoll sets' table) cost every preloaded process start 9-10 us here, whether
 * it ever made a socket or not; an empty library with a .bss of 1 MiB or more
 * starts 25-30 us slower than one with 64 KiB (bench/start-cost.sh).  Each
 * installed fd holds one reference on its connection; dup'ed fds hold one
 * each.  Readers take a reference without a
 * lock: connection memory is type-stable (engine/conn.c never returns it to the
 * system), so a reader that raced with the last put sees refs == 0 and fails
 * its try-get, and the slot is re-read after the get to catch reuse. */
#ifndef FS_ENGINE_FDTAB_H
#define FS_ENGINE_FDTAB_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/conn.h"

#define FS_FDTAB_SIZE (1 << 20)
#define FS_FDTAB_LOW 8192 /* 64 KiB of .bss per table */

extern struct fs_conn *fs_fdtab_low[FS_FDTAB_LOW];
/* FS_FDTAB_SIZE slots (the first FS_FDTAB_LOW unused), or NULL before the
 * first install of an fd from FS_FDTAB_LOW up (atomic). */
extern struct fs_conn **fs_fdtab_high;

/* A zeroed table of FS_FDTAB_SIZE pointers, or NULL (errno kept); and its
 * unmapping. */
void *fs_fdtab_map_new(void);
void fs_fdtab_map_drop(void *t);

/* *tabp (a table pointer, atomic), mapped first if NULL; another thread's
 * may win.  NULL if none can be mapped. */
#define FS_FDTAB_ENSURE(tabp)                                                                         \
  ({                                                                                                  \
    __typeof__(*(tabp)) t_ = __atomic_load_n((tabp), __ATOMIC_ACQUIRE);                               \
    if (!t_) {                                                                                        \
      __typeof__(*(tabp)) m_ = fs_fdtab_map_new();                                                    \
      if (m_ && !__atomic_compare_exchange_n((tabp), &t_, m_, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) \
        fs_fdtab_map_drop(m_);                                                                        \
      else                                                                                            \
        t_ = m_;                                                                                      \
    }                                                                                                 \
    t_;                                                                                               \
  })

/* A table's high water *hwp: highest fd ever given a slot + 1 (atomic).
 * Creating raises it before the slot is written; looking at or above it
 * reads no page of the table: a process that never tracked a socket reads
 * none, and the first read of one costs ~10 us here (`cat` under the
 * library paid it at its first write, and at close() for the epoll table).
 * False: nothing there. */
static inline bool fs_fdtab_below(int *hwp, unsigned f, bool create)
{
  if (!create)
    return f < (unsigned)__atomic_load_n(hwp, __ATOMIC_RELAXED);
  int hw = __atomic_load_n(hwp, __ATOMIC_RELAXED);
  while (f < FS_FDTAB_SIZE && (int)f + 1 > hw &&
         !__atomic_compare_exchange_n(hwp, &hw, (int)f + 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    ;
  return true;
}

/* The slot of fd in a table of two tiers: low[FS_FDTAB_LOW], static, and
 * *highp, FS_FDTAB_SIZE slots mapped at the first need (when create), with
 * its high water *hwp (fs_fdtab_below).  NULL if fd is out of range, at or
 * above the high water when looking, or high with no high table (none to
 * be had). */
#define FS_FDTAB_SLOT(low, highp, hwp, fd, create)                                                    \
  ({                                                                                                  \
    __typeof__(&(low)[0]) s_ = NULL;                                                                  \
    unsigned f_ = (unsigned)(fd);                                                                     \
    if (!fs_fdtab_below((hwp), f_, (create)))                                                         \
      ;                                                                                               \
    else if (__builtin_expect(f_ < FS_FDTAB_LOW, 1))                                                  \
      s_ = &(low)[f_];                                                                                \
    else if (f_ < FS_FDTAB_SIZE) {                                                                    \
      __typeof__(*(highp)) h_ = (create) ? FS_FDTAB_ENSURE(highp) : __atomic_load_n((highp), __ATOMIC_ACQUIRE); \
      if (h_)                                                                                         \
        s_ = &h_[f_];                                                                                 \
    }                                                                                                 \
    s_;                                                                                               \
  })

/* Highest fd ever installed + 1 (bounds foreach and lookups: its high
 * water, fs_fdtab_below).  FS_HOT (base/hot.h). */
extern int fs_fdtab_hiwater;

/* The slot of fd, or NULL if fd is out of range, at or above the high
 * water, or high with no high table yet. */
static inline struct fs_conn **fs_fdtab_slot(int fd)
{
  return FS_FDTAB_SLOT(fs_fdtab_low, &fs_fdtab_high, &fs_fdtab_hiwater, fd, false);
}

/* c, referenced, if slot s still holds it after the reference is taken. */
struct fs_conn *fs_fdtab_get_slow(struct fs_conn **s, struct fs_conn *c);

/* Whether any fd was ever installed (a scan over many fds can stop here). */
static inline bool fs_fdtab_any(void)
{
  return __atomic_load_n(&fs_fdtab_hiwater, __ATOMIC_RELAXED) != 0;
}

/* A referenced connection for fd, or NULL (the common case). */
static inline struct fs_conn *fs_fdtab_get(int fd)
{
  struct fs_conn **s = fs_fdtab_slot(fd);
  if (s == NULL)
    return NULL;
  struct fs_conn *c = __atomic_load_n(s, __ATOMIC_ACQUIRE);
  if (__builtin_expect(c == NULL, 1))
    return NULL;
  return fs_fdtab_get_slow(s, c);
}

/* Whether fd has an entry (no reference taken). */
static inline bool fs_fdtab_tracked(int fd)
{
  struct fs_conn **s = fs_fdtab_slot(fd);
  return s != NULL && __atomic_load_n(s, __ATOMIC_RELAXED) != NULL;
}

/* Whether fd's entry is c (the caller holds a reference: c is no other
 * connection's memory meanwhile).  While it is, fd is c's socket: an entry
 * goes before the kernel's close, another socket's comes after. */
static inline bool fs_fdtab_names(int fd, const struct fs_conn *c)
{
  struct fs_conn **s = fs_fdtab_slot(fd);
  return s != NULL && __atomic_load_n(s, __ATOMIC_ACQUIRE) == c;
}

/* Install c at fd, taking a new reference; drops whatever was there (a stale
 * entry left by a close we did not see).  -EBADF if fd is out of range,
 * -ENOMEM if the high table cannot be mapped (the socket stays plain TCP). */
int fs_fdtab_install(int fd, struct fs_conn *c);

/* Remove fd's entry and return it with the table's reference (NULL if none). */
struct fs_conn *fs_fdtab_take(int fd);

/* Call fn on every installed connection (for fork/exec hooks); fn gets a
 * reference it must not drop. Not safe against concurrent installs of the
 * same fd, which the callers exclude (they run single-threaded or under the
 * process-wide fork lock). */
void fs_fdtab_foreach(void (*fn)(int fd, struct fs_conn *c, void *arg), void *arg);

#endif
