/* The rdma channel heals itself (fabric/rdma/rdma_int.h; design:
 * docs/design.md, "A broken or wedged queue pair").
 *
 * The stall watch.  RC loses nothing on working hardware, but a hang is the
 * one outcome that must never be, and Soft-RoCE after a link outage can
 * leave a queue pair in RTS whose sends never leave (t2_hosts: the
 * requester 33 packets ahead of what the responder accepted, no
 * retransmission, no error), or the peer's pair failed and answers nothing.
 * So whenever a thread waits on the channel (polls it) and nothing comes
 * in, the poller looks after 1 s of quiet, then 2, 4, ... 64 s.  Each look
 * posts one signalled probe: the published tail announced again (a
 * zero-length DATA immediate) when the peer has not credited all of it,
 * else a zero-length write, which only its NIC sees.  An announce replaces
 * a lost immediate, and the peer answers a repeated one with its credit,
 * which may be what was lost.  A probe not complete at the next look means
 * no queue pair moves: the channel resumes.  Cost: one work request per
 * look, only while someone waits and nothing comes.
 *
 * The resume (the rdma_cm half is fabric/rdma/rdmacm_resume.c).  An end
 * whose queue pair failed (a completion in error, a post refused while the
 * link is down, a send queue stuck for FS_RDMA_REAP_US) or is wedged stops
 * posting (ASKED).  The connecting end opens a new rdma_cm connection to
 * the peer's listener with a resume request; the accepting end disconnects
 * its pair, whose DISCONNECTED makes the connecting end do the same.  Each
 * end moves the channel onto the new queue pair (SWAPPED: same rings, same
 * completion queues, so waiters and epoll sets never notice) and, once it
 * is connected (UP), posts first RESUME with its rx tail, then its credit
 * and flags.  The peer's RESUME says where that ring stands: this end
 * writes its records again from there (its tx ring still holds them: they
 * are not credited) and pushes go on (NONE).  A reader never reads at or
 * past its tail, so writing those bytes twice changes nothing, and nothing
 * below a tail is ever written again (a reader rewrites the header of a
 * record it read in part).  Completions of the old pair still queued are
 * told apart by queue pair number and dropped: the positions RESUME carries
 * make up for them. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/stat.h"
#include "fabric/rdma/rdma_int.h"
#include "fabric/rdma/rdmacm.h"
#include "policy/policy.h"

#define FS_RDMA_STALL_NS 1000000000ull
#define FS_RDMA_STALL_MAX_NS 64000000000ull

int fs_rdma_side(const struct fs_rdma *r)
{
  return r->ch.side;
}

void fs_rdma_remote(const struct fs_rdma *r, uint64_t *addr, uint32_t *rkey)
{
  *addr = r->raddr;
  *rkey = r->rkey;
}

uint32_t fs_rdma_resume_state(struct fs_rdma *r)
{
  return __atomic_load_n(&r->resume, __ATOMIC_ACQUIRE);
}

/* ---- the stall watch ---------------------------------------------------- */

/* The watch's probe (slock held): signalled, so its completion says the
 * queue pair still moves. */
static void fs_rdma_probe(struct fs_rdma *r, bool announce)
{
  if (announce) {
    /* Under the drop seam, what was held back goes first, as a stalled
     * requester would resend it. */
    uint64_t from = r->test_stall ? r->stall_from : r->pub_tail;
    r->test_stall = false;
    fs_rdma_post_range(r, from, r->pub_tail, true);
  } else {
    struct ibv_send_wr wr;
    struct ibv_sge sge;
    fs_rdma_wr(&wr, &sge, r, 0, 0, 0);
    (void)fs_rdma_post(r, &wr, 1, true);
  }
  r->probe_out = true;
}

/* The chan op settle (fabric/chan.h).  An RC queue completes in order, so
 * a signalled no-op posted behind our records completes only once they
 * all landed in the peer's memory; and the responder queues the
 * completion of a write with immediate before it acknowledges it (as
 * Soft-RoCE does; the verbs promise placement), so the peer's next
 * progress finds them.  The wait spins with slock held, as a full send
 * queue's does: a REVERT is rare, and its round trip is the price of
 * TCP bytes that cannot overtake the SWITCH.  A queue pair being
 * replaced, or one that does not move within FS_RDMA_SETTLE_US, is left
 * to the resume and the stall watch. */
#define FS_RDMA_SETTLE_US 1000000u
void fs_rdma_settle(struct fs_chan *ch)
{
  struct fs_rdma *r = fs_rdma_of(ch);
  if (!r || r->foreign)
    return;
  fs_lock(&r->slock);
  fs_rdma_push(r);
  uint64_t t0 = 0;
  if (fs_rdma_resume_state(r) == FS_RDMA_RS_NONE && !__atomic_load_n(&r->dead, __ATOMIC_ACQUIRE)) {
    /* Signalled, it retires every send before it: the queue is empty
     * (sq_free whole) once all completed; nobody else posts meanwhile. */
    fs_rdma_probe(r, false);
    while (r->sq_free < FS_RDMA_SQ && !__atomic_load_n(&r->dead, __ATOMIC_ACQUIRE) && !fs_rdma_pairless(r)) {
      int n = fs_rdma_reap_now(r);
      if (n < 0)
        break;
      if (n > 0)
        continue;
      if (!t0) {
        t0 = fs_clock_us();
      } else if (fs_clock_us() - t0 > FS_RDMA_SETTLE_US) {
        fs_log(FS_LOG_INFO, "rdma channel %p: our last writes not complete in %u ms; tcp goes on", (void *)r,
               FS_RDMA_SETTLE_US / 1000u);
        break;
      }
      sched_yield();
    }
  }
  fs_unlock(&r->slock);
}

void fs_rdma_watch(struct fs_rdma *r, bool took)
{
  uint64_t head = __atomic_load_n(&r->ctl[1].head, __ATOMIC_ACQUIRE);
  if (took) {
    r->quiet_ns = 0;
    if (head != r->watch_head || !r->probe_out) { /* progress: start over */
      r->watch_head = head;
      r->stall_ns = FS_RDMA_STALL_NS;
    }
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
  if (__atomic_load_n(&r->ep[1].closed, __ATOMIC_ACQUIRE) ||
      __atomic_load_n(&r->resume, __ATOMIC_ACQUIRE) != FS_RDMA_RS_NONE)
    return;
  fs_lock(&r->slock);
  (void)fs_rdma_reap_now(r);
  uint64_t pub = __atomic_load_n(&r->pub_tail, __ATOMIC_ACQUIRE);
  bool owed = pub != head;
  if (r->probe_out) {
    fs_unlock(&r->slock);
    char why[96];
    snprintf(why, sizeof why, "a probe posted %llu ms ago has not completed (queue pair wedged)",
             (unsigned long long)(r->stall_ns / 1000000u));
    (void)fs_rdma_resume_ask(r, why);
    return;
  }
  if (owed)
    fs_log(FS_LOG_INFO, "rdma channel %p: %llu bytes published and not credited, %llu ms without a completion: "
           "tail announced again", (void *)r, (unsigned long long)(pub - head),
           (unsigned long long)(r->stall_ns / 1000000u));
  fs_rdma_probe(r, owed);
  r->stall_ns = r->stall_ns * 2 < FS_RDMA_STALL_MAX_NS ? r->stall_ns * 2 : FS_RDMA_STALL_MAX_NS;
  fs_unlock(&r->slock);
}

/* The test seams (policy.h).  DROP: from the Nth push in this process on,
 * nothing is posted until the watch announces it all.  WEDGE: from the Nth
 * push on, this queue pair takes every post and sends none, until a resume
 * replaces it. */
bool fs_rdma_test_seam(struct fs_rdma *r, uint64_t from)
{
  static uint32_t pushes;
  bool wedge = fs_policy_test_rdma_wedge();
  if (r->test_stall || r->test_wedge)
    return r->test_stall;
  if (__atomic_add_fetch(&pushes, 1, __ATOMIC_RELAXED) != fs_policy_test_rdma_drop())
    return false;
  if (wedge)
    fs_log(FS_LOG_INFO, "rdma channel %p: queue pair wedged from %llu (FABSOCK_TEST_RDMA_WEDGE)", (void *)r,
           (unsigned long long)from);
  else
    fs_log(FS_LOG_INFO, "rdma channel %p: pushes from %llu not posted (FABSOCK_TEST_RDMA_DROP)", (void *)r,
           (unsigned long long)from);
  if (wedge) {
    r->test_wedge = true;
    return false; /* posted, into the void */
  }
  r->stall_from = from;
  r->test_stall = true;
  return true;
}

/* ---- the resume ------------------------------------------------------------ */

bool fs_rdma_resume_ask(struct fs_rdma *r, const char *why)
{
  if (r->foreign || __atomic_load_n(&r->dead, __ATOMIC_ACQUIRE) || __atomic_load_n(&r->ep[1].closed, __ATOMIC_ACQUIRE))
    return false;
  uint32_t rs = __atomic_load_n(&r->resume, __ATOMIC_ACQUIRE);
  do {
    if (rs == FS_RDMA_RS_ASKED)
      return true;
  } while (!__atomic_compare_exchange_n(&r->resume, &rs, FS_RDMA_RS_ASKED, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
  fs_log(FS_LOG_INFO, "rdma channel %p: %s: resuming on a new queue pair", (void *)r, why);
  fs_rdmacm_resume_kick();
  return true;
}

bool fs_rdma_failed(struct fs_rdma *r, const char *why, int status)
{
  if (fs_rdma_pairless(r))
    return true; /* the old pair's flushed work */
  char w[96];
  snprintf(w, sizeof w, "%s (%d)", why, status);
  return fs_rdma_resume_ask(r, w);
}

/* The peer's RESUME is in and ours is out (slock held): write again from
 * where its ring stands, and go on. */
static void fs_rdma_resume_done(struct fs_rdma *r)
{
  r->peer_resumed = false;
  __atomic_store_n(&r->pub_tail, r->peer_tail, __ATOMIC_RELEASE);
  __atomic_store_n(&r->resume, FS_RDMA_RS_NONE, __ATOMIC_RELEASE);
  r->quiet_ns = 0;
  r->stall_ns = FS_RDMA_STALL_NS;
  fs_log(FS_LOG_INFO, "rdma channel %p: resumed; writing again from %llu", (void *)r,
         (unsigned long long)r->peer_tail);
  fs_rdma_push(r);
}

void fs_rdma_take_resume(struct fs_rdma *r, uint32_t v)
{
  fs_lock(&r->slock);
  uint64_t head = __atomic_load_n(&r->ctl[1].head, __ATOMIC_ACQUIRE);
  uint64_t t = fs_rdma_unwrap(head, v);
  uint32_t rs = __atomic_load_n(&r->resume, __ATOMIC_ACQUIRE);
  if (rs == FS_RDMA_RS_NONE || t > __atomic_load_n(&r->pub_tail, __ATOMIC_ACQUIRE)) {
    fs_unlock(&r->slock);
    fs_rdma_die(r, rs == FS_RDMA_RS_NONE ? "a RESUME outside a resume" : "the peer resumed past what we sent", 0);
    return;
  }
  r->peer_tail = t;
  r->peer_resumed = true;
  if (rs == FS_RDMA_RS_UP)
    fs_rdma_resume_done(r);
  fs_unlock(&r->slock);
}

/* Become the poller, then the poster (the order fs_rdma_progress takes
 * them in), after taking in what the old pair delivered: nobody touches it
 * meanwhile.  True if a thread of ours is to be woken (fs_rdma_unhold). */
static bool fs_rdma_hold(struct fs_rdma *r)
{
  while (!fs_rdma_poll_begin(r))
    sched_yield();
  bool wake = fs_rdma_take_all(r);
  fs_lock(&r->slock);
  return wake;
}

static void fs_rdma_unhold(struct fs_rdma *r, bool wake)
{
  fs_unlock(&r->slock);
  __atomic_store_n(&r->polling, 0, __ATOMIC_RELEASE);
  if (wake)
    fs_rdma_wake_local(r);
}

/* Destroy the queue pair (held).  Whatever it left in the completion queues
 * (flushed receives, late arrivals, its sends) goes: RESUME makes up for
 * it, and a new pair needs the room. */
static void fs_rdma_destroy_qp(struct fs_rdma *r)
{
  if (r->id && r->id->qp)
    FS_VERBS(rdma_destroy_qp)(r->id);
  struct ibv_wc wc[16];
  while (ibv_poll_cq(r->scq, 16, wc) > 0 || ibv_poll_cq(r->rcq, 16, wc) > 0)
    ;
}

int fs_rdma_swap_qp(struct fs_rdma *r, struct rdma_cm_id *id)
{
  bool wake = fs_rdma_hold(r);
  __atomic_store_n(&r->resume, FS_RDMA_RS_SWAPPED, __ATOMIC_RELEASE);
  r->peer_resumed = false;
  struct rdma_cm_id *old = r->id;
  fs_rdma_destroy_qp(r);
  r->id = id;
  /* Ours go again first on the new pair (the old one may have lost them),
   * but for a handshake's whole key, which the peer has. */
  r->keys_sent = r->whole ? FS_RDMA_K_TX | FS_RDMA_K_FULL : 0;
  r->sq_free = FS_RDMA_SQ;
  r->unsig = 0;
  r->rq_used = 0;
  r->probe_out = false;
  r->test_wedge = false;
  r->linger_posted = false;
  int rc = fs_rdma_qp(r);
  if (rc == 0) {
    r->qpn = id->qp->qp_num;
    fs_rdma_repost(r, FS_RDMA_RQ);
  } else {
    r->id = old; /* id stays the caller's to destroy; the channel has no pair until the next try */
  }
  fs_rdma_unhold(r, wake);
  return rc;
}

void fs_rdma_drop_qp(struct fs_rdma *r)
{
  bool wake = fs_rdma_hold(r);
  if (r->id && r->id->qp && __atomic_load_n(&r->resume, __ATOMIC_ACQUIRE) == FS_RDMA_RS_ASKED) {
    fs_log(FS_LOG_INFO, "rdma channel %p: queue pair destroyed for the peer to resume", (void *)r);
    fs_rdma_destroy_qp(r);
  }
  fs_rdma_unhold(r, wake);
}

void fs_rdma_resumed(struct fs_rdma *r)
{
  fs_lock(&r->slock);
  if (__atomic_load_n(&r->resume, __ATOMIC_ACQUIRE) != FS_RDMA_RS_SWAPPED) {
    fs_unlock(&r->slock);
    return;
  }
  __atomic_store_n(&r->resume, FS_RDMA_RS_UP, __ATOMIC_RELEASE);
  r->n_resume++;
  FS_STAT_ADD(__atomic_load_n(&r->ch.stat, __ATOMIC_ACQUIRE), resumes, 1);
  if (fs_rdma_post_imm(r, FS_RDMA_IMM_RESUME, __atomic_load_n(&r->ctl[0].tail, __ATOMIC_ACQUIRE)) == 0) {
    fs_rdma_send_credit(r, __atomic_load_n(&r->ctl[0].head, __ATOMIC_ACQUIRE));
    r->flags_sent = 0;
    fs_rdma_send_flags(r);
    if (r->peer_resumed)
      fs_rdma_resume_done(r);
  }
  fs_unlock(&r->slock);
  fs_rdma_wake_local(r); /* waiters look again: the peer's RESUME may be in */
}

void fs_rdma_resume_failed(struct fs_rdma *r, const char *why, bool gone)
{
  fs_log(FS_LOG_INFO, "rdma channel %p: no resume (%s): %s", (void *)r, why,
         gone ? "the peer is gone" : "the connection is reset");
  __atomic_store_n(&r->resume, FS_RDMA_RS_NONE, __ATOMIC_RELEASE); /* no more attempts */
  if (gone)
    fs_rdma_peer_gone(r);
  else
    fs_rdma_die(r, why, 0);
}

bool fs_rdma_peer_closed(struct fs_rdma *r)
{
  r->ch.ops->progress(&r->ch);
  return __atomic_load_n(&r->ep[1].closed, __ATOMIC_ACQUIRE) != 0;
}
