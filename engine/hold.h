/* Hand-over ahead: a peer's rendezvous request for a connection this
 * process accepted (or was forked with) waits (fabric host->hold) until the
 * application first sends, receives or waits on it in this image, hands it
 * on (SCM_RIGHTS: the peer then looks for the process it went to), or a
 * quarter of the set-up bound (policy timeout) has gone by.  Node cluster's
 * primary accepts and hands each connection to a worker without touching
 * it, sshd's child re-execs with the connection it was forked with:
 * attached there first, the hand-over or the exec took it back to TCP for
 * good (fd-passed, exec). */
#ifndef FS_ENGINE_HOLD_H
#define FS_ENGINE_HOLD_H

#include <stdbool.h>

#include "engine/conn.h"

/* Should a request for accepted c wait?  Agent. */
bool fs_hold_request(struct fs_conn *c);

void fs_hold_first_use(struct fs_conn *c);

/* Every send, receive and readiness call on a tracked connection: a load
 * after the first. */
static inline void fs_hold_use(struct fs_conn *c)
{
  if (__builtin_expect(!__atomic_load_n(&c->used, __ATOMIC_RELAXED), 0))
    fs_hold_first_use(c);
}

#endif
