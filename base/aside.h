/* Work done aside: a library thread with a descriptor table of its own.
 *
 * Some of the library's background work opens files by the dozen: the
 * lookup of which process holds a socket reads every process's stat table
 * and lists /proc/PID/fd.  Each open() takes the application's lowest free
 * number.  An application that closes "everything" (a close() loop,
 * closefrom) in another thread meanwhile would find its number still open,
 * and its next open() would get another one; the library would close a
 * number the application may have reused.  Moving each fd high
 * (base/fdreg.h) narrows that to a few system calls per file, but not to
 * nothing.
 *
 * So such work runs on one lazily started thread that unshared its
 * descriptor table (close_range(CLOSE_RANGE_UNSHARE)): what it opens never
 * appears in the application's table, and the application's descriptors
 * are not in its table (it holds no reference that would keep a socket the
 * application closed alive).  It shares the memory, so a job is a plain
 * function call made over there; one job at a time.
 *
 * A job must not touch the application's descriptors, take locks, or
 * call back into the engine.  Where the thread cannot be had (no
 * CLOSE_RANGE_UNSHARE, no thread, a process confined by seccomp) the job
 * runs in the caller's thread, as before. */
#ifndef FS_BASE_ASIDE_H
#define FS_BASE_ASIDE_H

#include <stdbool.h>

/* Run job(arg) aside and return its result (job's own convention).  The
 * caller waits; errno is kept. */
int fs_aside_run(int (*job)(void *arg), void *arg);

/* Was the last fs_aside_run of this process run aside (for tests)? */
bool fs_aside_active(void);

/* Is this thread the one jobs run on aside?  (A job that may run either
 * way moves its descriptors high only where it runs in the application's
 * table.) */
bool fs_aside_here(void);

/* The forked child: the thread is not there; the next job starts one. */
void fs_aside_atfork_child(void);

/* No thread is started from now on (the process is about to confine itself
 * with seccomp, which may forbid clone and close_range). */
void fs_aside_forbid(void);

#endif
