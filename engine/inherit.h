/* Listening sockets a process was handed rather than made. */
#ifndef FS_ENGINE_INHERIT_H
#define FS_ENGINE_INHERIT_H

#include "engine/conn.h"

/* accept() returned a connection on fd, a descriptor the fd table does not
 * know.  The first time, adopt the listeners a service manager passed
 * (LISTEN_FDS/LISTEN_PID: systemd, systemd-socket-activate), so that they
 * serve the rendezvous as if this process had called listen(); then return
 * fd's connection (referenced) if fd was one of them, else NULL.  After the
 * first call: one load, NULL. */
struct fs_conn *fs_inherit_listener(int fd);

#endif
