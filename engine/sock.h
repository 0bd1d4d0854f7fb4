/* The socket engine: what the preload wrappers call for a tracked socket.
 *
 * A tracked socket is an AF_INET/AF_INET6 SOCK_STREAM socket created (or
 * accepted) in this process.  Every entry point returns a count or -errno and
 * leaves errno alone; the wrappers own errno. */
#ifndef FS_ENGINE_SOCK_H
#define FS_ENGINE_SOCK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "engine/conn.h"
#include "engine/io.h"

/* Process-wide set-up, idempotent and cheap after the first call. */
void fs_sock_init(void);

/* socket() succeeded: track fd if it is a TCP stream socket and policy allows. */
void fs_sock_created(int fd, int domain, int type, int protocol);

/* accept()/accept4() on tracked listener lfd returned nfd; peer (plen
 * bytes): the address accept wrote, or NULL (then getpeername tells). */
void fs_sock_accepted(struct fs_conn *lc, int lfd, int nfd, int flags, const struct sockaddr *peer, socklen_t plen);

/* connect() returned rc (0 or -errno) on c, given addr (len bytes). */
void fs_sock_connect_done(struct fs_conn *c, int fd, int rc, const struct sockaddr *addr, socklen_t len);

/* listen() succeeded on c. */
void fs_sock_listening(struct fs_conn *c, int fd);

ssize_t fs_sock_send(struct fs_conn *c, int fd, struct fs_io *io);
ssize_t fs_sock_recv(struct fs_conn *c, int fd, struct fs_io *io);

/* Run io on the kernel socket with the exact libc call it describes. */
ssize_t fs_sock_tcp_io(int fd, struct fs_io *io);

/* shutdown(): honoured on the fabric (EOF record) and on TCP. */
int fs_sock_shutdown(struct fs_conn *c, int fd, int how);

/* close() of fd whose entry was taken from the table (c has that ref). */
void fs_sock_close(struct fs_conn *c, int fd);

/* O_NONBLOCK changed through fcntl/ioctl/accept4/socket. */
void fs_sock_set_nonblock(struct fs_conn *c, bool on);

/* SO_* options the fabric must know about (after a successful setsockopt). */

/* fd is about to leave this process (SCM_RIGHTS) or the image (exec): bring
 * the connection back to plain TCP first. */
void fs_sock_downgrade(struct fs_conn *c, int fd, int reason);
/* From inside send (txlock held), its ring cramped: our tx goes back to TCP
 * for good, behind a REVERT; rx reads the ring on, to the peer's own REVERT
 * or EOF.  Whether tx is on TCP now (the caller sends on there). */
bool fs_sock_revert_tx(struct fs_conn *c, int fd, struct fs_chan *ch, int reason);

/* Process events.  After fork, pid is 0 in the child; in the parent the
 * child's pid, -1 if fork failed, or FS_SOCK_FORK_PID_UNKNOWN for a child
 * whose pid the caller cannot know (a fork made inside libc). */
#define FS_SOCK_FORK_PID_UNKNOWN INT32_MAX
/* pid_known: the caller will learn the child's pid (our fork(), not a fork
 * inside libc). */
void fs_sock_before_fork(bool pid_known);
void fs_sock_after_fork(pid_t pid);
void fs_sock_before_exec(void);
/* An accepted end forked with (shared_hist): does a child this process
 * knows by pid hold it too (engine/sockfork.c)? */
bool fs_sock_forked_hold(struct fs_conn *c);
/* ... whose end crossed its threshold here: the stat table and the
 * process's own name, where its peer finds this process. */
void fs_sock_forked_crossed(void);

/* fd is about to be used by a call the kernel serves on its own (splice,
 * tee, copy_file_range): its bytes must be in the kernel socket, so the
 * connection goes back to TCP, byte-exact, and stays there (kernel-io). */
void fs_sock_to_kernel(struct fs_conn *c, int fd);

/* The same, unless a thread holds a direction's lock past 100 ms (asleep
 * in recv: its peer may wait for what the caller is about to send): false,
 * and the connection stays where it is. */
bool fs_sock_to_kernel_try(struct fs_conn *c, int fd);

/* The process handed its sockets to the kernel behind our back (it set up an
 * io_uring, whose submissions never pass through us): every connection goes
 * back to TCP, byte-exact, and every later one stays there, with this
 * reason; rendezvous requests for connections we never saw are refused at
 * once.  Idempotent. */
void fs_sock_kernel_only(int reason);
/* That reason, or 0. */
int fs_sock_refuse_all(void);

/* sendmsg() on any socket carrying SCM_RIGHTS: downgrade tracked fds in it. */
/* fd (c installed for it) was handed to this process (engine/adopt.c):
 * set it up as an accepted connection others held before us. */
void fs_sock_adopted(struct fs_conn *c, int fd);
/* An accepted end's inode into its stat row, for peers that look for its
 * holder (fstat once; not for one that stays on TCP).  errno kept. */
void fs_sock_publish_ino(struct fs_conn *c, int fd);
/* Within the module (engine/sockfork.c): c's addresses, direction and
 * inode into its stat row. */
void fs_sock_stat_addrs(struct fs_conn *c);
/* Tracking is on (not FABSOCK_DISABLE, policy loaded). */
bool fs_sock_enabled(void);

/* The upgrade threshold may have been crossed: start a rendezvous (connecting
 * end) or give up on a silent peer (accepting end).  The calling thread,
 * whose I/O (or connect) crossed it, marks c for its door first
 * (fs_door_home_claim).  locked: the caller holds c->lock. */
void fs_sock_maybe_upgrade(struct fs_conn *c, bool locked);

/* A non-blocking connect may have completed: set the connection up.
 * out_seen: the kernel reported the socket writable without an error or
 * hang-up (epoll), which only a connected socket is; connect()'s address is
 * then its peer, and no getpeername is needed to find out. */
void fs_sock_check_connected(struct fs_conn *c, int fd, bool out_seen);

/* ---- for the fabrics, through the host table (fabric/fabric.h) ---- */
struct fs_chan;
/* A referenced accepted connection with these addresses, or NULL. */
struct fs_conn *fs_sock_find(const struct sockaddr *local, const struct sockaddr *peer);
/* 0 if c may take a channel from a peer of this uid, else a reason. */
int fs_sock_may_attach(struct fs_conn *c, uint32_t uid);
bool fs_sock_may_upgrade(struct fs_conn *c);
/* Put ch on c (0), or -ESTALE if c can no longer take it (caller drops ch). */
int fs_sock_attach(struct fs_conn *c, struct fs_chan *ch);
void fs_sock_upgrade_failed(struct fs_conn *c, int reason);
/* A peer's rendezvous for accepted c was refused for reason: stat shows it,
 * but c may still take a later valid one (a forged request must not cost
 * the real one). */
void fs_sock_refused(struct fs_conn *c, int reason);
/* The connection's fd count reached zero (from close or a stale entry). */
void fs_sock_last_close(struct fs_conn *c);

#endif
