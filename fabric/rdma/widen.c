/* The rdma channel's rings grow (fabric/rdma/rdma.h, "Memory"): our keys
 * in FLAGS immediates, the peer's taken in, the whole region registered
 * when the producer's window asks or the peer's key comes, and the window
 * opened once both ends have theirs. */
#include <stdbool.h>
#include <stdint.h>

#include "base/clock.h"
#include "base/log.h"
#include "fabric/rdma/mr.h"
#include "fabric/rdma/rdma.h"
#include "fabric/rdma/rdma_int.h"

/* One of our keys, in two FLAGS immediates (slock held): 0 or -errno. */
int fs_rdma_send_key(struct fs_rdma *r, bool full, uint32_t key)
{
  struct ibv_send_wr wr[2];
  struct ibv_sge sge[2];
  for (int i = 0; i < 2; i++) {
    fs_rdma_wr(&wr[i], &sge[i], r, 0, 0, 0);
    fs_rdma_imm(&wr[i], FS_RDMA_IMM_FLAGS, fs_rdma_key_val(full, i == 1, key));
  }
  int rc = fs_rdma_post(r, wr, 2, false);
  if (rc == 0 && full)
    r->keys_sent |= FS_RDMA_K_FULL;
  return rc;
}

/* Both whole-region keys there: the producer's window may open. */
void fs_rdma_lift(struct fs_rdma *r)
{
  if (r->g.full && (r->keys_sent & FS_RDMA_K_FULL) &&
      (__atomic_load_n(&r->keys_known, __ATOMIC_ACQUIRE) & FS_RDMA_K_FULL) &&
      __atomic_load_n(&r->ch.tx.win_lim, __ATOMIC_RELAXED)) {
    __atomic_store_n(&r->ch.tx.win_lim, 0, __ATOMIC_RELEASE);
    /* The whole ring at once, asked or not: a window left to double from
     * its page, 16 pages' worth at a time, left two echoing ends each
     * waiting in send for the other to read (t_rdma_fabsock).  A producer
     * widening meanwhile may store its doubled window over this; the ask
     * makes its next record open it all the same (fabric/ring.c). */
    __atomic_store_n(&r->ch.tx.win_ask, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&r->ch.tx.win, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&r->ch.cramped, 0, __ATOMIC_RELEASE); /* a late answer: the ring grows after all */
  }
}

void fs_rdma_widen(struct fs_rdma *r)
{
  if (r->full_failed || __atomic_load_n(&r->dead, __ATOMIC_ACQUIRE) || r->foreign)
    return;
  if (!r->g.full) {
    if (fs_rdma_mr_widen(&r->g) < 0) {
      r->full_failed = true;
      __atomic_store_n(&r->ch.cramped, 1, __ATOMIC_RELEASE);
      fs_log(FS_LOG_INFO, "rdma channel %p: its rings stay at one page (no memory to register): "
             "a sender that waits for room goes back to tcp", (void *)r);
      return;
    }
  }
  if (!(r->keys_sent & FS_RDMA_K_FULL) && (r->keys_sent & FS_RDMA_K_TX))
    (void)fs_rdma_send_key(r, true, r->g.full->rkey);
  /* else: the first post of the queue pair sends it */
  fs_rdma_lift(r);
}

void fs_rdma_ask(struct fs_rdma *r)
{
  __atomic_store_n(&r->ask_ns, fs_clock_ns() | 2, __ATOMIC_RELAXED); /* > 1: the wait runs */
  fs_rdma_widen(r);
}

/* Only the peer's process, looking at the connection, takes our key in and
 * answers with its own; one that does not (a server busy elsewhere, a peer
 * waiting on another descriptor) leaves our window at its page, where
 * TCP's buffers would take what we write meanwhile.  So a window still shut
 * FS_RDMA_ASK_MS after it asked makes the channel cramped: a sender that
 * would wait goes back to TCP (engine/sockio.c).  An answer before that
 * costs nothing; one after it opens the window all the same (fs_rdma_lift). */
void fs_rdma_ask_check(struct fs_rdma *r)
{
  uint64_t at = __atomic_load_n(&r->ask_ns, __ATOMIC_RELAXED);
  if (!__atomic_load_n(&r->ch.tx.win_lim, __ATOMIC_ACQUIRE)) {
    __atomic_store_n(&r->ask_ns, 1, __ATOMIC_RELAXED); /* open */
  } else if (fs_clock_ns() - at >= (uint64_t)FS_RDMA_ASK_MS * 1000000u) {
    __atomic_store_n(&r->ask_ns, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&r->ch.cramped, 1, __ATOMIC_RELEASE);
    fs_log(FS_LOG_INFO, "rdma channel %p: the peer has not answered our rings' growth in %d ms "
           "(its process is not reading): a sender that waits for room goes back to tcp",
           (void *)r, FS_RDMA_ASK_MS);
  }
}

/* Half a key of the peer's (the poller).  Its whole region's makes ours
 * due, if not sent: the peer waits for it to open its window. */
void fs_rdma_take_key(struct fs_rdma *r, uint32_t v)
{
  bool full;
  uint32_t key;
  int rc = fs_rdma_key_take(r->key_lo, v, &full, &key);
  if (rc < 0) {
    fs_rdma_die(r, "malformed key message", 0);
    return;
  }
  if (rc == 0)
    return;
  if (full)
    r->rkey_full = key;
  else
    r->rkey_tx = key;
  __atomic_or_fetch(&r->keys_known, full ? FS_RDMA_K_FULL : FS_RDMA_K_TX, __ATOMIC_RELEASE);
  if (full)
    r->widen_due = true;
}

