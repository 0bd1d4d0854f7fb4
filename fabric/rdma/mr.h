/* Registered ring memory of the rdma fabric: one protection domain per
 * device (for the device's lifetime), and ring regions of 2 * size bytes
 * (rx then tx), kept for reuse, since a registration costs far more than a
 * connection's other set-up.
 *
 * A region is registered in two steps, because registered memory counts
 * against RLIMIT_MEMLOCK (8 MiB for a non-root user on Debian) and most
 * connections never carry more than a few KiB at a time: at first only each
 * ring's first page (`narrow` bytes; two pages a connection, so a thousand
 * connections fit in 8 MiB), where the producer keeps its records (its ring
 * window, fabric/ring.h); the whole region once the traffic asks for it
 * (fs_rdma_mr_widen).  A refusal for want of locked memory is explained
 * once in the log. */
#ifndef FS_FABRIC_RDMA_MR_H
#define FS_FABRIC_RDMA_MR_H

#include <stddef.h>
#include <stdint.h>

#include "fabric/rdma/verbs.h"

struct fs_rdma_region {
  struct ibv_pd *pd;
  uint8_t *buf;          /* 2 * size bytes, page-aligned */
  uint32_t size;         /* one ring's */
  uint32_t narrow;       /* bytes of each ring the first registrations cover (a page) */
  struct ibv_mr *rx, *tx; /* [0, narrow) and [size, size + narrow) */
  struct ibv_mr *full;   /* [0, 2 * size), once widened; NULL before */
};

/* The device's protection domain, allocated at first use; NULL on failure. */
struct ibv_pd *fs_rdma_mr_pd(struct ibv_context *ctx);

/* A region of 2 * size bytes with its rings' first pages registered: from
 * the pool if one fits (it may be widened already), else new.  0, or
 * -errno (the registration's, e.g. -ENOMEM past RLIMIT_MEMLOCK; -ENOMEM
 * too where the application's address space would be left short:
 * base/proc.h, fs_proc_as_room). */
int fs_rdma_mr_get(struct ibv_pd *pd, uint32_t size, struct fs_rdma_region *g);

/* Register the whole region (no-op if it is): 0 or -errno.  Past the
 * memlock limit the pool's idle widened regions give theirs back first. */
int fs_rdma_mr_widen(struct fs_rdma_region *g);

/* Is registered memory unbounded here (no RLIMIT_MEMLOCK, or CAP_IPC_LOCK)?
 * Then a region is widened at once (fabric/rdma/rdma.c): the peer then
 * never has to answer for its rings to grow, which an end that does not
 * touch its socket (a server busy elsewhere) would not do before it does,
 * while TCP would buffer what the sender writes meanwhile. */
bool fs_rdma_mr_unlimited(void);

/* Give a region back: kept for the next connection, or deregistered. */
void fs_rdma_mr_put(struct fs_rdma_region *g);

#endif
