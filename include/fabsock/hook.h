/* libfabsock inline hook ABI (installed as <fabsock/hook.h>).
 *
 * A hook sees every byte of a connection, in order, exactly once, on every
 * fabric including the TCP fallback.  It is a table of callbacks returned by
 * the one symbol a hook shared object must export:
 *
 *     const struct fabsock_hook_ops *fabsock_hook_entry(void);
 *
 * and is named in FABSOCK_HOOKS (or `hooks="..."` in a config rule) by a path
 * containing '/':  FABSOCK_HOOKS='/opt/hooks/myhook.so:key=val,key2=val2'.
 * Everything after the first ':' (up to the next ';') is passed to open() as
 * `args`, unparsed.  Build one with:
 *
 *     cc -shared -fPIC $(pkg-config --cflags fabsock) -o myhook.so myhook.c
 *
 * Calling contract (what the library guarantees):
 *  - open() is called once per connection, when it is established; `args`
 *    is valid during the call only.  A non-zero return (a negative errno)
 *    fails the whole hook set of that connection (logged; what happens to the
 *    connection then is the library's policy).  *state is handed back to
 *    every callback.  open may be NULL (state is NULL then).
 *  - on_send() sees bytes after the transport accepted them; on_recv() sees
 *    bytes before the application gets them.  Calls of one direction are
 *    serialized; on_send and on_recv may run concurrently on two threads.
 *  - The return value is a verdict: FABSOCK_HOOK_PASS, or FABSOCK_HOOK_CLOSE to
 *    have the connection closed (any other value counts as CLOSE).  After a
 *    CLOSE no further on_send/on_recv calls are made; close() still is.
 *  - reason() (optional, may be NULL) is called right after a CLOSE verdict;
 *    the string it returns is copied into the log line.
 *  - close() (optional) is called once, last.
 *  - Callbacks run inside the application's send/recv calls: they must not
 *    block and must not exit or abort (errno is saved and restored around
 *    them).  on_send/on_recv may be NULL for a direction a hook ignores.
 *
 * Versioning: abi_version must be FABSOCK_HOOK_ABI_VERSION as compiled
 * against.  Future versions only append members to these structs; the library
 * reads no member beyond what the hook's abi_version defines and rejects hooks
 * built for a newer ABI than it knows.  fabsock_conn_info.size is
 * sizeof(struct fabsock_conn_info) of the library that filled it: check it
 * before reading members added later. */
#ifndef FABSOCK_HOOK_H
#define FABSOCK_HOOK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FABSOCK_HOOK_ABI_VERSION 1

/* fabsock_conn_info.fabric */
#define FABSOCK_FABRIC_RDMA 1
#define FABSOCK_FABRIC_SHM 2
#define FABSOCK_FABRIC_TCP 3

/* fabsock_conn_info.dir */
#define FABSOCK_DIR_CONNECT 1
#define FABSOCK_DIR_ACCEPT 2

/* Verdicts */
#define FABSOCK_HOOK_PASS 0
#define FABSOCK_HOOK_CLOSE 1

struct fabsock_conn_info {
  uint32_t size;     /* sizeof(struct fabsock_conn_info) as the library knows it */
  int fd;            /* the application's fd (informational: do not do I/O on it) */
  int family;        /* AF_INET or AF_INET6 */
  int fabric;        /* FABSOCK_FABRIC_*: the fabric when the hook was opened */
  int dir;           /* FABSOCK_DIR_*: we connected, or we accepted */
  struct sockaddr_storage local, peer;
};

struct fabsock_hook_ops {
  uint32_t abi_version;  /* FABSOCK_HOOK_ABI_VERSION */
  const char *name;      /* short name for log lines; may be NULL */
  int (*open)(const char *args, const struct fabsock_conn_info *ci, void **state);
  int (*on_send)(void *state, const void *buf, size_t len);
  int (*on_recv)(void *state, const void *buf, size_t len);
  void (*close)(void *state);
  const char *(*reason)(void *state);  /* why the last verdict was CLOSE */
};

/* The entry point a hook shared object exports. */
typedef const struct fabsock_hook_ops *fabsock_hook_entry_fn(void);
const struct fabsock_hook_ops *fabsock_hook_entry(void);

#ifdef __cplusplus
}
#endif

#endif
