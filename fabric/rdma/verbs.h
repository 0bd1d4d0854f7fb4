/* rdma-core, loaded on first use.
 *
 * libfabsock does not link librdmacm and libibverbs: loading them (and
 * libnl, which they pull in) cost every preloaded process about 0.3 ms at
 * start, rdma or not, for shell scripts and one-shot clients that never
 * reach another host.  The rdma fabric calls them through this table,
 * filled by fs_verbs_load() the first time the fabric is asked whether
 * rdma is available.  The calls that rdma-core inlines (ibv_post_send,
 * ibv_poll_cq, ibv_req_notify_cq, rdma_get_peer_addr, ...) go through the
 * device's own ops and need no entry here. */
#ifndef FS_FABRIC_RDMA_VERBS_H
#define FS_FABRIC_RDMA_VERBS_H

#include <stdbool.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

/* Every symbol used, with its library (ibv: libibverbs.so.1, cm:
 * librdmacm.so.1).  `nm -D --undefined-only libfabsock.so` lists none. */
#define FS_VERBS_LIST(X)          \
  X(ibv, ibv_ack_cq_events)        \
  X(ibv, ibv_alloc_pd)             \
  X(ibv, ibv_create_comp_channel)  \
  X(ibv, ibv_create_cq)            \
  X(ibv, ibv_dereg_mr)             \
  X(ibv, ibv_destroy_comp_channel) \
  X(ibv, ibv_destroy_cq)           \
  X(ibv, ibv_free_device_list)     \
  X(ibv, ibv_get_cq_event)         \
  X(ibv, ibv_get_device_list)      \
  X(ibv, ibv_reg_mr)               \
  X(ibv, ibv_wc_status_str)        \
  X(cm, rdma_accept)               \
  X(cm, rdma_ack_cm_event)         \
  X(cm, rdma_bind_addr)            \
  X(cm, rdma_connect)              \
  X(cm, rdma_create_event_channel) \
  X(cm, rdma_create_id)            \
  X(cm, rdma_create_qp)            \
  X(cm, rdma_destroy_event_channel)\
  X(cm, rdma_destroy_id)           \
  X(cm, rdma_destroy_qp)           \
  X(cm, rdma_disconnect)           \
  X(cm, rdma_event_str)            \
  X(cm, rdma_get_cm_event)         \
  X(cm, rdma_get_devices)          \
  X(cm, rdma_listen)               \
  X(cm, rdma_reject)               \
  X(cm, rdma_resolve_addr)         \
  X(cm, rdma_resolve_route)

struct fs_verbs {
#define FS_VERBS_FIELD(lib, name) __typeof__(name) *name;
  FS_VERBS_LIST(FS_VERBS_FIELD)
#undef FS_VERBS_FIELD
};

extern struct fs_verbs fs_verbs;

/* The rdma-core function `name`; only after fs_verbs_load() returned 0. */
#define FS_VERBS(name) (fs_verbs.name)

/* Load both libraries and resolve every symbol, once (later calls return
 * the first result).  0, or -ENOENT when either library or any symbol is
 * missing (logged once at info level): rdma is then unavailable. */
int fs_verbs_load(void);

/* Does sysfs list an rdma device (an entry of /sys/class/infiniband_verbs)?
 * Asked before fs_verbs_load, which loads libibverbs, librdmacm, libnl and
 * every provider library: a process that has them mapped pays for them in
 * every fork and at every child's exit (their destructors, their mappings),
 * and on a host without rdma that buys nothing.  False only when the
 * directory is missing or empty; an unreadable one leaves it to rdma-core. */
bool fs_verbs_device_listed(void);
/* The number of uverbs devices listed in dir (entries other than
 * abi_version), 0 if it is missing, or -errno. */
int fs_verbs_devices_in(const char *dir);

#endif
