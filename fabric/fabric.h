/* The fabric interface: what a fabric is to the engine, and what the
 * engine lends a fabric.
 *
 * A fabric (one folder under fabric/) owns its rendezvous, its wire format
 * and its channel (fabric/chan.h).  The engine knows fabrics only through
 * the registration list (fs_fabrics, fabric/registry.c) and the ops below;
 * it never names one.  A fabric knows a connection only as a struct fs_link
 * and reaches the engine only through struct fs_fabric_host: the arrows
 * point one way (engine -> fabric interface <- fabrics).
 *
 * Every op is filled in; a fabric with nothing to do names an explicit
 * no-op stub (fs_fabric_nop_*), never NULL. */
#ifndef FS_FABRIC_FABRIC_H
#define FS_FABRIC_FABRIC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "policy/policy.h"

struct fs_chan;

/* What a fabric sees of one TCP connection.  The engine's connection
 * object embeds it (FS_LINK_FIELDS, so the engine reads the same fields by
 * name); a fabric holds it only with a reference (host->get/put). */
#define FS_LINK_FIELDS                                                          \
  int fd;                       /* fd it was created on (dups share the link) */ \
  int family;                   /* AF_INET / AF_INET6 */                         \
  int wake_fd;                  /* eventfd woken on fabric events; -1 until   \
                                   made (host->wake, engine/wake.h) */           \
  bool ready;                   /* set up after connect/accept (atomic): until  \
                                   then a rendezvous request for it is held    \
                                   (host->hold) */                              \
  bool listener_shared;         /* listening socket shared with another process */ \
  uint32_t io_max;              /* largest send or receive on TCP before the      \
                                   upgrade (atomic): a fabric may size rings by it */ \
  uint32_t rx_run;              /* bytes received on TCP since our last send,   \
                                   before the upgrade (atomic: a hint) */        \
  uint32_t rx_burst;            /* the most rx_run reached: the peer's largest  \
                                   reply so far, read in however many calls */   \
  struct fs_policy_action policy;                                                \
  struct sockaddr_storage local, peer;

struct fs_link {
  FS_LINK_FIELDS
};

/* The engine's services to fabrics (filled in by the engine, set once with
 * fs_fabric_set_host before any fabric op runs).  The agent is the
 * engine's one background thread: watch/unwatch/kick and every fabric op
 * marked "agent" run with its lock held. */
struct fs_fabric_host {
  void (*get)(struct fs_link *l);
  void (*put)(struct fs_link *l);
  /* A referenced accepted connection with these addresses, or NULL. */
  struct fs_link *(*find)(const struct sockaddr *local, const struct sockaddr *peer);
  /* Connecting end: may l still start a rendezvous (not closed, not given
   * up)?  True also says l's own address is known (learned here, once). */
  bool (*may_upgrade)(struct fs_link *l);
  /* Accepting end: true while a peer's request for l must wait (the fabric
   * asks again at each tick and when the agent is kicked): accept() is
   * still setting l up, or this process has not used l yet and may be
   * about to hand it on (node cluster's primary accepts, a worker serves).
   * Agent.  (shm asks; rdma waits for l->ready alone.) */
  bool (*hold)(struct fs_link *l);
  /* Accepting end: 0 if l may take a channel from a peer of this uid, else a reason. */
  int (*may_attach)(struct fs_link *l, uint32_t uid);
  /* Make l's wake eventfd (l->wake_fd) if it has none yet: a connection
   * gets one only once a rendezvous needs it.  0, or a reason (l then
   * stays on TCP). */
  int (*wake)(struct fs_link *l);
  /* Before wake: may l's peer ring a doorbell of ours instead of a wake
   * fd of l's own (engine/door.h; base/bell.h is the format)?  0 and the
   * bell's eventfd and memfd (lent: sent, never closed) and l's slot in
   * it, or -1: use wake.  Agent. */
  int (*bell)(struct fs_link *l, int *efd, int *memfd, uint32_t *slot);
  /* Put ch on l (0), or -ESTALE if l can no longer take it (the caller drops ch). */
  int (*attach)(struct fs_link *l, struct fs_chan *ch);
  /* The rendezvous failed for good: l stays on TCP with this reason. */
  void (*failed)(struct fs_link *l, int reason);
  /* A peer's request for accepted l was refused: stat shows the reason, but
   * l may still take a later valid one (a forged request must not cost the
   * real one). */
  void (*refused)(struct fs_link *l, int reason);
  /* 0, or the reason this process takes no channel at all any more (it
   * uses io_uring): a request for a connection not found is refused with
   * it at once rather than held for an accept() we may never see. */
  int (*refuse_all)(void);
  /* Agent: run fn(arg) on the agent whenever fd is readable (level-
   * triggered) until unwatch; fn returns true when it may have unwatched
   * fds (the agent then stops its batch: the rest come back).  0 or -errno. */
  int (*watch)(int fd, bool (*fn)(void *arg), void *arg);
  void (*unwatch)(int fd);
  /* Wake the agent (a fabric has news for its tick). */
  void (*kick)(void);
};

extern const struct fs_fabric_host *fs_host;
void fs_fabric_set_host(const struct fs_fabric_host *h);

/* connect's answer when the fabric cannot reach this peer (the next fabric
 * in the list is tried): FS_FABRIC_PASS(reason), reason shown if none can. */
#define FS_FABRIC_PASS(reason) (-(reason))

struct fs_fabric_ops {
  const char *name;
  int id;                         /* enum fs_fabric (policy/policy.h) */
  /* Listening socket l (fd) becomes a rendezvous point on this fabric.
   * Agent (started) lock held.  True if it serves l. */
  bool (*listen)(struct fs_link *l, int fd);
  /* A listening socket is closed (agent lock held). */
  void (*unlisten)(struct fs_link *l);
  /* Agent: this process holds connections it did not accept from a
   * listener it serves (fork, prefork): be reachable for them too.  True if
   * served, or nothing to serve on this fabric (idempotent); false: it
   * failed, ask again later. */
  bool (*serve_proc)(void);
  /* Connecting end, on the agent: start a rendezvous for l.  0: started
   * (the fabric holds l's reference now, and calls host->attach or
   * host->failed later); a reason (> 0): failed for good;
   * FS_FABRIC_PASS(reason): not for this peer, try the next fabric. */
  int (*connect)(struct fs_link *l);
  /* Agent: timers and retries; the ms until the next is due (-1: none). */
  void (*tick)(void);
  int (*next_timeout)(void);
  /* A connection was accepted: true if requests wait for one (poke the agent). */
  bool (*held)(void);
  /* Accepting end, its threshold crossed (the application's thread, so no
   * system call): could a peer with libfabsock reach l on this fabric, as
   * far as one look tells?  shm: the peer's address is a loopback one or
   * l's own (a peer on this host connects from the address it dialled,
   * unless it bound another of ours); rdma: rdma is set up in this
   * process, or not probed yet.  Where none could, l's stat row says
   * remote-host at once rather than pending; a rendezvous that comes all
   * the same still upgrades it. */
  bool (*reachable)(struct fs_link *l);
  /* After fork, in the child (agent lock re-initialised next): forget
   * every rendezvous of the parent; the child has no agent thread. */
  void (*after_fork_child)(void);
  /* The process's effective uid changed (setuid and kin; agent lock held):
   * serve again whatever it serves under credentials taken at the time
   * (a unix listener keeps those of its listen()). */
  void (*creds_changed)(void);
  /* Process exit: may channels of this fabric have writes in flight that
   * the kernel would drop with the process (one load, then a getpid where
   * it was set up: false in a vfork child of the process that did)?  And
   * with the agent lock, let closed ones land them until deadline_ns; true
   * if none waits. */
  bool (*exit_pending)(void);
  bool (*exit_drain)(uint64_t deadline_ns);
};

/* The registration list, in order of preference for auto mode; NULL-ended. */
extern const struct fs_fabric_ops *const fs_fabrics[];

/* The registered fabric with this id, or NULL (not in this build). */
const struct fs_fabric_ops *fs_fabric_by_id(int id);

/* Explicit no-op stubs for ops a fabric has nothing to do in. */
void fs_fabric_nop(void);
bool fs_fabric_nop_false(void);
bool fs_fabric_nop_true(void);
bool fs_fabric_nop_done(uint64_t deadline_ns);
int fs_fabric_nop_timeout(void);
void fs_fabric_nop_unlisten(struct fs_link *l);

#endif
