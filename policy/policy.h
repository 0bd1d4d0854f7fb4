/* Per-process policy: environment (FABSOCK_*) and a config file (fabsock.conf(5)).
 *
 * Parsed once into an immutable struct fs_policy; fs_policy_match() is a pure
 * function of that struct and a query, safe from any thread without locks. */
#ifndef FS_POLICY_POLICY_H
#define FS_POLICY_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/hmac.h"

enum fs_fabric { FS_FABRIC_AUTO = 0, FS_FABRIC_RDMA, FS_FABRIC_SHM, FS_FABRIC_TCP };
/* Values are part of the stat file format: append only. */

enum fs_dir { FS_DIR_CONNECT = 1, FS_DIR_ACCEPT = 2 };

#define FS_POLICY_UPGRADE_NEVER UINT64_MAX
/* Default threshold: a short request/reply connection never pays for a
 * rendezvous; anything chatty or streaming upgrades within its first
 * messages. */
#define FS_POLICY_UPGRADE_DEFAULT (4u << 10)
#define FS_POLICY_SPIN_ADAPTIVE (-1)
#define FS_POLICY_HOOKS_MAX 512

struct fs_policy_action {
  enum fs_fabric fabric;   /* auto: first that works (rdma for remote, shm for local) */
  uint64_t upgrade_bytes;  /* upgrade after this many bytes either way; 0 = at once */
  int32_t spin_us;         /* FS_POLICY_SPIN_ADAPTIVE, 0 = sleep at once, >0 = spin bound */
  bool busy_poll;          /* spin 1 ms before each sleep, crowded or not (latency over CPU) */
  uint32_t timeout_ms;     /* bound on a fabric set-up attempt */
  bool any_uid;            /* shm: accept peers of another uid */
  bool has_key;            /* rdma: authenticate the rendezvous with key */
  uint8_t key[FS_HMAC_LEN];/* SHA-256 of the key file (rdma_key=FILE) */
  char hooks[FS_POLICY_HOOKS_MAX]; /* hook spec, FABSOCK_HOOKS syntax; "" = none */
};

struct fs_policy_query {
  const char *program;           /* fs_proc_name(): the name ps shows */
  enum fs_dir dir;
  const struct sockaddr *local;  /* AF_INET or AF_INET6; may be NULL (matches only '*') */
  const struct sockaddr *remote;
};

struct fs_policy;

/* Parse config text.  filename is used in messages only.  On error returns
 * -EINVAL and writes "file:line: message" into err. */
int fs_policy_parse(const char *text, size_t len, const char *filename,
                    struct fs_policy **out, char *err, size_t errlen);

/* Apply FABSOCK_* variables from getenv-like lookup to p's defaults (env
 * overrides the config file's defaults; FABSOCK_TRANSPORT overrides every rule). */
int fs_policy_apply_env(struct fs_policy *p, const char *(*get)(const char *name),
                        char *err, size_t errlen);

void fs_policy_free(struct fs_policy *p);

/* Number of rule statements in p (for diagnostics and tests). */
size_t fs_policy_rule_count(const struct fs_policy *p);

/* First matching rule's action over the defaults. */
void fs_policy_match(const struct fs_policy *p, const struct fs_policy_query *q,
                     struct fs_policy_action *out);

/* The process's policy, loaded on first use from the environment and
 * FABSOCK_CONFIG (or the sysconfdir default if it exists).  Never fails:
 * on a bad config it logs file:line and returns a policy whose every match
 * is fabric=tcp with reason disabled.  *disabled tells which. */
const struct fs_policy *fs_policy_get(bool *disabled);

/* FABSOCK_DISABLE is set: the process runs untouched (no socket tracked). */
bool fs_policy_off(void);

/* Whether any connection of this process may get inspection hooks (the
 * defaults or a rule name some): where none can, a socket still connecting
 * may take its first bytes before it is looked at (engine/sockio.c). */
bool fs_policy_may_hook(void);

/* Whether some rule names a local address or port.  Where none does, every
 * match is the same with a NULL local address: a connecting end then learns
 * its own (getsockname) only when it is about to upgrade (engine/sock.c). */
bool fs_policy_needs_local(void);

/* FABSOCK_SHM_RING in bytes (K/M suffixes), 0 if unset; the fabric checks
 * it against its bounds and uses its default otherwise. */
uint32_t fs_policy_ring_size(void);

/* FABSOCK_DOORBELL (default 1; 0: off): a connection in one epoll set
 * gives its shm peer the set's doorbell instead of a wake eventfd of its
 * own (engine/door.h). */
bool fs_policy_doorbell(void);

/* FABSOCK_KCOPY (default 1; 0: off): a shm ring's ends copy through the
 * kernel while the ring is new (fabric/ring.h, kcopy; base/kcopy.h). */
bool fs_policy_kcopy(void);

/* FABSOCK_RDMA_OWN_CHANNELS (default FS_POLICY_RDMA_OWN_CC): how many rdma
 * connections of the process at a time have a completion channel and a
 * wake eventfd of their own, the rest sharing one per device
 * (fabric/rdma/cq.h). */
#define FS_POLICY_RDMA_OWN_CC 16
uint32_t fs_policy_rdma_own(void);

/* FABSOCK_TEST_RDMA_DROP=N (tests only): the rdma fabric holds back its
 * pushes of records from the Nth in this process on, as a requester that
 * stalled silently would (0: never), until its stall watch posts them.
 * FABSOCK_TEST_RDMA_WEDGE=N (wins over DROP; this returns its N): from the
 * Nth push on, that channel's queue pair takes every post and sends none,
 * as Soft-RoCE's after a link outage, until a resume replaces it. */
uint32_t fs_policy_test_rdma_drop(void);
bool fs_policy_test_rdma_wedge(void);

const char *fs_fabric_name(int fabric);

#endif
