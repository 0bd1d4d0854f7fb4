/* Registered ring memory of the rdma fabric (fabric/rdma/mr.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "fabric/rdma/mr.h"
#include "base/fdreg.h"
#include "base/log.h"
#include "base/proc.h"

#define FS_RDMA_POOL 32      /* registered ring regions kept for reuse */

static pthread_mutex_t fs_rdma_mlock = PTHREAD_MUTEX_INITIALIZER;
static struct { struct ibv_context *ctx; struct ibv_pd *pd; } fs_rdma_pds[8];
static struct fs_rdma_region { struct ibv_pd *pd; struct ibv_mr *mr; uint8_t *buf; uint32_t size; } fs_rdma_pool[FS_RDMA_POOL];
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

/* A registration refused for want of locked memory: the connection stays on
 * TCP (resources), and the log says, once, which limit to raise and what it
 * holds.  Non-root processes get 8 MiB by default (Debian): at two 256 KiB
 * rings per connection, about 16 connections. */
static void fs_rdma_mr_hint(size_t len, int rc)
{
  static int told;
  if ((rc != -ENOMEM && rc != -EAGAIN && rc != -EPERM) || __atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
    return;
  struct rlimit rl = { RLIM_INFINITY, RLIM_INFINITY };
  char lim[96] = "unlimited";
  (void)getrlimit(RLIMIT_MEMLOCK, &rl);
  if (rl.rlim_cur != RLIM_INFINITY)
    snprintf(lim, sizeof lim, "%llu KiB (about %llu rdma connections)", (unsigned long long)rl.rlim_cur >> 10,
             (unsigned long long)(rl.rlim_cur / len));
  fs_log(FS_LOG_WARN,
         "rdma: registering %zu KiB of rings failed (%s); RLIMIT_MEMLOCK is %s: rdma connections "
         "beyond it stay on tcp (reason resources). Raise it (ulimit -l, LimitMEMLOCK= in a systemd "
         "unit, memlock in limits.conf) or make rings smaller (FABSOCK_SHM_RING)",
         len >> 10, strerror(-rc), lim);
}

/* A registered region of 2*size bytes: from the pool if one fits. */
int fs_rdma_mr_get(struct ibv_pd *pd, uint32_t size, struct ibv_mr **mr, uint8_t **buf)
{
  pthread_mutex_lock(&fs_rdma_mlock);
  for (int i = fs_rdma_npool - 1; i >= 0; i--)
    if (fs_rdma_pool[i].pd == pd && fs_rdma_pool[i].size == size) {
      *mr = fs_rdma_pool[i].mr;
      *buf = fs_rdma_pool[i].buf;
      fs_rdma_pool[i] = fs_rdma_pool[--fs_rdma_npool];
      pthread_mutex_unlock(&fs_rdma_mlock);
      return 0;
    }
  pthread_mutex_unlock(&fs_rdma_mlock);
  size_t len = 2 * (size_t)size;
  if (fs_proc_as_room(len) < 0 || posix_memalign((void **)buf, 4096, len) != 0)
    return -ENOMEM;
  *mr = FS_VERBS(ibv_reg_mr)(pd, *buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!*mr) {
    int rc = errno ? -errno : -ENOMEM;
    fs_rdma_mr_hint(len, rc);
    free(*buf);
    *buf = NULL;
    return rc;
  }
  return 0;
}

void fs_rdma_mr_put(struct ibv_pd *pd, uint32_t size, struct ibv_mr *mr, uint8_t *buf)
{
  if (!mr)
    return;
  pthread_mutex_lock(&fs_rdma_mlock);
  if (fs_rdma_npool < FS_RDMA_POOL) {
    /* A later connection starts from zeroed positions, never reads stale
     * bytes as records (every position it believes was written anew), so
     * the memory needs no clearing. */
    fs_rdma_pool[fs_rdma_npool++] = (struct fs_rdma_region){ pd, mr, buf, size };
    pthread_mutex_unlock(&fs_rdma_mlock);
    return;
  }
  pthread_mutex_unlock(&fs_rdma_mlock);
  FS_VERBS(ibv_dereg_mr)(mr);
  free(buf);
}
