/* rdma connection management's insides, shared by rdmacm.c (rendezvous,
 * events, housekeeping) and rdmacm_resume.c (resuming a channel on a new
 * queue pair).  Agent lock held for everything here.  Nothing else
 * includes this. */
#ifndef FS_FABRIC_RDMA_RDMACM_INT_H
#define FS_FABRIC_RDMA_RDMACM_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>
#include <stdint.h>
#include <sys/socket.h>

#include "fabric/fabric.h"
#include "fabric/rdma/rdmacm.h"
#include "fabric/rdma/verbs.h"

#define FS_RDMACM_SETUP_MS 10000   /* accepted, waiting for the connection to establish */
#define FS_RDMACM_LINGER_MS 2000   /* retired, our last writes not yet confirmed (a dead peer) */
#define FS_RDMACM_RESUME_LINGER_MS 30000 /* retired while resuming: its last writes wait for the new pair */
#define FS_RDMACM_RESUME_RETRY_MS 500    /* a failed resume attempt is tried again after this, */
#define FS_RDMACM_RESUME_RETRY_MAX_MS 4000 /* doubling up to this, */
#define FS_RDMACM_RESUME_GIVEUP_MS 30000   /* until attempts have failed this long: reset */

enum fs_cm_kind { CM_LISTENER = 1, CM_CLI, CM_SRV, CM_CHAN };

struct fs_cm_item {
  enum fs_cm_kind kind;
  bool held;                    /* CM_SRV: waiting for accept() */
  uint64_t look_ns;             /* CM_SRV held: when to ask again whether its connection ended */
  bool lingering;               /* CM_CHAN: retired, its last writes landing */
  struct rdma_cm_id *id;        /* CHAN: the id the peer knows the channel by */
  struct fs_link *c;            /* LISTENER (NULL: orphan), CLI, SRV: referenced */
  struct fs_rdma *r;            /* CLI, SRV: owned until attached; CHAN: the conn's */
  struct fs_cm_item *listener;  /* SRV: where it came from */
  uint64_t deadline;            /* ns; 0 = none */
  uint32_t ring;
  struct fs_rdmacm_msg req;     /* SRV: the request */
  bool req_mac;                 /* SRV: it carried an authenticator */
  struct fs_rdmacm_wire raw;    /* SRV: the request as received; CLI: as sent (CHAN: the last resume request) */
  struct sockaddr_storage tl, tp; /* CLI, SRV, CHAN: the TCP connection (local, peer) */
  struct sockaddr_storage bound;  /* LISTENER */
  /* CHAN: resuming (rdmacm_resume.c) */
  bool has_key;                 /* the connection's rdma_key, kept from its link */
  uint8_t key[32];
  struct rdma_cm_id *rid;       /* connecting end: the attempt under way */
  uint64_t retry_at;            /* connecting end: next attempt (ns) */
  uint32_t backoff_ms;
  uint64_t resume_since;        /* connecting end: first failed attempt of this resume (ns) */
  struct fs_cm_item *next;
};

/* Zero-initialised (bss), so that the state costs a process that never
 * uses rdma no page: in .data, its 6 KiB put the end of the library's file
 * data on a page of its own, which the loader zeroes the rest of (a page
 * fault at every process start, 25-40 us in a firecracker guest). */
enum { FS_CM_UNPROBED = 0, FS_CM_NO, FS_CM_YES };
struct fs_cm_state {
  int avail;                    /* FS_CM_UNPROBED, FS_CM_NO, FS_CM_YES */
  bool fork_lost;               /* a child of a process that had set rdma up */
  struct rdma_event_channel *ec;
  struct fs_cm_item *items;
  int nheld;                    /* atomic */
  pthread_mutex_t rlock;        /* retired */
  struct fs_rdma **retired;
  size_t nretired, capretired;
  struct fs_rdmacm_seen seen;   /* authenticated requests taken */
  struct ibv_context **devs;    /* librdmacm's devices, held open */
  bool resume_news;             /* atomic: a channel asked for a resume */
  pid_t pid;                    /* the process that set it up (FS_CM_YES) */
};

extern struct fs_cm_state fs_cm_m;

uint64_t fs_cm_wall_ms(void);
/* Refuse a connect request with reason (an FSRJ). */
void fs_cm_reject_id(struct rdma_cm_id *id, int reason);
void fs_cm_reject(struct fs_cm_item *it, int reason);
uint8_t fs_cm_log2(uint32_t v);
/* The reason a refusal's private data gives (no FSRJ: no listener there,
 * FS_REASON_NO_PEER). */
int fs_cm_rej_reason(int status, const uint8_t *pd, size_t len);
/* Our message in w (magic, ring, our TCP port, a region: ours, or for a
 * resume the accepting end's), sealed when key is not NULL over the
 * connection (client, server) and bind; the parameters that send it. */
struct rdma_conn_param fs_cm_param(struct fs_rdmacm_wire *w, uint32_t magic, uint8_t ring_log2, uint16_t port,
                                   uint64_t addr, uint32_t rkey, bool whole, const uint8_t *key,
                                   const struct sockaddr *client, const struct sockaddr *server, const uint8_t *bind);

/* rdmacm_resume.c */
/* A listener's connect request that is a resume (magic FSRR). */
void fs_cm_resume_request(struct rdma_cm_id *id, const uint8_t *pd, size_t len);
/* A cm event on a channel's item (an id it owns). */
void fs_cm_chan_event(struct fs_cm_item *it, enum rdma_cm_event_type type, int status, struct rdma_cm_id *id,
                      const uint8_t *pd, size_t len);
/* Tick: start or retry the resumes asked for. */
void fs_cm_resume_tick(uint64_t now);
/* ms until a resume attempt is due (-1: none). */
int fs_cm_resume_next_ms(uint64_t now);
/* A channel's item goes: its resume ids too (not the channel's own). */
void fs_cm_resume_forget(struct fs_cm_item *it);

#endif
