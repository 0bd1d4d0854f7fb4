/* Registered ring memory of the rdma fabric (fabric/rdma/mr.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fabric/rdma/mr.h"
#include "base/fdreg.h"
#include "base/log.h"
#include "base/proc.h"

#define FS_RDMA_POOL 32      /* ring regions kept for reuse */
#define FS_RDMA_POOL_FULL 4  /* ... of which widened (their whole region stays registered) */

static pthread_mutex_t fs_rdma_mlock = PTHREAD_MUTEX_INITIALIZER;
static struct { struct ibv_context *ctx; struct ibv_pd *pd; } fs_rdma_pds[8];
static struct fs_rdma_region fs_rdma_pool[FS_RDMA_POOL];
static int fs_rdma_npool;

struct ibv_pd *fs_rdma_mr_pd(struct ibv_context *ctx)
{
  struct ibv_pd *pd = NULL;
  pthread_mutex_lock(&fs_rdma_mlock);
  for (size_t i = 0; i < sizeof fs_rdma_pds / sizeof fs_rdma_pds[0]; i++) {
    if (fs_rdma_pds[i].ctx == ctx) {
      pd = fs_rdma_pds[i].pd;
      break;
    }
    if (!fs_rdma_pds[i].ctx) {
      pd = FS_VERBS(ibv_alloc_pd)(ctx);
      if (pd) {
        fs_fdreg_set(ctx->cmd_fd, true); /* the device's, for its lifetime */
        fs_fdreg_set(ctx->async_fd, true);
        fs_rdma_pds[i].ctx = ctx;
        fs_rdma_pds[i].pd = pd;
      }
      break;
    }
  }
  pthread_mutex_unlock(&fs_rdma_mlock);
  return pd;
}

/* A registration refused for want of locked memory (or of the right to
 * lock any). */
static bool fs_rdma_short(int rc)
{
  return rc == -ENOMEM || rc == -EAGAIN || rc == -EPERM;
}

/* A registration refused for want of locked memory, explained once per
 * kind (what: 0 a connection's first pages: it stays on TCP, reason
 * resources; 1 a widening: the connection keeps its one-page rings, and
 * goes back to TCP where a sender would wait: engine/sockio.c) with the
 * limit to raise and what it holds. */
static void fs_rdma_mr_hint(int what, size_t len, int rc)
{
  static int told[2];
  if (!fs_rdma_short(rc) || __atomic_exchange_n(&told[what], 1, __ATOMIC_RELAXED))
    return;
  struct rlimit rl = { RLIM_INFINITY, RLIM_INFINITY };
  char lim[96] = "unlimited";
  (void)getrlimit(RLIMIT_MEMLOCK, &rl);
  if (rl.rlim_cur != RLIM_INFINITY)
    snprintf(lim, sizeof lim, "%llu KiB (about %llu %s)", (unsigned long long)rl.rlim_cur >> 10,
             (unsigned long long)(rl.rlim_cur / len), what ? "busy connections' rings" : "rdma connections");
  if (what == 0)
    fs_log(FS_LOG_WARN,
           "rdma: registering a connection's first ring pages (%zu KiB) failed (%s); RLIMIT_MEMLOCK is %s: "
           "rdma connections beyond it stay on tcp (reason resources). Raise it (ulimit -l, LimitMEMLOCK= in "
           "a systemd unit, memlock in limits.conf)",
           len >> 10, strerror(-rc), lim);
  else
    fs_log(FS_LOG_WARN,
           "rdma: widening a connection's rings to %zu KiB failed (%s); RLIMIT_MEMLOCK is %s: busy rdma "
           "connections beyond it keep one-page rings, and go back to tcp (reason resources) where a "
           "sender would wait for room. Raise it (ulimit -l, LimitMEMLOCK= in a "
           "systemd unit, memlock in limits.conf) or make rings smaller (FABSOCK_SHM_RING)",
           len >> 10, strerror(-rc), lim);
}

static struct ibv_mr *fs_rdma_reg(struct ibv_pd *pd, void *p, size_t len, int *rc)
{
  errno = 0;
  struct ibv_mr *mr = FS_VERBS(ibv_reg_mr)(pd, p, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  *rc = mr ? 0 : errno ? -errno : -ENOMEM;
  return mr;
}

/* Past the memlock limit: the pool's idle regions give their whole-region
 * registrations back (all of them, or their first pages too when `all`);
 * true if that freed any. */
static bool fs_rdma_pool_shed(bool all)
{
  struct ibv_mr *drop[2 * FS_RDMA_POOL + FS_RDMA_POOL];
  uint8_t *bufs[FS_RDMA_POOL];
  int n = 0, nb = 0;
  pthread_mutex_lock(&fs_rdma_mlock);
  for (int i = fs_rdma_npool - 1; i >= 0; i--) {
    struct fs_rdma_region *g = &fs_rdma_pool[i];
    if (g->full)
      drop[n++] = g->full;
    g->full = NULL;
    if (all) {
      drop[n++] = g->rx;
      drop[n++] = g->tx;
      bufs[nb++] = g->buf;
      fs_rdma_pool[i] = fs_rdma_pool[--fs_rdma_npool];
    }
  }
  pthread_mutex_unlock(&fs_rdma_mlock);
  for (int i = 0; i < n; i++)
    FS_VERBS(ibv_dereg_mr)(drop[i]);
  for (int i = 0; i < nb; i++)
    free(bufs[i]);
  return n > 0;
}

/* Is registered memory unbounded for this process (no RLIMIT_MEMLOCK, or
 * CAP_IPC_LOCK, as root has outside most containers)?  Asked once. */
bool fs_rdma_mr_unlimited(void)
{
  static int v; /* 0 unknown, 1 no, 2 yes */
  int k = __atomic_load_n(&v, __ATOMIC_RELAXED);
  if (!k) {
    int saved = errno;
    struct rlimit rl;
    struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct d[2] = { { 0, 0, 0 }, { 0, 0, 0 } };
    bool un = (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur == RLIM_INFINITY) ||
              (syscall(SYS_capget, &h, d) == 0 && (d[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32))));
    errno = saved;
    k = un ? 2 : 1;
    __atomic_store_n(&v, k, __ATOMIC_RELAXED);
  }
  return k == 2;
}

int fs_rdma_mr_get(struct ibv_pd *pd, uint32_t size, struct fs_rdma_region *g)
{
  pthread_mutex_lock(&fs_rdma_mlock);
  int pick = -1;
  for (int i = fs_rdma_npool - 1; i >= 0; i--)
    if (fs_rdma_pool[i].pd == pd && fs_rdma_pool[i].size == size && (pick < 0 || fs_rdma_pool[i].full))
      pick = i; /* a widened one if there is */
  if (pick >= 0) {
    *g = fs_rdma_pool[pick];
    fs_rdma_pool[pick] = fs_rdma_pool[--fs_rdma_npool];
    pthread_mutex_unlock(&fs_rdma_mlock);
    return 0;
  }
  pthread_mutex_unlock(&fs_rdma_mlock);
  long pg = sysconf(_SC_PAGESIZE);
  size_t len = 2 * (size_t)size;
  *g = (struct fs_rdma_region){ .pd = pd, .size = size, .narrow = pg > 0 && (size_t)pg < size ? (uint32_t)pg : size };
  if (fs_proc_as_room(len) < 0 || posix_memalign((void **)&g->buf, 4096, len) != 0)
    return -ENOMEM;
  int rc;
  for (int pass = 0; pass < 2; pass++) {
    if ((g->rx = fs_rdma_reg(pd, g->buf, g->narrow, &rc)) &&
        (g->tx = fs_rdma_reg(pd, g->buf + size, g->narrow, &rc)))
      return 0;
    if (g->rx)
      FS_VERBS(ibv_dereg_mr)(g->rx);
    g->rx = NULL;
    if (pass || !fs_rdma_short(rc) || !fs_rdma_pool_shed(true))
      break;
  }
  fs_rdma_mr_hint(0, 2 * (size_t)g->narrow, rc);
  free(g->buf);
  g->buf = NULL;
  return rc;
}

int fs_rdma_mr_widen(struct fs_rdma_region *g)
{
  if (g->full)
    return 0;
  int rc, saved = errno; /* an application thread's (its send) */
  for (int pass = 0; pass < 2; pass++) {
    if ((g->full = fs_rdma_reg(g->pd, g->buf, 2 * (size_t)g->size, &rc)))
      break;
    if (pass || !fs_rdma_short(rc) || !fs_rdma_pool_shed(false))
      break;
  }
  if (!g->full)
    fs_rdma_mr_hint(1, 2 * (size_t)g->size, rc);
  errno = saved;
  return g->full ? 0 : rc;
}

void fs_rdma_mr_put(struct fs_rdma_region *g)
{
  if (!g->rx)
    return;
  struct ibv_mr *full = NULL;
  pthread_mutex_lock(&fs_rdma_mlock);
  if (fs_rdma_npool < FS_RDMA_POOL) {
    int nfull = 0;
    for (int i = 0; i < fs_rdma_npool; i++)
      nfull += fs_rdma_pool[i].full != NULL;
    if (g->full && nfull >= FS_RDMA_POOL_FULL && !fs_rdma_mr_unlimited()) {
      full = g->full; /* idle pinned memory the next connections may need */
      g->full = NULL;
    }
    /* A later connection starts from zeroed positions, never reads stale
     * bytes as records (every position it believes was written anew), so
     * the memory needs no clearing. */
    fs_rdma_pool[fs_rdma_npool++] = *g;
    pthread_mutex_unlock(&fs_rdma_mlock);
    if (full)
      FS_VERBS(ibv_dereg_mr)(full);
    return;
  }
  pthread_mutex_unlock(&fs_rdma_mlock);
  if (g->full)
    FS_VERBS(ibv_dereg_mr)(g->full);
  FS_VERBS(ibv_dereg_mr)(g->tx);
  FS_VERBS(ibv_dereg_mr)(g->rx);
  free(g->buf);
}
