/* Socket engine, data half: send/recv over TCP or a fabric channel, the
 * SWITCH/REVERT cutover, and blocking (spin, then sleep). */
#ifndef FS_CORE_SOCKIO_H
#define FS_CORE_SOCKIO_H

#include <stdbool.h>

#include "core/chan.h"
#include "core/conn.h"

/* The connection's live channel, or NULL when it is on TCP (never
 * attached, reverted here, reverted by another process sharing it since
 * fork, or given up by the peer before it attached).  Every path that asks
 * "is this connection on a fabric" asks this. */
struct fs_chan *fs_sockio_chan(struct fs_conn *c);

/* c stays on TCP for good: no channel used again, no upgrade; directions not
 * at EOF read and write TCP; state tcp with reason, fabric tcp in the stats.
 * (The caller has settled what the fabric still held.) */
void fs_sockio_tcp_for_good(struct fs_conn *c, int reason);

/* With c->txlock held: if c has a channel and its tx is still on TCP, write
 * SWITCH(tcp_tx) and move tx to the fabric. */
void fs_sockio_switch_tx(struct fs_conn *c, struct fs_chan *ch);

/* Connection-level readiness for poll/epoll on a connection with a channel
 * (POLLIN/POLLOUT/POLLRDHUP/POLLHUP/POLLERR bits), given what the kernel
 * said about the TCP socket.  arm: declare interest so the peer wakes us. */
short fs_sockio_ready(struct fs_conn *c, struct fs_chan *ch, short want, short kernel, bool arm);

/* Answer a pending peer revert request (see fs_sock_downgrade): queue the
 * re-send of our unread ring bytes on the agent (fs_sockio_resend_job). */
void fs_sockio_service(struct fs_conn *c, int fd);
void fs_sockio_resend_job(struct fs_conn *c);

void fs_sock_maybe_upgrade(struct fs_conn *c);
void fs_sock_check_connected(struct fs_conn *c, int fd);

#endif
