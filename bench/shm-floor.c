/* Raw shared-memory ping-pong (see shm-floor.h).
 *
 * Layout of the shared mapping: one cache line per direction holding the
 * sequence number the writer publishes (release) and a "sleeping" flag the
 * reader raises before it sleeps on the sequence word with FUTEX_WAIT; then
 * one message buffer per direction.  Wake-up protocol (futex mode): the
 * writer stores seq then loads the flag, the sleeper stores the flag then
 * re-loads seq, all seq_cst, so at least one of them sees the other's store
 * and a wake-up is never lost (FUTEX_WAIT also re-checks the value). */
#include "bench/shm-floor.h"

#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct chan {
  _Alignas(64) _Atomic uint32_t seq;
  _Atomic uint32_t sleeping;
};

struct shm_pp {
  struct chan ping, pong; /* ping: parent -> child; pong: child -> parent */
  _Alignas(64) unsigned char ping_buf[SHM_FLOOR_MAX_SIZE];
  _Alignas(64) unsigned char pong_buf[SHM_FLOOR_MAX_SIZE];
};

#define STALL_NS (10ull * 1000000000ull) /* no progress for this long: peer is gone */
#define YIELD_NS 50000u /* spinning longer than this: the peer is probably not running */
#define SEQ_STOP UINT32_MAX /* published on ping: the child exits */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield" ::: "memory");
#endif
}

static long futex(_Atomic uint32_t *uaddr, int op, uint32_t val, const struct timespec *ts) {
  return syscall(SYS_futex, (uint32_t *)uaddr, op, val, ts, NULL, 0);
}

static void publish(struct chan *c, uint32_t v, int use_futex) {
  atomic_store_explicit(&c->seq, v, memory_order_seq_cst);
  if (use_futex && atomic_load_explicit(&c->sleeping, memory_order_seq_cst))
    futex(&c->seq, FUTEX_WAKE, 1, NULL);
}

/* True when the peer is gone: our child has exited (not reaped here), or our
 * parent has (we were re-parented). */
static int peer_gone(pid_t peer, pid_t parent) {
  if (peer == 0) return getppid() != parent;
  siginfo_t si;
  memset(&si, 0, sizeof si);
  return waitid(P_PID, (id_t)peer, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid != 0;
}

/* Wait until c->seq == want.  Returns 0, 1 when SEQ_STOP was published, or -1
 * when nothing moved for STALL_NS or the peer is gone (peer > 0: our child;
 * 0: our parent).  A pure spin yields the CPU once it has waited YIELD_NS, so
 * that an overcommitted machine (fewer free CPUs than spinners) still
 * finishes: the peer cannot answer while we hold its CPU. */
static int wait_for(struct chan *c, uint32_t want, const struct shm_floor_opts *o,
                    pid_t peer, pid_t parent) {
  uint64_t spin_ns = (uint64_t)o->spin_us * 1000u, start = 0, checked = 0;
  for (unsigned k = 0;; k++) {
    uint32_t v = atomic_load_explicit(&c->seq, memory_order_acquire);
    if (v == want) return 0;
    if (v == SEQ_STOP) return 1;
    cpu_relax();
    if ((k & 255) == 0) {
      uint64_t now = bench_now_ns();
      if (!start) start = checked = now;
      if (o->futex && now - start >= spin_ns) break;
      if (!o->futex && now - start >= YIELD_NS) sched_yield();
      if (now - checked > 1000000000u) { /* a slow peer is odd; a dead one is fatal */
        checked = now;
        if (peer_gone(peer, parent) || now - start > STALL_NS) return -1;
      }
    }
  }
  for (int naps = 0;; naps++) {
    atomic_store_explicit(&c->sleeping, 1, memory_order_seq_cst);
    uint32_t cur = atomic_load_explicit(&c->seq, memory_order_seq_cst);
    if (cur == want || cur == SEQ_STOP) break;
    struct timespec ts = {1, 0};
    futex(&c->seq, FUTEX_WAIT, cur, &ts);
    if (naps > 0 && peer_gone(peer, parent)) {
      atomic_store_explicit(&c->sleeping, 0, memory_order_relaxed);
      return -1;
    }
    if (naps > 10) { /* STALL_NS */
      atomic_store_explicit(&c->sleeping, 0, memory_order_relaxed);
      return -1;
    }
  }
  atomic_store_explicit(&c->sleeping, 0, memory_order_relaxed);
  return atomic_load_explicit(&c->seq, memory_order_acquire) == SEQ_STOP;
}

static void pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

static void child_loop(struct shm_pp *s, const struct shm_floor_opts *o, pid_t parent) {
  static unsigned char msg[SHM_FLOOR_MAX_SIZE];
  uint64_t total = o->warmup + o->iters;
  pin(o->cpu_b);
  for (uint64_t i = 1; i <= total; i++) {
    int w = wait_for(&s->ping, (uint32_t)i, o, 0, parent);
    if (w < 0) _exit(1);
    if (w > 0) break;
    memcpy(msg, s->ping_buf, o->size);   /* the receiver consumes the message ... */
    memcpy(s->pong_buf, msg, o->size);   /* ... and sends it back */
    publish(&s->pong, (uint32_t)i, o->futex);
  }
  _exit(0);
}

int shm_floor_run(const struct shm_floor_opts *o, struct lat_stats *st,
                  char *err, size_t errlen) {
  memset(st, 0, sizeof *st);
  if (o->size < 1 || o->size > SHM_FLOOR_MAX_SIZE || o->iters < 1) {
    snprintf(err, errlen, "shm floor: bad size or iteration count");
    return -1;
  }
  uint64_t *rtt = malloc(o->iters * sizeof *rtt);
  unsigned char *msg = malloc(o->size);
  struct shm_pp *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (!rtt || !msg || s == MAP_FAILED) {
    snprintf(err, errlen, "shm floor: out of memory");
    free(rtt);
    free(msg);
    if (s != MAP_FAILED) munmap(s, sizeof *s);
    return -1;
  }
  memset(msg, 0x5a, o->size);
  pid_t parent = getpid();
  fflush(NULL);
  pid_t child = fork();
  if (child < 0) {
    snprintf(err, errlen, "shm floor: fork: %s", strerror(errno));
    free(rtt);
    free(msg);
    munmap(s, sizeof *s);
    return -1;
  }
  if (child == 0) child_loop(s, o, parent);

  int rc = 0;
  cpu_set_t saved;
  int restore = o->cpu_a >= 0 && sched_getaffinity(0, sizeof saved, &saved) == 0;
  pin(o->cpu_a);
  /* The child runs until round trip warmup + iters or SEQ_STOP, whichever
   * first; with max_ns, warm-up and measurement are each bounded in time. */
  uint64_t n = 0, t_begin = bench_now_ns(), t_measure = 0;
  for (uint64_t i = 1;; i++) {
    uint64_t t0 = bench_now_ns();
    if (!t_measure && (i > o->warmup || (o->max_ns && t0 - t_begin > o->max_ns)))
      t_measure = t0;
    if (n == o->iters || (o->max_ns && t_measure && t0 - t_measure > o->max_ns && n > 0)) {
      if (i <= o->warmup + o->iters) publish(&s->ping, SEQ_STOP, o->futex);
      break;
    }
    memcpy(msg, &i, o->size < sizeof i ? o->size : sizeof i);
    memcpy(s->ping_buf, msg, o->size);
    publish(&s->ping, (uint32_t)i, o->futex);
    if (wait_for(&s->pong, (uint32_t)i, o, child, parent) != 0) {
      snprintf(err, errlen, "shm floor: peer stalled or died at round trip %llu",
               (unsigned long long)i);
      rc = -1;
      break;
    }
    memcpy(msg, s->pong_buf, o->size);
    uint64_t t1 = bench_now_ns();
    if (memcmp(msg, &i, o->size < sizeof i ? o->size : sizeof i) != 0) {
      snprintf(err, errlen, "shm floor: echoed message corrupted");
      rc = -1;
      break;
    }
    if (t_measure) rtt[n++] = t1 - t0;
  }
  if (rc < 0) kill(child, SIGKILL);
  int status;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {}
  if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    snprintf(err, errlen, "shm floor: child failed");
    rc = -1;
  }
  if (restore) sched_setaffinity(0, sizeof saved, &saved); /* for what runs next here */
  if (rc == 0) bench_lat_stats(rtt, n, st);
  free(rtt);
  free(msg);
  munmap(s, sizeof *s);
  return rc;
}

/* ---- the stream floor -------------------------------------------------- */

/* Producer and consumer indexes (bytes, free-running) on their own cache
 * lines, then the ring.  The consumer publishes `stop` when it is done. */
struct shm_st {
  _Alignas(64) _Atomic uint64_t tail; /* written by the child (producer) */
  _Alignas(64) _Atomic uint64_t head; /* written by the caller (consumer) */
  _Alignas(64) _Atomic uint32_t stop;
  _Alignas(64) unsigned char ring[];
};

size_t shm_floor_stream_ring(size_t size) {
  size_t r = 256u << 10;
  while (r < 32 * size && r < (4u << 20)) r <<= 1;
  return r;
}

/* Copy n bytes at ring position pos (wrapping) from or to buf. */
static void ring_copy(struct shm_st *s, size_t ring, uint64_t pos, unsigned char *buf, size_t n, int out) {
  size_t off = (size_t)(pos & (ring - 1)), first = ring - off < n ? ring - off : n;
  if (out) {
    memcpy(buf, s->ring + off, first);
    memcpy(buf + first, s->ring, n - first);
  } else {
    memcpy(s->ring + off, buf, first);
    memcpy(s->ring, buf + first, n - first);
  }
}

/* Spin until cond: yields after YIELD_NS (an overcommitted machine), gives
 * up after STALL_NS without progress or once the peer is gone.  0, or -1. */
#define SPIN_UNTIL(cond, peer, parent)                                            \
  do {                                                                            \
    uint64_t t0_ = 0;                                                             \
    for (unsigned k_ = 0; !(cond); k_++) {                                        \
      cpu_relax();                                                                \
      if ((k_ & 255) == 255) {                                                    \
        uint64_t now_ = bench_now_ns();                                           \
        if (!t0_) t0_ = now_;                                                     \
        if (now_ - t0_ >= YIELD_NS) sched_yield();                                \
        if (now_ - t0_ > STALL_NS || (now_ - t0_ > 1000000000u && peer_gone(peer, parent))) \
          return -1;                                                              \
      }                                                                           \
    }                                                                             \
  } while (0)

/* A message larger than a quarter of the ring moves in quarters, so that
 * the two copies overlap (one message filling the ring would make them
 * take turns: no shm socket need do that). */
static size_t stream_unit(size_t size, size_t ring) {
  return size <= ring / 4 ? size : ring / 4;
}

static int stream_produce(struct shm_st *s, size_t ring, size_t size, pid_t parent) {
  unsigned char *src = malloc(size);
  if (!src) return -1;
  memset(src, 0x5a, size);
  size_t unit = stream_unit(size, ring);
  uint64_t tail = 0;
  for (;;) {
    SPIN_UNTIL(tail + unit - atomic_load_explicit(&s->head, memory_order_acquire) <= ring ||
                   atomic_load_explicit(&s->stop, memory_order_relaxed),
               0, parent);
    if (atomic_load_explicit(&s->stop, memory_order_relaxed)) break;
    ring_copy(s, ring, tail, src + tail % size, unit, 0);
    tail += unit;
    atomic_store_explicit(&s->tail, tail, memory_order_release);
  }
  free(src);
  return 0;
}

static int stream_consume(struct shm_st *s, size_t ring, size_t size, double secs, pid_t child,
                          unsigned char *dst, double *gbps) {
  uint64_t head = 0, t_begin = bench_now_ns(), t_measure = 0, counted = 0;
  uint64_t warm = 200000000u, span = (uint64_t)(secs * 1e9);
  size_t unit = stream_unit(size, ring);
  for (unsigned i = 0;; i++) {
    if ((i & 63) == 0) {
      uint64_t now = bench_now_ns();
      if (!t_measure && now - t_begin >= warm) {
        t_measure = now;
        counted = 0;
      } else if (t_measure && now - t_measure >= span) {
        *gbps = (double)counted / (double)(now - t_measure);
        break;
      }
    }
    SPIN_UNTIL(atomic_load_explicit(&s->tail, memory_order_acquire) - head >= unit, child, 0);
    ring_copy(s, ring, head, dst + head % size, unit, 1);
    head += unit;
    atomic_store_explicit(&s->head, head, memory_order_release);
    counted += unit;
  }
  return 0;
}

int shm_floor_stream(size_t size, size_t ring, double secs, int cpu_a, int cpu_b, double *gbps,
                     char *err, size_t errlen) {
  *gbps = 0;
  if (size < 1 || ring < size || (ring & (ring - 1)) || secs <= 0) {
    snprintf(err, errlen, "shm stream floor: bad size or ring");
    return -1;
  }
  size_t len = sizeof(struct shm_st) + ring;
  unsigned char *dst = malloc(size);
  struct shm_st *s = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (!dst || s == MAP_FAILED) {
    snprintf(err, errlen, "shm stream floor: out of memory");
    free(dst);
    if (s != MAP_FAILED) munmap(s, len);
    return -1;
  }
  pid_t parent = getpid();
  fflush(NULL);
  pid_t child = fork();
  if (child < 0) {
    snprintf(err, errlen, "shm stream floor: fork: %s", strerror(errno));
    free(dst);
    munmap(s, len);
    return -1;
  }
  if (child == 0) {
    pin(cpu_b);
    _exit(stream_produce(s, ring, size, parent) == 0 ? 0 : 1);
  }
  cpu_set_t saved;
  int restore = cpu_a >= 0 && sched_getaffinity(0, sizeof saved, &saved) == 0;
  pin(cpu_a);
  int rc = stream_consume(s, ring, size, secs, child, dst, gbps);
  atomic_store_explicit(&s->stop, 1, memory_order_relaxed);
  if (rc < 0) {
    snprintf(err, errlen, "shm stream floor: the producer stalled or died");
    kill(child, SIGKILL);
  }
  int status;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {}
  if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    snprintf(err, errlen, "shm stream floor: child failed");
    rc = -1;
  }
  if (restore) sched_setaffinity(0, sizeof saved, &saved);
  free(dst);
  munmap(s, len);
  return rc;
}
