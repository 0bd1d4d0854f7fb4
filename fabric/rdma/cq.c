/* The process's completion channels (fabric/rdma/cq.h). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>

#include "fabric/rdma/verbs.h"

#include "base/fdreg.h"
#include "base/log.h"
#include "fabric/fabric.h"
#include "fabric/rdma/cq.h"
#include "policy/policy.h"
#include "base/real.h"

/* Channels with a completion channel of their own now. */
static uint32_t fs_rdma_nown;

static bool fs_rdma_cc_own_take(void)
{
  uint32_t n = __atomic_load_n(&fs_rdma_nown, __ATOMIC_RELAXED), most = fs_policy_rdma_own();
  while (n < most)
    if (__atomic_compare_exchange_n(&fs_rdma_nown, &n, n + 1, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
      return true;
  return false;
}

static void fs_rdma_cc_destroy(struct ibv_comp_channel *cc);

/* A completion channel for the library (agent thread), non-blocking. */
static struct ibv_comp_channel *fs_rdma_cc_make(struct ibv_context *ctx)
{
  fs_fdreg_make_begin();
  struct ibv_comp_channel *cc = FS_VERBS(ibv_create_comp_channel)(ctx);
  /* Out of the application's low numbers (this is the agent thread), before
   * a CQ names the channel to the kernel: libibverbs only ever uses the
   * number it finds in the (public) struct. */
  if (cc)
    cc->fd = fs_fdreg_move_high(cc->fd);
  fs_fdreg_make_end();
  if (!cc)
    return NULL;
  int fl = FS_REAL(fcntl)(cc->fd, F_GETFL, 0);
  if (fl < 0 || FS_REAL(fcntl)(cc->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
    int err = errno;
    fs_rdma_cc_destroy(cc);
    errno = err;
    return NULL;
  }
  return cc;
}

/* A completion channel of the library's, destroyed. */
static void fs_rdma_cc_destroy(struct ibv_comp_channel *cc)
{
  /* libibverbs closes it through our close(): ours no longer, and not to
   * wait for another thread's window (base/fdreg.h) */
  fs_fdreg_make_begin();
  fs_fdreg_set(cc->fd, false);
  FS_VERBS(ibv_destroy_comp_channel)(cc);
  fs_fdreg_make_end();
}

struct ibv_comp_channel *fs_rdma_cc_own(struct ibv_context *ctx)
{
  if (!fs_rdma_cc_own_take())
    return NULL;
  struct ibv_comp_channel *cc = fs_rdma_cc_make(ctx);
  if (!cc)
    __atomic_fetch_sub(&fs_rdma_nown, 1, __ATOMIC_RELAXED);
  return cc;
}

void fs_rdma_cc_own_free(struct ibv_comp_channel *cc)
{
  fs_rdma_cc_destroy(cc);
  __atomic_fetch_sub(&fs_rdma_nown, 1, __ATOMIC_RELAXED);
}

/* One shared per device context this process has used (rdma_cm opens each
 * device once, so a context is a device).  Agent lock held for every
 * change. */
static struct {
  struct ibv_context *ctx;
  struct ibv_comp_channel *cc;
} fs_rdma_ccs[8];
static void (*fs_rdma_cc_fn)(void *cq_context);

/* The agent: take every event queued now and hand each CQ's context to
 * fs_rdma_cc_fn.  The context (a channel) is alive: channels are destroyed
 * only with the agent lock held, which this runs under, and destroying a
 * CQ removes its events nobody took yet (the kernel's, not ours to drain);
 * ibv_destroy_cq would wait for an event taken and not acknowledged, so
 * each is acknowledged before the lock is let go. */
static bool fs_rdma_cc_ready(void *arg)
{
  struct ibv_comp_channel *cc = arg;
  struct ibv_cq *cq;
  void *ctx;
  int saved = errno;
  for (int n = 0; n < 256 && FS_VERBS(ibv_get_cq_event)(cc, &cq, &ctx) == 0; n++) {
    fs_rdma_cc_fn(ctx);
    FS_VERBS(ibv_ack_cq_events)(cq, 1);
  }
  errno = saved;
  return false;
}

struct ibv_comp_channel *fs_rdma_cc_shared(struct ibv_context *ctx, void (*fn)(void *cq_context))
{
  size_t i = 0;
  for (; i < sizeof fs_rdma_ccs / sizeof fs_rdma_ccs[0] && fs_rdma_ccs[i].ctx; i++)
    if (fs_rdma_ccs[i].ctx == ctx)
      return fs_rdma_ccs[i].cc;
  if (i == sizeof fs_rdma_ccs / sizeof fs_rdma_ccs[0]) {
    errno = ENOSPC;
    return NULL;
  }
  fs_rdma_cc_fn = fn;
  struct ibv_comp_channel *cc = fs_rdma_cc_make(ctx);
  if (!cc)
    return NULL;
  int rc = fs_host->watch(cc->fd, fs_rdma_cc_ready, cc);
  if (rc < 0) {
    fs_rdma_cc_destroy(cc);
    errno = -rc;
    return NULL;
  }
  fs_log(FS_LOG_DEBUG, "rdma: completion channel fd %d shared on device %s", cc->fd, ctx->device->name);
  fs_rdma_ccs[i].ctx = ctx;
  fs_rdma_ccs[i].cc = cc;
  return cc;
}
