/* Socket engine, data half: send/recv over TCP or a fabric channel, the
 * SWITCH/REVERT cutover, and blocking (spin, then sleep). */
#ifndef FS_ENGINE_SOCKIO_H
#define FS_ENGINE_SOCKIO_H

#include <stdbool.h>

#include "fabric/chan.h"
#include "engine/conn.h"

/* Connection-level readiness for poll/epoll on a connection with a channel
 * (POLLIN/POLLOUT/POLLRDHUP/POLLHUP/POLLERR bits), given what the kernel
 * said about the TCP socket.  arm: declare interest so the peer wakes us. */
short fs_sockio_ready(struct fs_conn *c, struct fs_chan *ch, short want, short kernel, bool arm);

#endif
