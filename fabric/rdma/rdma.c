/* The rdma fabric's channel (wire format in fabric/rdma/rdma.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "fabric/rdma/verbs.h"

#include "base/fdreg.h"
#include "base/clock.h"
#include "base/lock.h"
#include "base/log.h"
#include "fabric/rdma/cq.h"
#include "fabric/rdma/mr.h"
#include "fabric/rdma/rdma.h"
#include "fabric/rdma/rdma_int.h"
#include "fabric/rdma/rdmacm.h"
#include "policy/policy.h"
#include "base/real.h"

static const struct fs_chan_ops fs_rdma_ops;

struct fs_chan *fs_rdma_chan(struct fs_rdma *r)
{
  return &r->ch;
}

struct fs_rdma *fs_rdma_of(struct fs_chan *ch)
{
  return ch && ch->ops == &fs_rdma_ops ? (struct fs_rdma *)ch : NULL;
}

struct rdma_cm_id *fs_rdma_id(struct fs_rdma *r)
{
  return r->id;
}

/* ---- posting ------------------------------------------------------------ */

void fs_rdma_die(struct fs_rdma *r, const char *why, int status)
{
  /* Flushed work after the peer closed is the normal end of a channel. */
  bool gone = __atomic_load_n(&r->ep[1].closed, __ATOMIC_ACQUIRE);
  bool normal = status == IBV_WC_WR_FLUSH_ERR && gone;
  if (!__atomic_exchange_n(&r->dead, true, __ATOMIC_ACQ_REL))
    fs_log(normal ? FS_LOG_DEBUG : FS_LOG_INFO, "rdma channel %p dead: %s (%d)%s", (void *)r, why, status,
           gone ? "" : "; the connection is reset");
  /* Bytes may be lost (a link down kills a Soft-RoCE queue pair at the next
   * post): the engine resets the connection rather than read an EOF.  Not
   * after the peer closed or disconnected: that explains any error, and the
   * engine's close and peer-death rules answer as TCP would. */
  if (!gone)
    __atomic_store_n(&r->ch.broken, 1, __ATOMIC_RELEASE);
  __atomic_store_n(&r->ep[1].closed, 1, __ATOMIC_RELEASE);
}

/* Take in the send completions there are now (slock held): how many, or
 * -EIO (the channel is dead). */
int fs_rdma_reap_now(struct fs_rdma *r)
{
  struct ibv_wc wc[16];
  int n = ibv_poll_cq(r->scq, 16, wc);
  if (n < 0) {
    fs_rdma_die(r, "send cq poll failed", n);
    return -EIO;
  }
  for (int i = 0; i < n; i++) {
    if (wc[i].qp_num != r->qpn)
      continue; /* a replaced queue pair's (heal.c): its sends are written off */
    if (wc[i].status != IBV_WC_SUCCESS) {
      if (!fs_rdma_failed(r, FS_VERBS(ibv_wc_status_str)(wc[i].status), wc[i].status))
        fs_rdma_die(r, FS_VERBS(ibv_wc_status_str)(wc[i].status), wc[i].status);
      return -EIO;
    }
    r->sq_free += (uint32_t)wc[i].wr_id;
    if (wc[i].wr_id & FS_RDMA_WR_PROBE)
      r->probe_out = false;
  }
  return n;
}

/* Reap send completions until `want` send slots are free (slock held).
 * Spins: the send queue is full only while the NIC is behind, or the peer
 * has no receive posted (RNR: it has not polled for a while).  A queue
 * stuck for FS_RDMA_REAP_US is a wedged requester: the channel resumes on
 * a new queue pair (heal.c). */
#define FS_RDMA_REAP_US 5000000u
static int fs_rdma_reap(struct fs_rdma *r, uint32_t want)
{
  uint64_t t0 = 0;
  while (r->sq_free < want) {
    int n = fs_rdma_reap_now(r);
    if (n < 0)
      return n;
    if (n == 0) {
      if (fs_rdma_pairless(r))
        return -EAGAIN; /* the pair is being replaced: nothing to wait for */
      r->n_reap_wait++;
      if (!t0)
        t0 = fs_clock_us();
      else if (fs_clock_us() - t0 > FS_RDMA_REAP_US) {
        if (!fs_rdma_failed(r, "send queue stuck", 0))
          fs_rdma_die(r, "send queue stuck", 0);
        return -EIO;
      }
      sched_yield();
    }
  }
  return 0;
}

/* Post a chain of n send work requests (slock held).  One in
 * FS_RDMA_SIGNAL is signalled; its wr_id counts the sends it retires. */
int fs_rdma_post(struct fs_rdma *r, struct ibv_send_wr *wr, int n, bool signal)
{
  if (__atomic_load_n(&r->dead, __ATOMIC_ACQUIRE) || r->foreign)
    return -EPIPE;
  if (fs_rdma_pairless(r))
    return -EAGAIN; /* the resume says it all again */
  if (__builtin_expect(r->test_wedge, 0))
    return 0; /* FABSOCK_TEST_RDMA_WEDGE: taken, never sent, never completed */
  if (__builtin_expect(!(r->keys_sent & FS_RDMA_K_TX), 0)) {
    r->keys_sent |= FS_RDMA_K_TX; /* first on a queue pair: before what may need it */
    int rc = fs_rdma_send_key(r, false, r->g.tx->rkey);
    if (rc == 0 && r->g.full && (rc = fs_rdma_send_key(r, true, r->g.full->rkey)) == 0)
      fs_rdma_lift(r);
    if (rc < 0)
      return rc;
  }
  if (fs_rdma_reap(r, (uint32_t)n) < 0)
    return -EIO;
  for (int i = 0; i < n; i++) {
    r->unsig++;
    wr[i].send_flags &= ~(unsigned)IBV_SEND_SIGNALED;
    if (i == n - 1 && (signal || r->unsig >= FS_RDMA_SIGNAL)) {
      wr[i].send_flags |= IBV_SEND_SIGNALED;
      wr[i].wr_id = r->unsig | (signal ? FS_RDMA_WR_PROBE : 0);
      r->unsig = 0;
    }
    wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
  }
  struct ibv_send_wr *bad;
  int rc = ibv_post_send(r->id->qp, wr, &bad);
  if (rc) {
    /* Soft-RoCE refuses posts while the link is down */
    if (!fs_rdma_failed(r, "post send failed", rc))
      fs_rdma_die(r, "post send failed", rc);
    return -rc;
  }
  r->sq_free -= (uint32_t)n;
  r->n_post++;
  r->n_wr += (uint64_t)n;
  return 0;
}

/* The keys for bytes [off, off + len) of a region (rx ring, then tx): a
 * first page's where they lie in it, else the whole region's.  A key not
 * there (ours not registered, the peer's not come) cannot be needed by an
 * honest peer or by us (fabric/rdma/rdma.h); the page key then makes the
 * NIC refuse the access, and the channel fails as on any bad access. */
static uint32_t fs_rdma_lkey(const struct fs_rdma *r, uint64_t off, uint32_t len)
{
  const struct fs_rdma_region *g = &r->g;
  bool tx = off >= g->size;
  if (off - (tx ? g->size : 0) + len <= g->narrow || !g->full)
    return tx ? g->tx->lkey : g->rx->lkey;
  return g->full->lkey;
}

static uint32_t fs_rdma_rkey(const struct fs_rdma *r, uint64_t off, uint32_t len)
{
  bool tx = off >= r->g.size;
  uint32_t known = __atomic_load_n(&r->keys_known, __ATOMIC_ACQUIRE);
  if ((off - (tx ? r->g.size : 0) + len > r->g.narrow || (tx && !(known & FS_RDMA_K_TX))) &&
      (known & FS_RDMA_K_FULL))
    return r->rkey_full;
  return tx ? r->rkey_tx : r->rkey;
}

void fs_rdma_wr(struct ibv_send_wr *wr, struct ibv_sge *sge, struct fs_rdma *r, uint32_t src, uint64_t dst,
                uint32_t len)
{
  memset(wr, 0, sizeof *wr);
  sge->addr = (uintptr_t)r->g.buf + src;
  sge->length = len;
  sge->lkey = fs_rdma_lkey(r, src, len);
  wr->sg_list = len ? sge : NULL;
  wr->num_sge = len ? 1 : 0;
  wr->opcode = IBV_WR_RDMA_WRITE;
  wr->wr.rdma.remote_addr = r->raddr + dst;
  wr->wr.rdma.rkey = fs_rdma_rkey(r, dst, len);
  if (len && len <= r->max_inline)
    wr->send_flags = IBV_SEND_INLINE;
}

void fs_rdma_imm(struct ibv_send_wr *wr, uint32_t kind, uint64_t val)
{
  wr->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr->imm_data = htonl(kind << 30 | ((uint32_t)val & FS_RDMA_IMM_MASK));
}

/* Write tx bytes [from, to) to the peer's ring (at most one wrap: two work
 * requests), the DATA immediate with `to` on the last (slock held).  An
 * empty range posts the immediate alone.  A SKIP in the range (a window's
 * end: fabric/ring.h) goes as its header alone: what it steps over was
 * never written, and lies outside the registered first page. */
void fs_rdma_post_range(struct fs_rdma *r, uint64_t from, uint64_t to, bool signal)
{
  uint32_t size = r->g.size, off = (uint32_t)(from & (size - 1)), len = (uint32_t)(to - from);
  uint32_t first = len < size - off ? len : size - off, gap = 0;
  if (len > first) { /* a wrap: behind a SKIP, unless the window is open (then rarely) */
    uint64_t sk = __atomic_load_n(&r->ch.tx.skip_at, __ATOMIC_RELAXED);
    uint32_t keep = first;
    if (sk >= from && sk + FS_RING_HDR <= from + first)
      keep = (uint32_t)(sk + FS_RING_HDR - from);
    else if (__atomic_load_n(&r->ch.tx.win_lim, __ATOMIC_RELAXED) && off < r->g.narrow && first > r->g.narrow - off)
      keep = r->g.narrow - off; /* a SKIP written after `to` was read hid this one's place: the
                                   page's rest holds it, and what follows it is stepped over */
    gap = first - keep;
    first = keep;
  }
  struct ibv_send_wr wr[2];
  struct ibv_sge sge[2];
  int n = 1;
  fs_rdma_wr(&wr[0], &sge[0], r, size + off, off, first);
  if (len > first + gap)
    fs_rdma_wr(&wr[n++], &sge[1], r, size, 0, len - first - gap);
  fs_rdma_imm(&wr[n - 1], FS_RDMA_IMM_DATA, to);
  (void)fs_rdma_post(r, wr, n, signal);
}

void fs_rdma_push(struct fs_rdma *r)
{
  if (__atomic_load_n(&r->resume, __ATOMIC_RELAXED) != FS_RDMA_RS_NONE)
    return; /* held until the peer's RESUME says where its ring stands (heal.c) */
  if (__builtin_expect(__atomic_load_n(&r->ch.tx.win_ask, __ATOMIC_ACQUIRE), 0) &&
      !__atomic_load_n(&r->ask_ns, __ATOMIC_RELAXED))
    fs_rdma_ask(r);
  uint64_t from = r->pub_tail, tail = fs_ring_load(&r->ctl[1].tail);
  if (tail == from)
    return;
  /* Before posting: the peer's credit for these bytes may come back before
   * this thread runs again, and is checked against pub_tail. */
  __atomic_store_n(&r->pub_tail, tail, __ATOMIC_RELEASE);
  if (__builtin_expect(fs_policy_test_rdma_drop() != 0, 0) && fs_rdma_test_seam(r, from))
    return;
  fs_rdma_post_range(r, from, tail, false);
}

int fs_rdma_post_imm(struct fs_rdma *r, uint32_t kind, uint64_t val)
{
  struct ibv_send_wr wr;
  struct ibv_sge sge;
  fs_rdma_wr(&wr, &sge, r, 0, 0, 0);
  fs_rdma_imm(&wr, kind, val);
  return fs_rdma_post(r, &wr, 1, false);
}

void fs_rdma_send_credit(struct fs_rdma *r, uint64_t head)
{
  if (fs_rdma_post_imm(r, FS_RDMA_IMM_CREDIT, head) == 0)
    r->cred_head = head;
}

static void fs_rdma_publish(struct fs_chan *ch)
{
  struct fs_rdma *r = (struct fs_rdma *)ch;
  fs_lock(&r->slock);
  fs_rdma_push(r);
  fs_unlock(&r->slock);
}

/* Credits go back once an eighth of the ring is free: the producer waits
 * only with the ring (nearly) full, and then the reader, working through
 * the rest, crosses the next eighth.  A quarter of the page while the
 * producer keeps to its first page (its window). */
static void fs_rdma_credit(struct fs_chan *ch)
{
  struct fs_rdma *r = (struct fs_rdma *)ch;
  uint64_t head = __atomic_load_n(&r->ctl[0].head, __ATOMIC_ACQUIRE);
  uint32_t step = __atomic_load_n(&r->rx_wide, __ATOMIC_RELAXED) ? r->g.size / 8 : r->g.narrow / 4;
  if (head - __atomic_load_n(&r->cred_head, __ATOMIC_RELAXED) < step)
    return;
  fs_lock(&r->slock);
  head = __atomic_load_n(&r->ctl[0].head, __ATOMIC_ACQUIRE);
  if (head - r->cred_head >= step)
    fs_rdma_send_credit(r, head);
  fs_unlock(&r->slock);
}

static uint32_t fs_rdma_my_flags(struct fs_rdma *r)
{
  return (__atomic_load_n(&r->ep[0].closed, __ATOMIC_ACQUIRE) ? FS_RDMA_FLAG_CLOSED : 0) |
         (__atomic_load_n(&r->ep[0].rx_revert, __ATOMIC_ACQUIRE) ? FS_RDMA_FLAG_RX_REVERT : 0) |
         (__atomic_load_n(&r->ep[0].attached, __ATOMIC_ACQUIRE) ? FS_RDMA_FLAG_ATTACHED : 0);
}

/* My flags, if they changed since last sent (slock held): on an rx revert
 * first where my reading stopped, then the flags. */
void fs_rdma_send_flags(struct fs_rdma *r)
{
  uint32_t f = fs_rdma_my_flags(r);
  if (f == r->flags_sent)
    return;
  if ((f & FS_RDMA_FLAG_RX_REVERT) && !(r->flags_sent & FS_RDMA_FLAG_RX_REVERT)) {
    uint64_t head = __atomic_load_n(&r->ctl[0].head, __ATOMIC_ACQUIRE);
    if (fs_ring_load(&r->ctl[0].tail) != head) { /* the record at head, maybe half read */
      struct ibv_send_wr wr;
      struct ibv_sge sge;
      uint32_t off = (uint32_t)(head & (r->g.size - 1));
      fs_rdma_wr(&wr, &sge, r, off, (uint64_t)r->g.size + off, FS_RING_HDR);
      (void)fs_rdma_post(r, &wr, 1, false);
    }
    fs_rdma_send_credit(r, head);
  }
  if (fs_rdma_post_imm(r, FS_RDMA_IMM_FLAGS, f) == 0)
    r->flags_sent = f;
}

/* After publishing or a change of my flags: records first, then the flags. */
static void fs_rdma_wake_peer(struct fs_chan *ch)
{
  struct fs_rdma *r = (struct fs_rdma *)ch;
  if (r->foreign)
    return;
  fs_lock(&r->slock);
  fs_rdma_push(r);
  fs_rdma_send_flags(r);
  fs_unlock(&r->slock);
}

/* ---- completions -------------------------------------------------------- */

void fs_rdma_repost(struct fs_rdma *r, uint32_t n)
{
  struct ibv_recv_wr wr[FS_RDMA_REPOST], *bad;
  while (n > 0) {
    uint32_t k = n < FS_RDMA_REPOST ? n : FS_RDMA_REPOST;
    for (uint32_t i = 0; i < k; i++)
      wr[i] = (struct ibv_recv_wr){ .wr_id = 0, .next = i + 1 < k ? &wr[i + 1] : NULL, .sg_list = NULL, .num_sge = 0 };
    if (ibv_post_recv(r->id->qp, wr, &bad)) {
      if (!fs_rdma_failed(r, "post recv failed", 0))
        fs_rdma_die(r, "post recv failed", 0);
      return;
    }
    n -= k;
  }
}

static void fs_rdma_take(struct fs_rdma *r, uint32_t imm)
{
  uint32_t kind = imm >> 30, v = imm & FS_RDMA_IMM_MASK;
  switch (kind) {
  case FS_RDMA_IMM_DATA: {
    uint64_t t = fs_rdma_unwrap(r->ctl[0].tail, v);
    if (t - __atomic_load_n(&r->ctl[0].head, __ATOMIC_ACQUIRE) > r->g.size) {
      fs_rdma_die(r, "peer wrote past the ring", 0);
      return;
    }
    if (__builtin_expect(!r->rx_wide, 0) && (t & (r->g.size - 1)) > r->g.narrow)
      __atomic_store_n(&r->rx_wide, true, __ATOMIC_RELAXED);
    if (t == r->ctl[0].tail)
      r->credit_again = true; /* a repeat (fs_rdma_watch): our credit may be what it lost */
    __atomic_store_n(&r->ctl[0].tail, t, __ATOMIC_RELEASE);
    break;
  }
  case FS_RDMA_IMM_CREDIT: {
    uint64_t h = fs_rdma_unwrap(r->ctl[1].head, v);
    if (h > __atomic_load_n(&r->pub_tail, __ATOMIC_ACQUIRE)) {
      fs_rdma_die(r, "peer credited unsent bytes", 0);
      return;
    }
    __atomic_store_n(&r->ctl[1].head, h, __ATOMIC_RELEASE);
    break;
  }
  case FS_RDMA_IMM_FLAGS:
    if (v & FS_RDMA_FLAG_KEY) {
      fs_rdma_take_key(r, v);
      break;
    }
    if (v & FS_RDMA_FLAG_ATTACHED)
      __atomic_store_n(&r->ep[1].attached, 1, __ATOMIC_RELEASE);
    if (v & FS_RDMA_FLAG_RX_REVERT)
      __atomic_store_n(&r->ep[1].rx_revert, 1, __ATOMIC_RELEASE);
    if (v & FS_RDMA_FLAG_CLOSED)
      __atomic_store_n(&r->ep[1].closed, 1, __ATOMIC_RELEASE);
    break;
  default: /* FS_RDMA_IMM_RESUME */
    fs_rdma_take_resume(r, v);
  }
}

/* Wake this end's sleepers: ring the connection's door, or write its wake
 * eventfd (both go away under slock, in fs_rdma_release). */
void fs_rdma_wake_local(struct fs_rdma *r)
{
  fs_lock(&r->slock);
  if (r->bell)
    fs_bell_peer_ring(r->bell, r->bell_slot);
  else if (r->ch.my_efd >= 0)
    fs_chan_efd_write(r->ch.my_efd);
  fs_unlock(&r->slock);
}

void fs_rdma_set_wake(struct fs_rdma *r, int my_efd)
{
  fs_lock(&r->slock);
  r->ch.my_efd = my_efd;
  fs_unlock(&r->slock);
}

/* The agent, for an event of the device's shared completion channel
 * (fabric/rdma/cq.c): r's CQ has news. */
static void fs_rdma_cq_event(void *ctx)
{
  struct fs_rdma *r = ctx;
  r->n_event++;
  fs_rdma_wake_local(r);
}

bool fs_rdma_own_channel(const struct fs_rdma *r)
{
  return r->cc != NULL;
}

void fs_rdma_set_bell(struct fs_rdma *r, struct fs_bell_peer *bell, uint32_t slot)
{
  fs_lock(&r->slock);
  r->bell = bell;
  r->bell_slot = slot;
  fs_unlock(&r->slock);
}

/* Take in what the receive queue holds now (`polling` held); true if this
 * end has a thread to wake for it. */
bool fs_rdma_take_all(struct fs_rdma *r)
{
  struct ibv_wc wc[16];
  int n;
  uint64_t took = 0;
  while ((n = ibv_poll_cq(r->rcq, 16, wc)) > 0) {
    took += (uint64_t)n;
    for (int i = 0; i < n && !r->dead; i++) {
      if (wc[i].qp_num != r->qpn)
        continue; /* a replaced queue pair's: the resume said where we stand */
      r->rq_used++;
      if (wc[i].status != IBV_WC_SUCCESS) {
        if (fs_rdma_failed(r, FS_VERBS(ibv_wc_status_str)(wc[i].status), wc[i].status))
          continue; /* the rest are flushed too */
        fs_rdma_die(r, FS_VERBS(ibv_wc_status_str)(wc[i].status), wc[i].status);
        break;
      }
      if (!(wc[i].wc_flags & IBV_WC_WITH_IMM)) {
        fs_rdma_die(r, "receive without immediate", 0);
        break;
      }
      fs_rdma_take(r, ntohl(wc[i].imm_data));
    }
    r->n_cqe += (uint64_t)n;
    if (n < 16)
      break;
  }
  if (n < 0 && !fs_rdma_failed(r, "recv cq poll failed", n))
    fs_rdma_die(r, "recv cq poll failed", n);
  if (r->rq_used >= FS_RDMA_REPOST && !r->dead && !fs_rdma_pairless(r)) {
    fs_rdma_repost(r, r->rq_used);
    r->rq_used = 0;
  }
  /* A thread of ours may sleep for what this took in (the sender for
   * credits, the receiver for data): it declared so in the local control
   * blocks before its last look, and its completion-channel event may have
   * gone to whoever polled first, so wake it here (Dekker with
   * fs_chan_arm_*). */
  bool wake = false;
  if (took) {
    __atomic_store_n(&r->ch.news, r->ch.news + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    for (int i = 0; i < 2; i++) {
      uint32_t *w = i ? &r->ctl[1].want_space : &r->ctl[0].want_data;
      if (__atomic_load_n(w, __ATOMIC_RELAXED) && __atomic_exchange_n(w, 0, __ATOMIC_ACQ_REL))
        wake = true;
    }
  }
  return wake;
}


/* Whoever finds the receive queue busy leaves it to the thread polling it,
 * but says so (poll_again): that thread's last poll may have come before
 * the completion this one looks for, whose channel event the looker may
 * already have drained, so the holder polls once more after unlocking.
 * Without it, the looker could sleep on a completion nobody takes in. */
static void fs_rdma_progress(struct fs_chan *ch)
{
  struct fs_rdma *r = (struct fs_rdma *)ch;
  if (r->foreign)
    return;
  if (!fs_rdma_poll_begin(r)) {
    __atomic_store_n(&r->poll_again, 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST); /* Dekker with the holder's release */
    if (!fs_rdma_poll_begin(r))
      return;
  }
  for (;;) {
    __atomic_store_n(&r->poll_again, 0, __ATOMIC_RELAXED);
    uint64_t seen = r->n_cqe;
    bool wake = fs_rdma_take_all(r);
    fs_rdma_watch(r, r->n_cqe != seen);
    if (__builtin_expect(__atomic_load_n(&r->ask_ns, __ATOMIC_RELAXED) > 1, 0))
      fs_rdma_ask_check(r);
    if (__builtin_expect(r->widen_due, 0)) {
      r->widen_due = false;
      fs_lock(&r->slock);
      fs_rdma_widen(r); /* ours registered and sent if not yet; the window may open */
      fs_unlock(&r->slock);
    }
    if (__builtin_expect(r->credit_again, 0)) {
      r->credit_again = false;
      fs_lock(&r->slock);
      if (!r->dead)
        fs_rdma_send_credit(r, __atomic_load_n(&r->ctl[0].head, __ATOMIC_ACQUIRE));
      fs_unlock(&r->slock);
    }
    __atomic_store_n(&r->polling, 0, __ATOMIC_RELEASE);
    if (wake)
      fs_rdma_wake_local(r);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&r->poll_again, __ATOMIC_RELAXED) || !fs_rdma_poll_begin(r))
      return;
  }
}

/* A channel of its own: clear it (a channel on the device's is the
 * agent's to drain, fabric/rdma/cq.h). */
static void fs_rdma_drain(struct fs_chan *ch)
{
  struct fs_rdma *r = (struct fs_rdma *)ch;
  if (r->foreign || !r->cc)
    return;
  struct ibv_cq *cq;
  void *ctx;
  int saved = errno;
  while (FS_VERBS(ibv_get_cq_event)(r->cc, &cq, &ctx) == 0)
    FS_VERBS(ibv_ack_cq_events)(cq, 1);
  errno = saved;
}

/* Ask for an event on the next receive (after clearing our channel). */
static void fs_rdma_arm(struct fs_chan *ch)
{
  struct fs_rdma *r = (struct fs_rdma *)ch;
  if (r->foreign)
    return;
  fs_rdma_drain(ch);
  r->n_arm++;
  if (ibv_req_notify_cq(r->rcq, 0))
    fs_rdma_die(r, "cannot arm the cq", 0);
}

static void fs_rdma_release(struct fs_chan *ch)
{
  struct fs_rdma *r = (struct fs_rdma *)ch;
  if (r->foreign)
    return; /* the parent's; never touch it here */
  fs_lock(&r->slock); /* fs_rdma_wake_local may be ringing it */
  r->ch.my_efd = -1;               /* the connection closes it next: never again */
  struct fs_bell_peer *bell = r->bell;
  r->bell = NULL;                  /* its slot may go to another connection */
  fs_unlock(&r->slock);
  fs_bell_peer_put(bell);
  fs_rdmacm_retire(r);
}

static bool fs_rdma_lingering_ch(struct fs_chan *ch)
{
  return fs_rdma_lingering(fs_rdma_of(ch));
}

static bool fs_rdma_peer_vanished(struct fs_chan *ch, const struct sockaddr *local, const struct sockaddr *peer)
{
  (void)ch, (void)local, (void)peer;
  return false; /* a dead peer's queue pair disconnects: fs_rdma_peer_gone marks it closed */
}

static const struct fs_chan_ops fs_rdma_ops = {
  .name = "rdma",
  .fabric = FS_FABRIC_RDMA,
  .polled = true,
  .wake_peer = fs_rdma_wake_peer,
  .release = fs_rdma_release,
  .progress = fs_rdma_progress,
  .publish = fs_rdma_publish,
  .settle = fs_rdma_settle,
  .credit = fs_rdma_credit,
  .arm = fs_rdma_arm,
  .drain = fs_rdma_drain,
  .fork_shares = fs_chan_no,        /* a queue pair is the parent's alone: TCP first */
  .forget = fs_rdma_forget,
  .lingering = fs_rdma_lingering_ch,
  .peer_gone = fs_rdma_peer_vanished,
  .trim = fs_chan_trim_none,        /* registered memory is pinned */
};

/* ---- life cycle --------------------------------------------------------- */

int fs_rdma_qp(struct fs_rdma *r)
{
  struct ibv_qp_init_attr a = {
    .send_cq = r->scq,
    .recv_cq = r->rcq,
    .cap = { .max_send_wr = FS_RDMA_SQ, .max_recv_wr = FS_RDMA_RQ, .max_send_sge = 1, .max_recv_sge = 1 },
    .qp_type = IBV_QPT_RC,
    .sq_sig_all = 0,
  };
  /* Devices cap inline data differently (some have none): ask for less
   * until one fits. */
  static const uint32_t inl[] = { FS_RDMA_INLINE, 64, 0 };
  for (size_t i = 0; i < sizeof inl / sizeof inl[0]; i++) {
    a.cap.max_inline_data = inl[i];
    if (FS_VERBS(rdma_create_qp)(r->id, r->pd, &a) == 0) {
      r->max_inline = a.cap.max_inline_data;
      return 0;
    }
  }
  return errno ? -errno : -ENOMEM;
}

int fs_rdma_new(struct rdma_cm_id *id, uint32_t size, int side, struct fs_rdma **out)
{
  struct fs_rdma *r;
  if (posix_memalign((void **)&r, 64, sizeof *r) != 0)
    return -ENOMEM;
  memset(r, 0, sizeof *r);
  fs_lock_init(&r->slock);
  r->id = id;
  r->sq_free = FS_RDMA_SQ;
  int rc = 0;
  const char *step = "pd";
  errno = 0;
  if (!(r->pd = fs_rdma_mr_pd(id->verbs)))
    goto fail;
  step = "completion channel";
  struct ibv_comp_channel *cc = r->cc = fs_rdma_cc_own(id->verbs);
  if (!cc && !(cc = fs_rdma_cc_shared(id->verbs, fs_rdma_cq_event)))
    goto fail;
  step = "cq";
  if (!(r->rcq = FS_VERBS(ibv_create_cq)(id->verbs, FS_RDMA_RQ, r, cc, 0)) ||
      !(r->scq = FS_VERBS(ibv_create_cq)(id->verbs, FS_RDMA_SQ, r, NULL, 0)))
    goto fail;
  step = "memory registration";
  if ((rc = fs_rdma_mr_get(r->pd, size, &r->g)) < 0)
    goto fail;
  if (fs_rdma_mr_unlimited())
    (void)fs_rdma_mr_widen(&r->g); /* else it waits for an ask (or came widened from the pool) */
  r->whole = r->g.full != NULL; /* our handshake says so (FS_RDMACM_F_WHOLE) */
  step = "queue pair";
  if ((rc = fs_rdma_qp(r)) < 0)
    goto fail;
  r->qpn = id->qp->qp_num;
  step = "receives";
  fs_rdma_repost(r, FS_RDMA_RQ);
  if (r->dead) {
    rc = -EIO;
    goto fail;
  }
  r->ctl[0].size = r->ctl[1].size = size;
  r->ep[0].refs = 1;
  r->ep[0].pid = (uint32_t)getpid();
  struct fs_chan *ch = &r->ch;
  ch->ops = &fs_rdma_ops;
  ch->side = side;
  ch->rx = (struct fs_ring){ .ctl = &r->ctl[0], .data = r->g.buf, .size = size };
  /* Records stay in the registered first page until both ends register
   * their whole regions (fs_rdma_widen): the window's limit. */
  uint32_t win = r->g.narrow < size ? r->g.narrow - FS_RDMA_WIN_SLACK : 0;
  ch->tx = (struct fs_ring){ .ctl = &r->ctl[1], .data = r->g.buf + size, .size = size, .win = win, .win_lim = win };
  ch->me = &r->ep[0];
  ch->peer = &r->ep[1];
  ch->my_efd = -1;
  ch->wait_fd = r->cc ? r->cc->fd : -1;
  *out = r;
  return 0;
fail:
  if (rc == 0)
    rc = errno ? -errno : -ENOMEM;
  fs_log(FS_LOG_INFO, "rdma channel set-up failed at %s: %s", step, strerror(-rc));
  /* The id stays the caller's (it may still reject the request on it). */
  if (id->qp)
    FS_VERBS(rdma_destroy_qp)(id);
  r->id = NULL;
  fs_rdma_destroy(r);
  return rc;
}

void fs_rdma_set_peer(struct fs_rdma *r, uint64_t addr, uint32_t rkey, bool whole)
{
  r->raddr = addr;
  r->rkey = rkey;
  if (!whole)
    return;
  r->rkey_tx = r->rkey_full = rkey;
  __atomic_store_n(&r->keys_known, FS_RDMA_K_TX | FS_RDMA_K_FULL, __ATOMIC_RELEASE);
  if (r->whole) { /* both whole: no window, no key to send (ours was in the handshake) */
    r->keys_sent = FS_RDMA_K_TX | FS_RDMA_K_FULL;
    r->ch.tx.win = r->ch.tx.win_lim = 0;
  }
}

bool fs_rdma_local(const struct fs_rdma *r, uint64_t *addr, uint32_t *rkey)
{
  *addr = (uintptr_t)r->g.buf;
  *rkey = r->whole ? r->g.full->rkey : r->g.rx->rkey;
  return r->whole;
}

void fs_rdma_peer_gone(struct fs_rdma *r)
{
  __atomic_store_n(&r->ep[1].closed, 1, __ATOMIC_RELEASE);
  fs_rdma_wake_local(r);
}

void fs_rdma_forget(struct fs_chan *ch)
{
  struct fs_rdma *r = fs_rdma_of(ch);
  if (r) {
    r->foreign = true;
    fs_lock_init(&r->slock);
    r->polling = 0;
  }
}

bool fs_rdma_lingering(struct fs_rdma *r)
{
  if (r->foreign || r->dead)
    return false;
  if (__atomic_load_n(&r->resume, __ATOMIC_ACQUIRE) != FS_RDMA_RS_NONE) {
    fs_rdma_progress(&r->ch); /* the peer's RESUME, once up */
    return !__atomic_load_n(&r->ep[1].closed, __ATOMIC_ACQUIRE); /* what we wrote last waits for the new pair */
  }
  if (!r->id || !r->id->qp || !r->raddr)
    return false;
  /* What the peer said last (its closed flag) may still be in the queue:
   * nobody has polled since the connection let go of the channel. */
  fs_rdma_progress(&r->ch);
  if (__atomic_load_n(&r->ep[1].closed, __ATOMIC_ACQUIRE) || __atomic_load_n(&r->dead, __ATOMIC_ACQUIRE))
    return false;
  fs_lock(&r->slock);
  bool busy = r->sq_free < FS_RDMA_SQ && fs_rdma_reap_now(r) >= 0 && r->sq_free < FS_RDMA_SQ;
  if (busy && !r->linger_posted && r->sq_free > 0) {
    /* Unsignalled writes complete silently: one signalled no-op behind
     * them completes only after they all landed. */
    struct ibv_send_wr wr;
    struct ibv_sge sge;
    fs_rdma_wr(&wr, &sge, r, 0, 0, 0);
    busy = r->linger_posted = fs_rdma_post(r, &wr, 1, true) == 0;
  }
  fs_unlock(&r->slock);
  return busy;
}

void fs_rdma_destroy(struct fs_rdma *r)
{
  if (!r)
    return;
  fs_log(FS_LOG_DEBUG, "rdma channel %p: %llu posts, %llu work requests, %llu receive completions, %llu arms, "
         "%llu events, %llu send-queue waits, %llu resumes; tx %llu rx %llu", (void *)r, (unsigned long long)r->n_post,
         (unsigned long long)r->n_wr, (unsigned long long)r->n_cqe, (unsigned long long)r->n_arm,
         (unsigned long long)r->n_event, (unsigned long long)r->n_reap_wait, (unsigned long long)r->n_resume, (unsigned long long)r->pub_tail,
         (unsigned long long)r->ctl[0].tail);
  if (r->id) {
    if (r->id->qp) {
      FS_VERBS(rdma_disconnect)(r->id);
      FS_VERBS(rdma_destroy_qp)(r->id);
    }
    FS_VERBS(rdma_destroy_id)(r->id);
  }
  if (r->cc)
    fs_rdma_drain(&r->ch);
  if (r->rcq)
    FS_VERBS(ibv_destroy_cq)(r->rcq);
  if (r->scq)
    FS_VERBS(ibv_destroy_cq)(r->scq);
  if (r->cc)
    fs_rdma_cc_own_free(r->cc);
  fs_bell_peer_put(r->bell); /* set, never attached (released: NULL) */
  fs_rdma_mr_put(&r->g);
  free(r);
}
