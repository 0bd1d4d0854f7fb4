/* The rdma channel's insides, shared by rdma.c (posting, completions, life
 * cycle) and heal.c (the stall watch, and the resume onto a new queue
 * pair).  Nothing else includes this: the rest of the library sees
 * fabric/rdma/rdma.h. */
#ifndef FS_FABRIC_RDMA_RDMA_INT_H
#define FS_FABRIC_RDMA_RDMA_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/bell.h"
#include "base/lock.h"
#include "fabric/chan.h"
#include "fabric/rdma/mr.h"
#include "fabric/rdma/rdma.h"
#include "fabric/rdma/verbs.h"

#define FS_RDMA_SQ 256       /* send queue depth */
#define FS_RDMA_RQ 512       /* receives posted (one per immediate) */
#define FS_RDMA_SIGNAL 64    /* signal one send in this many */
#define FS_RDMA_REPOST 32    /* re-post receives in batches of this many */
#define FS_RDMA_INLINE 256   /* ask for this much inline data: a small message
                                and its record header (a 64 B message is 72 B)
                                go in the work request, not by a DMA read */
#define FS_RDMA_WR_PROBE (1ull << 32) /* wr_id flag: the stall watch's signalled post */

/* Resume states (fs_rdma.resume; written under slock, read atomically). */
enum {
  FS_RDMA_RS_NONE = 0,
  FS_RDMA_RS_ASKED,    /* the queue pair failed or is wedged: nothing is posted; the agent replaces it */
  FS_RDMA_RS_SWAPPED,  /* a new queue pair, not yet connected: nothing is posted */
  FS_RDMA_RS_UP,       /* connected, our RESUME sent: no record goes out before the peer's
                          RESUME says where its ring stands */
};

struct fs_rdma {
  struct fs_chan ch;                /* first: fs_rdma_of() */
  struct fs_ring_ctl ctl[2];        /* [0] rx, [1] tx; local only */
  struct fs_chan_ep ep[2];          /* [0] mine, [1] the peer's as last told */
  struct rdma_cm_id *id;
  struct ibv_pd *pd;
  struct ibv_comp_channel *cc;       /* its own (fs_chan.wait_fd), or NULL: rcq reports to the
                                       device's (fabric/rdma/cq.h) */
  struct ibv_cq *rcq, *scq;
  struct fs_bell_peer *bell;        /* this end's waiters: the connection's door (its slot,
                                       referenced), or ch.my_efd; both let go at release (slock) */
  uint32_t bell_slot;
  struct fs_rdma_region g;           /* our rings (g.buf, g.size) and their registrations */
  uint32_t max_inline;
  uint32_t qpn;                     /* the queue pair's number: completions of a replaced one
                                       are told apart by it */
  uint64_t raddr;
  uint32_t rkey;                    /* its handshake's: the peer's rx page, or its whole region
                                       (FS_RDMACM_F_WHOLE); names the channel in a resume */
  uint32_t rkey_tx, rkey_full;      /* the peer's tx page and whole region, as its immediates said */
  uint32_t keys_known;              /* FS_RDMA_K_*: which of those came; atomic */
  uint32_t key_lo[2];               /* the poller's: low halves so far (fs_rdma_key_take) */
  uint32_t keys_sent;               /* FS_RDMA_K_*: ours sent on this queue pair (slock) */
  bool whole;                       /* our region was whole from the start: our handshake's key
                                       covers it (fs_rdma_local) */
  bool full_failed;                 /* our whole region could not be registered (memlock): the
                                       window stays (slock) */
  bool widen_due;                   /* the peer's whole-region key came before ours was sent:
                                       the poller registers and sends it */
  uint64_t ask_ns;                  /* when our window asked to grow (fs_rdma_ask); 1 once it
                                       opened or the wait ran out; 0 before; atomic */
  bool rx_wide;                     /* the peer has written past our rx page: credits by the
                                       eighth of the ring, not of the page */
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
  uint64_t quiet_ns, stall_ns;      /* the stall watch (heal.c; the poller's) */
  uint32_t quiet_looks;
  bool probe_out;                   /* the watch's signalled post has not completed (slock) */
  uint64_t watch_head;              /* the credited head the watch saw last */
  bool credit_again;                /* the peer repeated a tail: it waits for a credit */
  bool test_stall;                  /* FABSOCK_TEST_RDMA_DROP: pushes not posted (slock) */
  bool test_wedge;                  /* FABSOCK_TEST_RDMA_WEDGE: nothing posted (slock) */
  uint64_t stall_from;              /* ... from this position on */
  uint32_t resume;                  /* FS_RDMA_RS_* */
  bool peer_resumed;                /* the peer's RESUME came (peer_tail), ours maybe not yet */
  uint64_t peer_tail;
  /* counters for the debug log at tear-down (racy increments are fine) */
  uint64_t n_post, n_wr, n_cqe, n_arm, n_event, n_reap_wait, n_resume;
};

#define FS_RDMA_K_TX 1u
#define FS_RDMA_K_FULL 2u

/* No queue pair to post on (ASKED or SWAPPED): the resume replaces it. */
static inline bool fs_rdma_pairless(struct fs_rdma *r)
{
  uint32_t rs = __atomic_load_n(&r->resume, __ATOMIC_ACQUIRE);
  return rs == FS_RDMA_RS_ASKED || rs == FS_RDMA_RS_SWAPPED;
}

/* Become the thread taking in receive completions, if nobody is. */
static inline bool fs_rdma_poll_begin(struct fs_rdma *r)
{
  return !__atomic_load_n(&r->polling, __ATOMIC_RELAXED) && !__atomic_exchange_n(&r->polling, 1, __ATOMIC_ACQUIRE);
}

/* rdma.c, for heal.c */
void fs_rdma_die(struct fs_rdma *r, const char *why, int status);
int fs_rdma_post(struct fs_rdma *r, struct ibv_send_wr *wr, int n, bool signal);
void fs_rdma_wr(struct ibv_send_wr *wr, struct ibv_sge *sge, struct fs_rdma *r, uint32_t src, uint64_t dst,
                uint32_t len);
void fs_rdma_imm(struct ibv_send_wr *wr, uint32_t kind, uint64_t val);
void fs_rdma_post_range(struct fs_rdma *r, uint64_t from, uint64_t to, bool signal);
void fs_rdma_push(struct fs_rdma *r);
/* A zero-length write carrying immediate (kind, val) (slock held): 0 or -errno. */
int fs_rdma_post_imm(struct fs_rdma *r, uint32_t kind, uint64_t val);
void fs_rdma_send_credit(struct fs_rdma *r, uint64_t head);
void fs_rdma_send_flags(struct fs_rdma *r);
void fs_rdma_repost(struct fs_rdma *r, uint32_t n);
/* widen.c: the rings grow.  The region's whole registration and its key
 * sent, if the producer's window asks or the peer's key came (slock held). */
void fs_rdma_widen(struct fs_rdma *r);
/* One of our keys, in two FLAGS immediates (slock held): 0 or -errno. */
int fs_rdma_send_key(struct fs_rdma *r, bool full, uint32_t key);
/* Both whole-region keys there: open the producer's window (slock held). */
void fs_rdma_lift(struct fs_rdma *r);
/* Our window asks to grow (slock held): the whole region registered and
 * its key sent (fs_rdma_widen), and the time noted for fs_rdma_ask_check. */
void fs_rdma_ask(struct fs_rdma *r);
/* The poller: the window still shut FS_RDMA_ASK_MS after it asked makes
 * the channel cramped (fabric/chan.h). */
void fs_rdma_ask_check(struct fs_rdma *r);
/* Half a key of the peer's (the poller). */
void fs_rdma_take_key(struct fs_rdma *r, uint32_t v);
int fs_rdma_qp(struct fs_rdma *r);
int fs_rdma_reap_now(struct fs_rdma *r);
bool fs_rdma_take_all(struct fs_rdma *r);
/* Wake this end's sleepers (any thread; the agent for the device's
 * completion channel, fabric/rdma/cq.c). */
void fs_rdma_wake_local(struct fs_rdma *r);

/* heal.c, for rdma.c */
/* The chan op settle: every record published so far is in the peer's
 * memory and its completion queued there (bounded wait, slock taken). */
void fs_rdma_settle(struct fs_chan *ch);
/* The poller's look after taking completions (took: some came). */
void fs_rdma_watch(struct fs_rdma *r, bool took);
/* The test seams (FABSOCK_TEST_RDMA_DROP, _WEDGE), at a push of tx bytes
 * from `from` on (slock held): true if it must not be posted. */
bool fs_rdma_test_seam(struct fs_rdma *r, uint64_t from);
/* A completion or post failed (status: ibv_wc_status or a post's error):
 * ask for a resume rather than die where the transport, not the peer, is
 * at fault.  True if the channel goes on (a resume is under way). */
bool fs_rdma_failed(struct fs_rdma *r, const char *why, int status);
/* A RESUME immediate from the peer (the poller, `polling` held). */
void fs_rdma_take_resume(struct fs_rdma *r, uint32_t v);

#endif
