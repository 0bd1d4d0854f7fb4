/* A TCP socket of this host looked up by its addresses (NETLINK_SOCK_DIAG). */
#ifndef FS_FABRIC_DIAG_H
#define FS_FABRIC_DIAG_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

/* Look up the local socket whose local address is `local` and peer `peer`
 * (NETLINK_SOCK_DIAG exact match).  0 and *uid (and *inode, if not NULL: 0
 * when no process holds the socket any more, or none has accepted it yet;
 * *state, if not NULL: its TCP state, TCP_ESTABLISHED ...) on success,
 * -ENOENT if none. */
int fs_diag_lookup(const struct sockaddr *local, const struct sockaddr *peer, uint32_t *uid, uint32_t *inode,
                   uint8_t *state);

/* Did the connection fs_diag_lookup looked up end, from what it returned
 * (rc, inode, state)?  Gone (-ENOENT); or no process holds it (inode 0) in
 * a closing state: it will never be accepted or used again (inode 0 in
 * ESTABLISHED or CLOSE_WAIT is also a socket still in an accept queue).
 * accepted: it is known to have been accepted, so a lookup that fell
 * through to the listener on its port (state LISTEN: the kernel's lookup
 * matches listeners too) means its socket is gone; before that, it may
 * mean a connection the listener has not made yet (a SYN cookie's ACK
 * dropped on a full accept queue: the client retransmits). */
bool fs_diag_ended(int rc, uint32_t inode, uint8_t state, bool accepted);

/* A held request's look: has the connection it names (our end: local,
 * peer) ended, not yet known to be accepted?  A netlink query at most every
 * 50 ms (*look_ns: when the next may go; 0 at first); false in between.
 * *inode (if not NULL): the socket's inode where a look found it alive (0:
 * no look, or none holds it yet), for whoever asks who holds it.
 * Held to their deadline (2 s), a connection per request upgrading at once
 * filled shm's listener slots with requests that could never match, each
 * looked for in the fd table on every tick. */
bool fs_diag_ended_look(const struct sockaddr *local, const struct sockaddr *peer, uint64_t *look_ns,
                        uint32_t *inode);

#endif
