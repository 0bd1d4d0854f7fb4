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
#include "fabric/rdma/mr.h"
#include "fabric/rdma/rdma.h"
#include "fabric/rdma/rdmacm.h"
#include "policy/policy.h"
#include "base/real.h"

#define FS_RDMA_SQ 256       /* send queue depth */
#define FS_RDMA_RQ 512       /* receives posted (one per immediate) */
#define FS_RDMA_SIGNAL 64    /* signal one send in this many */
#define FS_RDMA_REPOST 32    /* re-post receives in batches of this many */
#define FS_RDMA_INLINE 256   /* ask for this much inline data: a small message
                                and its record header (a 64 B message is 72 B)
                                go in the work request, not by a DMA read */

struct fs_rdma {
  struct fs_chan ch;                /* first: fs_rdma_of() */
  struct fs_ring_ctl ctl[2];        /* [0] rx, [1] tx; local only */
  struct fs_chan_ep ep[2];          /* [0] mine, [1] the peer's as last told */
  struct rdma_cm_id *id;
  struct ibv_pd *pd;
  struct ibv_comp_channel *cc;
  struct ibv_cq *rcq, *scq;
  struct ibv_mr *mr;
  uint8_t *buf;
  uint32_t size;
  uint32_t max_inline;
  uint64_t raddr;
  uint32_t rkey;
  fs_lock_t slock;                  /* posting and send-queue accounting */
  uint32_t polling;                 /* a thread takes in receive completions; atomic
                                       (a flag, not a mutex: nobody waits for it, and
                                       this is half the cost of an empty look) */
  uint64_t pub_tail;                /* tx bytes handed to the NIC; atomic reads */
  uint64_t cred_head;               /* rx head last credited */
  uint32_t flags_sent;
  uint32_t sq_free, unsig;
  uint32_t rq_used;                 /* receives consumed, not yet re-posted */
  bool dead, foreign;
  bool linger_posted;               /* tear-down: the signalled no-op is out */
  uint32_t poll_again;              /* a look found `polling` set (fs_rdma_progress) */
  uint64_t quiet_ns, stall_ns;      /* the stall watch (fs_rdma_watch; the poller's) */
  uint32_t quiet_looks;
  bool credit_again;                /* the peer repeated a tail: it waits for a credit */
  bool test_stall;                  /* FABSOCK_TEST_RDMA_DROP: pushes not posted (slock) */
  uint64_t stall_from;              /* ... from this position on */
  /* counters for the debug log at tear-down (racy increments are fine) */
  uint64_t n_post, n_wr, n_cqe, n_arm, n_reap_wait;
};

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

static void fs_rdma_die(struct fs_rdma *r, const char *why, int status)
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
static int fs_rdma_reap_now(struct fs_rdma *r)
{
  struct ibv_wc wc[16];
  int n = ibv_poll_cq(r->scq, 16, wc);
  if (n < 0) {
    fs_rdma_die(r, "send cq poll failed", n);
    return -EIO;
  }
  for (int i = 0; i < n; i++) {
    if (wc[i].status != IBV_WC_SUCCESS) {
      fs_rdma_die(r, FS_VERBS(ibv_wc_status_str)(wc[i].status), wc[i].status);
      return -EIO;
    }
    r->sq_free += (uint32_t)wc[i].wr_id;
  }
  return n;
}

/* Reap send completions until `want` send slots are free (slock held).
 * Spins: the send queue is full only while the NIC is behind; the RC retry
 * limit ends any real wait long before FS_RDMA_REAP_US. */
#define FS_RDMA_REAP_US 30000000u
static int fs_rdma_reap(struct fs_rdma *r, uint32_t want)
{
  uint64_t t0 = 0;
  while (r->sq_free < want) {
    int n = fs_rdma_reap_now(r);
    if (n < 0)
      return n;
    if (n == 0) {
      r->n_reap_wait++;
      if (!t0)
        t0 = fs_clock_us();
      else if (fs_clock_us() - t0 > FS_RDMA_REAP_US) {
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
static int fs_rdma_post(struct fs_rdma *r, struct ibv_send_wr *wr, int n, bool signal)
{
  if (__atomic_load_n(&r->dead, __ATOMIC_ACQUIRE) || r->foreign)
    return -EPIPE;
  if (fs_rdma_reap(r, (uint32_t)n) < 0)
    return -EIO;
  for (int i = 0; i < n; i++) {
    r->unsig++;
    wr[i].send_flags &= ~(unsigned)IBV_SEND_SIGNALED;
    if (i == n - 1 && (signal || r->unsig >= FS_RDMA_SIGNAL)) {
      wr[i].send_flags |= IBV_SEND_SIGNALED;
      wr[i].wr_id = r->unsig;
      r->unsig = 0;
    }
    wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
  }
  struct ibv_send_wr *bad;
  int rc = ibv_post_send(r->id->qp, wr, &bad);
  if (rc) {
    fs_rdma_die(r, "post send failed", rc);
    return -rc;
  }
  r->sq_free -= (uint32_t)n;
  r->n_post++;
  r->n_wr += (uint64_t)n;
  return 0;
}

static void fs_rdma_wr(struct ibv_send_wr *wr, struct ibv_sge *sge, struct fs_rdma *r, uint32_t src, uint64_t dst,
                       uint32_t len)
{
  memset(wr, 0, sizeof *wr);
  sge->addr = (uintptr_t)r->buf + src;
  sge->length = len;
  sge->lkey = r->mr->lkey;
  wr->sg_list = len ? sge : NULL;
  wr->num_sge = len ? 1 : 0;
  wr->opcode = IBV_WR_RDMA_WRITE;
  wr->wr.rdma.remote_addr = r->raddr + dst;
  wr->wr.rdma.rkey = r->rkey;
  if (len && len <= r->max_inline)
    wr->send_flags = IBV_SEND_INLINE;
}

static void fs_rdma_imm(struct ibv_send_wr *wr, uint32_t kind, uint64_t val)
{
  wr->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr->imm_data = htonl(kind << 30 | ((uint32_t)val & FS_RDMA_IMM_MASK));
}

/* New tx records to the peer (slock held). */
/* Write tx bytes [from, to) to the peer's ring (at most one wrap: two work
 * requests), the DATA immediate with `to` on the last (slock held).  An
 * empty range posts the immediate alone. */
static void fs_rdma_post_range(struct fs_rdma *r, uint64_t from, uint64_t to)
{
  uint32_t off = (uint32_t)(from & (r->size - 1)), len = (uint32_t)(to - from);
  uint32_t first = len < r->size - off ? len : r->size - off;
  struct ibv_send_wr wr[2];
  struct ibv_sge sge[2];
  int n = 1;
  fs_rdma_wr(&wr[0], &sge[0], r, r->size + off, off, first);
  if (len > first)
    fs_rdma_wr(&wr[n++], &sge[1], r, r->size, 0, len - first);
  fs_rdma_imm(&wr[n - 1], FS_RDMA_IMM_DATA, to);
  (void)fs_rdma_post(r, wr, n, false);
}

static void fs_rdma_push(struct fs_rdma *r)
{
  uint64_t from = r->pub_tail, tail = fs_ring_load(&r->ctl[1].tail);
  if (tail == from)
    return;
  /* Before posting: the peer's credit for these bytes may come back before
   * this thread runs again, and is checked against pub_tail. */
  __atomic_store_n(&r->pub_tail, tail, __ATOMIC_RELEASE);
  /* The test seam (FABSOCK_TEST_RDMA_DROP): from the Nth push on, nothing
   * is posted until the stall watch posts it all, as a requester that
   * stalled silently would resend it. */
  static uint32_t pushes;
  uint32_t drop = fs_policy_test_rdma_drop();
  if (__builtin_expect(drop != 0, 0) &&
      (r->test_stall || __atomic_add_fetch(&pushes, 1, __ATOMIC_RELAXED) == drop)) {
    if (!r->test_stall) {
      fs_log(FS_LOG_INFO, "rdma channel %p: pushes from %llu not posted (FABSOCK_TEST_RDMA_DROP)", (void *)r,
             (unsigned long long)from);
      r->stall_from = from;
    }
    r->test_stall = true;
    return;
  }
  fs_rdma_post_range(r, from, tail);
}

/* The stall watch's post (slock held): a zero-length DATA immediate with the
 * published tail.  Records are never written again: the peer rewrites the
 * header of a record it read in part, and the old header would make it
 * read those bytes twice.  Under the test seam, what was held back goes
 * first, as a requester would resend it. */
static void fs_rdma_repush(struct fs_rdma *r)
{
  uint64_t from = r->test_stall ? r->stall_from : r->pub_tail;
  r->test_stall = false;
  fs_rdma_post_range(r, from, r->pub_tail);
}

static void fs_rdma_send_credit(struct fs_rdma *r, uint64_t head)
{
  struct ibv_send_wr wr;
  struct ibv_sge sge;
  fs_rdma_wr(&wr, &sge, r, 0, 0, 0);
  fs_rdma_imm(&wr, FS_RDMA_IMM_CREDIT, head);
  if (fs_rdma_post(r, &wr, 1, false) == 0)
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
 * the rest, crosses the next eighth. */
static void fs_rdma_credit(struct fs_chan *ch)
{
  struct fs_rdma *r = (struct fs_rdma *)ch;
  uint64_t head = __atomic_load_n(&r->ctl[0].head, __ATOMIC_ACQUIRE);
  if (head - __atomic_load_n(&r->cred_head, __ATOMIC_RELAXED) < r->size / 8)
    return;
  fs_lock(&r->slock);
  head = __atomic_load_n(&r->ctl[0].head, __ATOMIC_ACQUIRE);
  if (head - r->cred_head >= r->size / 8)
    fs_rdma_send_credit(r, head);
  fs_unlock(&r->slock);
}

static uint32_t fs_rdma_my_flags(struct fs_rdma *r)
{
  return (__atomic_load_n(&r->ep[0].closed, __ATOMIC_ACQUIRE) ? FS_RDMA_FLAG_CLOSED : 0) |
         (__atomic_load_n(&r->ep[0].rx_revert, __ATOMIC_ACQUIRE) ? FS_RDMA_FLAG_RX_REVERT : 0) |
         (__atomic_load_n(&r->ep[0].attached, __ATOMIC_ACQUIRE) ? FS_RDMA_FLAG_ATTACHED : 0);
}

/* After publishing or a change of my flags: records first, then (on an rx
 * revert) where my reading stopped, then the flags. */
static void fs_rdma_wake_peer(struct fs_chan *ch)
{
  struct fs_rdma *r = (struct fs_rdma *)ch;
  if (r->foreign)
    return;
  fs_lock(&r->slock);
  fs_rdma_push(r);
  uint32_t f = fs_rdma_my_flags(r);
  if (f != r->flags_sent) {
    if ((f & FS_RDMA_FLAG_RX_REVERT) && !(r->flags_sent & FS_RDMA_FLAG_RX_REVERT)) {
      uint64_t head = __atomic_load_n(&r->ctl[0].head, __ATOMIC_ACQUIRE);
      if (fs_ring_load(&r->ctl[0].tail) != head) { /* the record at head, maybe half read */
        struct ibv_send_wr wr;
        struct ibv_sge sge;
        uint32_t off = (uint32_t)(head & (r->size - 1));
        fs_rdma_wr(&wr, &sge, r, off, (uint64_t)r->size + off, FS_RING_HDR);
        (void)fs_rdma_post(r, &wr, 1, false);
      }
      fs_rdma_send_credit(r, head);
    }
    struct ibv_send_wr wr;
    struct ibv_sge sge;
    fs_rdma_wr(&wr, &sge, r, 0, 0, 0);
    fs_rdma_imm(&wr, FS_RDMA_IMM_FLAGS, f);
    if (fs_rdma_post(r, &wr, 1, false) == 0)
      r->flags_sent = f;
  }
  fs_unlock(&r->slock);
}

/* ---- completions -------------------------------------------------------- */

static void fs_rdma_repost(struct fs_rdma *r, uint32_t n)
{
  struct ibv_recv_wr wr[FS_RDMA_REPOST], *bad;
  while (n > 0) {
    uint32_t k = n < FS_RDMA_REPOST ? n : FS_RDMA_REPOST;
    for (uint32_t i = 0; i < k; i++)
      wr[i] = (struct ibv_recv_wr){ .wr_id = 0, .next = i + 1 < k ? &wr[i + 1] : NULL, .sg_list = NULL, .num_sge = 0 };
    if (ibv_post_recv(r->id->qp, wr, &bad)) {
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
    if (t - __atomic_load_n(&r->ctl[0].head, __ATOMIC_ACQUIRE) > r->size) {
      fs_rdma_die(r, "peer wrote past the ring", 0);
      return;
    }
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
    if (v & FS_RDMA_FLAG_ATTACHED)
      __atomic_store_n(&r->ep[1].attached, 1, __ATOMIC_RELEASE);
    if (v & FS_RDMA_FLAG_RX_REVERT)
      __atomic_store_n(&r->ep[1].rx_revert, 1, __ATOMIC_RELEASE);
    if (v & FS_RDMA_FLAG_CLOSED)
      __atomic_store_n(&r->ep[1].closed, 1, __ATOMIC_RELEASE);
    break;
  default:
    fs_rdma_die(r, "unknown immediate", (int)imm);
  }
}

/* Wake this end's sleepers: write the connection's wake eventfd (it goes
 * away under slock, in fs_rdma_release). */
static void fs_rdma_wake_local(struct fs_rdma *r)
{
  fs_lock(&r->slock);
  if (r->ch.my_efd >= 0)
    fs_chan_efd_write(r->ch.my_efd);
  fs_unlock(&r->slock);
}

/* Take in what the receive queue holds now (`polling` held); true if this
 * end has a thread to wake for it. */
static bool fs_rdma_take_all(struct fs_rdma *r)
{
  struct ibv_wc wc[16];
  int n;
  uint64_t took = 0;
  while ((n = ibv_poll_cq(r->rcq, 16, wc)) > 0) {
    took += (uint64_t)n;
    for (int i = 0; i < n && !r->dead; i++) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        fs_rdma_die(r, FS_VERBS(ibv_wc_status_str)(wc[i].status), wc[i].status);
        break;
      }
      if (!(wc[i].wc_flags & IBV_WC_WITH_IMM)) {
        fs_rdma_die(r, "receive without immediate", 0);
        break;
      }
      fs_rdma_take(r, ntohl(wc[i].imm_data));
    }
    r->rq_used += (uint32_t)n;
    r->n_cqe += (uint64_t)n;
    if (n < 16)
      break;
  }
  if (n < 0)
    fs_rdma_die(r, "recv cq poll failed", n);
  if (r->rq_used >= FS_RDMA_REPOST && !r->dead) {
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

/* ---- a silent stall ------------------------------------------------------
 * A guard against a stall without an error: a requester that stops sending,
 * a lost immediate or credit.  RC loses nothing on working hardware, but a
 * hang is the one outcome that must never be.  (It does not end the stall
 * t2_hosts sees after a link outage, where both queue pairs are in RTS with
 * their PSNs in sync: open, docs/design.md.)  So while bytes published here
 * are not credited back and nothing comes in, the published tail is
 * announced again (a zero-length DATA immediate): after 1 s of quiet, then
 * 2, 4, ... 64 s.  A new post restarts a
 * stalled requester (the responder's sequence NAK makes it resend what it
 * holds, and RC places those writes before this immediate); an immediate
 * that was lost is replaced; one that repeats the peer's tail moves nothing,
 * except that the peer answers it with its credit, which may be what was
 * lost.  Runs in the poller (`polling` held): no credit comes in meanwhile. */
#define FS_RDMA_STALL_NS 1000000000ull
#define FS_RDMA_STALL_MAX_NS 64000000000ull

static void fs_rdma_watch(struct fs_rdma *r, bool took)
{
  if (took) {
    r->quiet_ns = 0;
    r->stall_ns = FS_RDMA_STALL_NS;
    return;
  }
  if ((++r->quiet_looks & 63) != 0) /* a spinning waiter looks often: the clock at every 64th */
    return;
  uint64_t now = fs_clock_coarse_ns();
  if (r->quiet_ns == 0 || r->dead) {
    r->quiet_ns = now;
    if (r->stall_ns == 0)
      r->stall_ns = FS_RDMA_STALL_NS;
    return;
  }
  if (now - r->quiet_ns < r->stall_ns)
    return;
  r->quiet_ns = now;
  uint64_t head = __atomic_load_n(&r->ctl[1].head, __ATOMIC_ACQUIRE);
  uint64_t pub = __atomic_load_n(&r->pub_tail, __ATOMIC_ACQUIRE);
  if (pub == head || __atomic_load_n(&r->ep[1].closed, __ATOMIC_ACQUIRE))
    return; /* nothing of ours the peer could be missing */
  fs_log(FS_LOG_INFO, "rdma channel %p: %llu bytes published and not credited, %llu ms without a completion: "
         "tail announced again", (void *)r, (unsigned long long)(pub - head), (unsigned long long)(r->stall_ns / 1000000u));
  r->stall_ns = r->stall_ns * 2 < FS_RDMA_STALL_MAX_NS ? r->stall_ns * 2 : FS_RDMA_STALL_MAX_NS;
  fs_lock(&r->slock);
  fs_rdma_push(r);
  fs_rdma_repush(r);
  fs_unlock(&r->slock);
}

/* Become the thread taking in receive completions, if nobody is. */
static inline bool fs_rdma_poll_begin(struct fs_rdma *r)
{
  return !__atomic_load_n(&r->polling, __ATOMIC_RELAXED) && !__atomic_exchange_n(&r->polling, 1, __ATOMIC_ACQUIRE);
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

/* Clear the completion channel, then ask for an event on the next receive. */
static void fs_rdma_drain(struct fs_chan *ch)
{
  struct fs_rdma *r = (struct fs_rdma *)ch;
  if (r->foreign)
    return;
  struct ibv_cq *cq;
  void *ctx;
  int saved = errno;
  while (FS_VERBS(ibv_get_cq_event)(r->cc, &cq, &ctx) == 0)
    FS_VERBS(ibv_ack_cq_events)(cq, 1);
  errno = saved;
}

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
  fs_lock(&r->slock); /* fs_rdma_peer_gone may be writing it */
  r->ch.my_efd = -1;               /* the connection closes it next: never again */
  fs_unlock(&r->slock);
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

static int fs_rdma_qp(struct fs_rdma *r)
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

int fs_rdma_new(struct rdma_cm_id *id, uint32_t size, int side, int my_efd, struct fs_rdma **out)
{
  struct fs_rdma *r;
  if (posix_memalign((void **)&r, 64, sizeof *r) != 0)
    return -ENOMEM;
  memset(r, 0, sizeof *r);
  fs_lock_init(&r->slock);
  r->id = id;
  r->size = size;
  r->sq_free = FS_RDMA_SQ;
  int rc = 0;
  const char *step = "pd";
  errno = 0;
  if (!(r->pd = fs_rdma_mr_pd(id->verbs)))
    goto fail;
  step = "completion channel";
  if (!(r->cc = FS_VERBS(ibv_create_comp_channel)(id->verbs)))
    goto fail;
  /* Out of the application's low numbers (this is the agent thread), before
   * a CQ names the channel to the kernel: libibverbs only ever uses the
   * number it finds in the (public) struct. */
  r->cc->fd = fs_fdreg_move_high(r->cc->fd);
  step = "cq";
  if (!(r->rcq = FS_VERBS(ibv_create_cq)(id->verbs, FS_RDMA_RQ, r, r->cc, 0)) ||
      !(r->scq = FS_VERBS(ibv_create_cq)(id->verbs, FS_RDMA_SQ, r, NULL, 0)))
    goto fail;
  step = "fcntl";
  int fl = FS_REAL(fcntl)(r->cc->fd, F_GETFL, 0);
  if (fl < 0 || FS_REAL(fcntl)(r->cc->fd, F_SETFL, fl | O_NONBLOCK) < 0)
    goto fail;
  step = "memory registration";
  if ((rc = fs_rdma_mr_get(r->pd, r->size, &r->mr, &r->buf)) < 0) {
    fs_rdma_mr_hint(2 * (size_t)size, rc);
    goto fail;
  }
  step = "queue pair";
  if ((rc = fs_rdma_qp(r)) < 0)
    goto fail;
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
  ch->rx = (struct fs_ring){ &r->ctl[0], r->buf, size, 0, 0 };
  ch->tx = (struct fs_ring){ &r->ctl[1], r->buf + size, size, 0, 0 };
  ch->me = &r->ep[0];
  ch->peer = &r->ep[1];
  ch->my_efd = my_efd;
  ch->wait_fd = r->cc->fd;
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

void fs_rdma_set_peer(struct fs_rdma *r, uint64_t addr, uint32_t rkey)
{
  r->raddr = addr;
  r->rkey = rkey;
}

void fs_rdma_local(const struct fs_rdma *r, uint64_t *addr, uint32_t *rkey)
{
  *addr = (uintptr_t)r->buf;
  *rkey = r->mr->rkey;
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
  if (!r->id || !r->id->qp || r->dead || !r->raddr || r->foreign)
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
         "%llu send-queue waits; tx %llu rx %llu", (void *)r, (unsigned long long)r->n_post,
         (unsigned long long)r->n_wr, (unsigned long long)r->n_cqe, (unsigned long long)r->n_arm,
         (unsigned long long)r->n_reap_wait, (unsigned long long)r->pub_tail, (unsigned long long)r->ctl[0].tail);
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
  if (r->cc) {
    fs_fdreg_set(r->cc->fd, false);
    FS_VERBS(ibv_destroy_comp_channel)(r->cc);
  }
  if (r->mr)
    fs_rdma_mr_put(r->pd, r->size, r->mr, r->buf);
  free(r);
}
