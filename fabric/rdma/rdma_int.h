/* The rdma channel's insides, shared by rdma.c (posting, completions, life
 * cycle) and heal.c (the stall watch, and the resume onto a new queue
 * pair).  Nothing else includes this: the rest of the library sees
 * fabric/rdma/rdma.h. */
#ifndef FS_FABRIC_RDMA_RDMA_INT_H
#define FS_FABRIC_RDMA_RDMA_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/lock.h"
#include "fabric/chan.h"
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
  struct ibv_comp_channel *cc;
  struct ibv_cq *rcq, *scq;
  struct ibv_mr *mr;
  uint8_t *buf;
  uint32_t size;
  uint32_t max_inline;
  uint32_t qpn;                     /* the queue pair's number: completions of a replaced one
                                       are told apart by it */
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
  uint64_t n_post, n_wr, n_cqe, n_arm, n_reap_wait, n_resume;
};

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
int fs_rdma_qp(struct fs_rdma *r);
int fs_rdma_reap_now(struct fs_rdma *r);
bool fs_rdma_take_all(struct fs_rdma *r);
void fs_rdma_wake_local(struct fs_rdma *r);

/* heal.c, for rdma.c */
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
