/* Waiting on a connection: spin first (adaptively), then sleep on its
 * wake eventfd, its TCP socket and its fabric's own event fd at once.
 * send/recv wait here; epoll's spin uses the same adaptive rule.
 *
 * The clock is read only every few hundred looks: where the clock source
 * is emulated (hpet in a VM) a read is a system call of microseconds. */
#ifndef FS_ENGINE_WAIT_H
#define FS_ENGINE_WAIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "engine/conn.h"
#include "fabric/chan.h"

#define FS_WAIT_SPIN_MAX_US 200
#define FS_WAIT_SPIN_MIN_US 2
#define FS_WAIT_BOUND_MS 20  /* no sleep lasts longer before the caller looks again */

/* What a waiting receiver or sender waits for (arg: size_t *need, the room
 * a sender needs, the bytes a receiver needs: NULL for any); the spins poll
 * them, a sleeper looks once more. */
bool fs_wait_cond_rx(struct fs_chan *ch, void *arg);
bool fs_wait_cond_tx(struct fs_chan *ch, void *arg);

/* Spin up to the connection's budget for cond(); *spun_ns: for how long
 * (estimated). */
/* Is a spin worth it now?  Not while more threads are runnable than the
 * process may use CPUs: the peer we wait for then needs the CPU we would
 * spin on (8 database backends and their client on 2 cores ran 25% slower
 * than kernel TCP spinning).  Not while this thread waits for its CPU (see
 * fs_wait_cpu_crowded).  From /proc/loadavg and the thread's schedstat,
 * read at most every 4 ms; yes when they cannot be read. */
bool fs_wait_spin_worth(void);

/* Does this thread's spin crowd its CPU?  A spin that waits on the run
 * queue for a quarter or more of the time it wants a CPU takes that CPU
 * from a thread runnable beside it, often the very one it waits for:
 * nginx's two workers and wrk's two threads on 2 vCPUs ran 10-30% more
 * requests a second with no spin at all, and the machine's running count
 * (fs_wait_spin_worth) missed it, reading 3 or 4 of those 4 threads.
 * Such a thread keeps still (no spin) for a while, 32 ms doubling up to
 * 512 ms while each try crowds again, then tries one window of spinning:
 * judged window by window, a thread that had stopped found its CPU free in
 * the next 4 ms, spun, and was crowded again, every other window.  Eight
 * calm windows in a row forget the past.  Judged from
 * /proc/thread-self/schedstat at the caller's 4 ms looks (now: the coarse
 * clock, ns); never crowded where that cannot be read. */
bool fs_wait_cpu_crowded(uint64_t now);

struct fs_wait_crowd {
  uint64_t run, wait;    /* the window's start: ns run, ns waited for a CPU */
  uint64_t quiet_until;  /* no spin before (ns) */
  uint32_t backoff_ms;   /* the next stillness; 0: none yet */
  uint8_t calm;          /* calm windows in a row */
  bool based;            /* run and wait hold a window's start */
};

/* Less than 1 ms of wanting a CPU tells nothing (one wake-up's wait is no
 * crowd): the window goes on. */
#define FS_WAIT_CROWD_MIN_NS 1000000u

/* The step behind fs_wait_cpu_crowded: the thread's totals now (run and
 * wait, ns).  True: crowded, still until t->quiet_until. */
static inline bool fs_wait_crowd_step(struct fs_wait_crowd *t, uint64_t now, uint64_t run, uint64_t wait)
{
  if (!t->based || run < t->run || wait < t->wait) { /* (a fork's child counts anew) */
    t->run = run;
    t->wait = wait;
    t->based = true;
    return false;
  }
  uint64_t dr = run - t->run, dw = wait - t->wait;
  if (dr + dw < FS_WAIT_CROWD_MIN_NS)
    return false;
  t->run = run;
  t->wait = wait;
  if (dw * 4 < dr + dw) {
    if (++t->calm >= 8)
      t->backoff_ms = 0;
    return false;
  }
  t->calm = 0;
  t->backoff_ms = t->backoff_ms == 0 ? 32u : t->backoff_ms >= 512u ? 512u : 2 * t->backoff_ms;
  t->quiet_until = now + (uint64_t)t->backoff_ms * 1000000u;
  t->based = false; /* the try after it starts its own window */
  return true;
}

/* The spin a waiter on connections of policy p may make before sleeping,
 * in us: the policy's fixed bound (0: none), the learnt bound `adaptive`
 * where it asks for none, 1000 for busy polling (*busy set: even in a
 * crowd).  An epoll set spins for the largest its idle entries allow. */
static inline uint32_t fs_wait_spin_bound(const struct fs_policy_action *p, uint32_t adaptive, bool *busy)
{
  if (p->busy_poll) {
    *busy = true;
    return 1000u;
  }
  return p->spin_us < 0 ? adaptive : (uint32_t)p->spin_us;
}

bool fs_wait_spin(struct fs_conn *c, bool (*cond)(struct fs_chan *, void *), struct fs_chan *ch, void *arg,
                  uint64_t *spun_ns);

/* The caller (direction tx) drained c's wake fd: if the other direction
 * sleeps and its wait is over, wake it again. */
void fs_wait_pass_wake(struct fs_conn *c, struct fs_chan *ch, bool tx);

/* Sleep until the wake fd or the TCP socket says something (need: the room
 * a sender waits for).  Returns 0, -EAGAIN on SO_*TIMEO expiry, -EINTR.
 * *budget_ms: what is left of SO_*TIMEO (-1: none). */
int fs_wait_sleep(struct fs_conn *c, int fd, bool tx, size_t need, int *budget_ms);

/* The adaptive spin rule: a wait that ended after w_us would have been
 * caught by spinning w_us, so the next spin is 2 w_us (bounded); a longer
 * wait (an idle peer) halves the budget.  Two ends that both fell asleep
 * thus find their way back to spinning: each sees the other's wake-up
 * latency and spins past it.  Returns the new budget. */
static inline uint32_t fs_wait_adapt_us(uint32_t cur, uint64_t w_us)
{
  if (w_us <= FS_WAIT_SPIN_MAX_US)
    return (uint32_t)(2 * w_us + FS_WAIT_SPIN_MIN_US > FS_WAIT_SPIN_MAX_US ? FS_WAIT_SPIN_MAX_US
                                                                            : 2 * w_us + FS_WAIT_SPIN_MIN_US);
  return cur / 2 < FS_WAIT_SPIN_MIN_US ? FS_WAIT_SPIN_MIN_US : cur / 2;
}

/* A receive waited w_us: the connection's spin budget learns (unless the
 * policy fixed it). */
static inline void fs_wait_adapt(struct fs_conn *c, uint64_t w_us)
{
  if (!c->policy.busy_poll && c->policy.spin_us < 0)
    c->spin_us = fs_wait_adapt_us(c->spin_us, w_us);
}

/* SO_RCVTIMEO / SO_SNDTIMEO of fd in ms, -1 if none. */
int fs_wait_timeo(int fd, int opt);

/* The same for connection c's fd, a sender's (tx) or a receiver's: from
 * c->timeo where this process knows it, else the kernel's.  A blocking
 * call asked the kernel at each wait: a system call per round trip of a
 * ping-pong that sleeps (sockperf's getsockopt, 0.8 per message).  Known
 * from a socket() made here (none) and an accept() of a listener known
 * (the kernel copies the listener's), then kept by setsockopt through us;
 * not known where another process may set it unseen (inherited across
 * exec, received, forked or passed on). */
static inline int fs_wait_timeo_of(struct fs_conn *c, int fd, bool tx)
{
  int32_t ms = __atomic_load_n(&c->timeo[!tx], __ATOMIC_RELAXED);
  return ms ? ms : fs_wait_timeo(fd, tx ? SO_SNDTIMEO : SO_RCVTIMEO);
}

/* c's timeouts are no longer this process's alone to know (a fork, an fd
 * passed on). */
static inline void fs_wait_timeo_forget(struct fs_conn *c)
{
  __atomic_store_n(&c->timeo[0], 0, __ATOMIC_RELAXED);
  __atomic_store_n(&c->timeo[1], 0, __ATOMIC_RELAXED);
}

#endif
