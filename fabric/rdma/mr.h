/* Registered ring memory of the rdma fabric: one protection domain per
 * device (for the device's lifetime), and ring regions of 2 * size bytes
 * (rx then tx) registered once and kept for reuse, since a registration
 * costs far more than a connection's other set-up.  Regions count against
 * RLIMIT_MEMLOCK: a refusal for want of it is explained once in the log. */
#ifndef FS_FABRIC_RDMA_MR_H
#define FS_FABRIC_RDMA_MR_H

#include <stddef.h>
#include <stdint.h>

#include "fabric/rdma/verbs.h"

/* The device's protection domain, allocated at first use; NULL on failure. */
struct ibv_pd *fs_rdma_mr_pd(struct ibv_context *ctx);

/* A registered region of 2 * size bytes: from the pool if one fits, else new.
 * 0, or -errno (the registration's, e.g. -ENOMEM past RLIMIT_MEMLOCK, which
 * is explained once in the log; -ENOMEM too where the application's
 * address space would be left short: base/proc.h, fs_proc_as_room). */
int fs_rdma_mr_get(struct ibv_pd *pd, uint32_t size, struct ibv_mr **mr, uint8_t **buf);

/* Give a region back: kept for the next connection, or deregistered. */
void fs_rdma_mr_put(struct ibv_pd *pd, uint32_t size, struct ibv_mr *mr, uint8_t *buf);

#endif
