/* Thread cancellation (pthread_cancel) and the library's own waits.
 *
 * recv, send and their kin are cancellation points: a thread cancelled in
 * one unwinds from it.  Cancelled asleep inside ours, it unwound with our
 * locks held (a recv's rxlock), and the next recv on that connection
 * waited for good.  So a thread about to sleep in the library (those
 * sleeps come in slices of at most FS_WAIT_BOUND_MS) holds cancellation
 * off until the preload boundary, where our locks and references are gone:
 * there the state is put back and a cancel asked meanwhile acts
 * (pthread_testcancel).  A cancel does not interrupt a sleep while
 * cancellation is off: our pthread_cancel notes it in the target's record,
 * and the sleeper looks at each slice's end and leaves its wait with
 * -EINTR.  A kernel call that may block under one of our locks (TCP before
 * the cutover, hooks) stays a cancellation point, and a cleanup handler
 * unlocks (fs_sockio_tcp_locked); one that cannot block (a non-blocking
 * socket) gets it only once the process has cancelled a thread (its
 * setjmp was a third of the instructions the change added to nginx's
 * connection per request).  Once the process has cancelled a thread, each
 * call on a tracked socket is a cancellation point at its start, as
 * glibc's are, before it takes any lock of ours (preload/io.c): a thread
 * cancelled in the application's own code used to act on it at the first
 * point inside ours.  Not covered: a cancel that arrives while the thread
 * runs (not sleeps) inside the library acts at its next cancellation point
 * there, our locks held. */
#ifndef FS_ENGINE_CANCEL_H
#define FS_ENGINE_CANCEL_H

#include <pthread.h>
#include <stdbool.h>

/* 0: cancellation as the application left it; else its state + 1, held
 * off by us until fs_cancel_release. */
extern __thread int fs_cancel_saved __attribute__((tls_model("initial-exec")));

/* Set for good by the process's first pthread_cancel (before it acts). */
extern bool fs_cancel_seen;

/* Hold cancellation off until fs_cancel_release (idempotent). */
void fs_cancel_hold(void);

/* A sleeper: was this thread asked to cancel (and may it be)?  Then its
 * wait ends with -EINTR and the boundary lets the cancel act. */
bool fs_cancel_asked(void);

void fs_cancel_release_slow(void);

/* At the boundary, nothing of ours held: put the state back, and let a
 * pending cancel act (this call may not return).  errno is untouched. */
static inline void fs_cancel_release(void)
{
  if (__builtin_expect(fs_cancel_saved != 0, 0))
    fs_cancel_release_slow();
}

/* pthread_cancel(t) succeeded: note it for t, should t sleep in the library. */
void fs_cancel_note(pthread_t t);

/* In a fork child: the lock anew, and only this thread's record (the
 * others' threads are not here; their records are left, not freed). */
void fs_cancel_fork_child(void);

#endif
