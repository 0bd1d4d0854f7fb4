/* Completion channels.  A channel (an fd) per rdma connection made 1,000
 * connections hold 1,000 of them beside their sockets (and as many wake
 * eventfds).  So only the first FABSOCK_RDMA_OWN_CHANNELS (16) channels of a
 * process at a time have one of their own (fs_chan.wait_fd, which its waiters sleep on,
 * and the connection's wake eventfd, as before); the rest share one per
 * device, which the agent watches (host->watch): for each event it wakes
 * the channel named by the CQ's context the way its waiters sleep
 * (fs_rdma_wake_local: the connection's door, or its wake eventfd).  Such
 * a channel has no event fd (wait_fd -1): its waiters arm the CQ and sleep
 * on the door, and the engine treats it as it treats shm.  The price is a
 * thread hop per wake that ends a sleep (the agent's, then the waiter's):
 * under Soft-RoCE in the VM a blocking 64 B ping-pong's p50 45 -> 256 us
 * when every channel shared (docs/design.md 1.7), hence the first ones
 * keep theirs.  A fixed share, not a budget: the descriptors no longer
 * grow with the connections. */
#ifndef FS_FABRIC_RDMA_CQ_H
#define FS_FABRIC_RDMA_CQ_H

#include "fabric/rdma/verbs.h"

/* A channel of its own for ctx's next CQ (agent thread), or NULL: the
 * process has its share of them (or none could be made). */
struct ibv_comp_channel *fs_rdma_cc_own(struct ibv_context *ctx);
/* ... destroyed (after its CQ, its events acknowledged), the share freed. */
void fs_rdma_cc_own_free(struct ibv_comp_channel *cc);

/* ctx's shared channel, made and watched at its first use (agent lock
 * held), never closed while the process runs: for each event the agent
 * calls fn with the CQ's context.  NULL with errno on failure. */
struct ibv_comp_channel *fs_rdma_cc_shared(struct ibv_context *ctx, void (*fn)(void *cq_context));

#endif
