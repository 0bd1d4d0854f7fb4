/* fd -> connection table.
 *
 * A flat array of atomic pointers indexed by fd (static, so the lookup of an
 * fd we do not track is one bounds check and one load; untouched pages of the
 * array cost nothing).  Each installed fd holds one reference on its
 * connection; dup'ed fds hold one each.  Readers take a reference without a
 * lock: connection memory is type-stable (engine/conn.c never returns it to the
 * system), so a reader that raced with the last put sees refs == 0 and fails
 * its try-get, and the slot is re-read after the get to catch reuse. */
#ifndef FS_ENGINE_FDTAB_H
#define FS_ENGINE_FDTAB_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/conn.h"

#define FS_FDTAB_SIZE (1 << 20)

extern struct fs_conn *fs_fdtab_slots[FS_FDTAB_SIZE];

struct fs_conn *fs_fdtab_get_slow(int fd, struct fs_conn *c);

/* A referenced connection for fd, or NULL (the common, one-load case). */
static inline struct fs_conn *fs_fdtab_get(int fd)
{
  if (__builtin_expect((unsigned)fd >= FS_FDTAB_SIZE, 0))
    return NULL;
  struct fs_conn *c = __atomic_load_n(&fs_fdtab_slots[fd], __ATOMIC_ACQUIRE);
  if (__builtin_expect(c == NULL, 1))
    return NULL;
  return fs_fdtab_get_slow(fd, c);
}

/* Whether fd has an entry (one load, no reference taken). */
static inline bool fs_fdtab_tracked(int fd)
{
  return (unsigned)fd < FS_FDTAB_SIZE && __atomic_load_n(&fs_fdtab_slots[fd], __ATOMIC_RELAXED) != NULL;
}

/* Whether fd's entry is c (the caller holds a reference: c is no other
 * connection's memory meanwhile).  While it is, fd is c's socket: an entry
 * goes before the kernel's close, another socket's comes after. */
static inline bool fs_fdtab_names(int fd, const struct fs_conn *c)
{
  return (unsigned)fd < FS_FDTAB_SIZE && __atomic_load_n(&fs_fdtab_slots[fd], __ATOMIC_ACQUIRE) == c;
}

/* Install c at fd, taking a new reference; drops whatever was there (a stale
 * entry left by a close we did not see).  -EBADF if fd is out of range. */
int fs_fdtab_install(int fd, struct fs_conn *c);

/* Remove fd's entry and return it with the table's reference (NULL if none). */
struct fs_conn *fs_fdtab_take(int fd);

/* Call fn on every installed connection (for fork/exec hooks); fn gets a
 * reference it must not drop. Not safe against concurrent installs of the
 * same fd, which the callers exclude (they run single-threaded or under the
 * process-wide fork lock). */
void fs_fdtab_foreach(void (*fn)(int fd, struct fs_conn *c, void *arg), void *arg);

/* Highest fd ever installed + 1 (bounds foreach). */
extern int fs_fdtab_hiwater;

#endif
