/* Why a connection is not (or no longer) on a fabric.  Shown by `fabsock stat`;
 * the numeric values are part of the stat file format (base/stat.h): append only. */
#ifndef FS_BASE_REASON_H
#define FS_BASE_REASON_H

#define FS_REASONS(X) \
  X(NONE,        "none")            /* on a fabric, or nothing to report */ \
  X(PENDING,     "pending")         /* eligible; upgrade not tried yet (threshold) */ \
  X(POLICY,      "policy")          /* a rule or FABSOCK_TRANSPORT=tcp said tcp */ \
  X(DISABLED,    "disabled")        /* FABSOCK_DISABLE=1 or a bad config */ \
  X(NOT_STREAM,  "not-tcp")         /* not an AF_INET/AF_INET6 stream socket */ \
  X(NO_DEVICE,   "no-device")       /* the fabric needs hardware this host lacks */ \
  X(REMOTE_HOST, "remote-host")     /* peer is on another host and rdma is unavailable */ \
  X(NO_PEER,     "peer-no-fabsock") /* nobody answered the rendezvous */ \
  X(REJECTED,    "rejected")        /* the peer refused (policy, no match) */ \
  X(PEER_UID,    "peer-uid")        /* peer runs as another user */ \
  X(NOT_OWNER,   "not-owner")       /* rendezvous listener does not own the peer socket */ \
  X(PROTOCOL,    "protocol")        /* malformed or hostile rendezvous message */ \
  X(VERSION,     "version")         /* peer speaks an unknown wire version */ \
  X(TIMEOUT,     "timeout")         /* the fabric did not come up in time */ \
  X(RESOURCES,   "resources")       /* out of memory, fds, registrations */ \
  X(FORK,        "fork")            /* downgraded before fork; or a child of an rdma process */ \
  X(EXEC,        "exec")            /* downgraded before exec */ \
  X(FD_PASSED,   "fd-passed")       /* sent to another process with SCM_RIGHTS */ \
  X(SOCKOPT,     "sockopt")         /* an option the fabric cannot honour (e.g. OOB) */ \
  X(HOOK,        "hook")            /* a hook closed the connection */ \
  X(ERROR,       "error")           /* an unexpected internal error (logged) */ \
  X(INHERITED,   "inherited")       /* fd inherited from exec: plain TCP */ \
  X(AUTH,        "auth")            /* rdma_key: the peer did not prove the same key */ \
  X(KERNEL_IO,   "kernel-io")       /* splice, tee, copy_file_range, stdio, O_ASYNC: the kernel serves it */ \
  X(IO_URING,    "io-uring")        /* the process set up an io_uring: its rings bypass us */ \
  X(SANDBOX,     "sandbox")         /* the process confined itself (seccomp): only its own calls */ \
  X(PEER_TCP,    "peer-tcp")        /* the peer went back to TCP for good (fd-passed, exec, ...) */ \
  X(CLOSED,      "closed")          /* an end closed the connection while its rendezvous ran */

enum fs_reason {
#define FS_REASON_X_ENUM(id, str) FS_REASON_##id,
  FS_REASONS(FS_REASON_X_ENUM)
#undef FS_REASON_X_ENUM
  FS_REASON_COUNT
};

const char *fs_reason_name(int reason);

#endif
