/* Socket options that change what a fabric must do: SO_LINGER {1, 0} (an
 * abort), SO_OOBINLINE (stays on TCP), SO_SNDBUF / SO_RCVBUF (the tx ring
 * buffers no more than kernel TCP would), SO_RCVLOWAT (readiness and reads
 * wait for that many bytes, engine/sockio.c); and TCP_CORK, which a fabric
 * has no use for (kept, not passed on, while tx is on one).  And the
 * FIONREAD ioctl, which a fabric answers from its ring. */
#ifndef FS_ENGINE_SOCKOPT_H
#define FS_ENGINE_SOCKOPT_H

#include <sys/socket.h>

#include "engine/conn.h"

/* Before the application's setsockopt reaches the kernel: true if it is
 * answered here (0, nothing done): TCP_CORK while tx is on a fabric. */
bool fs_sockopt_set_here(struct fs_conn *c, int level, int name, const void *val, socklen_t len);

/* After the application's getsockopt succeeded: TCP_CORK as it set it. */
void fs_sockopt_get(struct fs_conn *c, int level, int name, void *val, const socklen_t *len);

/* A send on TCP is coming (cork_app != cork_kernel): give the kernel the
 * application's TCP_CORK first, unless tx is on a fabric. */
void fs_sockopt_cork_sync(struct fs_conn *c, int fd);

/* tx has just moved onto a fabric (its SWITCH is written, tx lock held):
 * the last bytes sent on TCP may still wait in the kernel under the
 * application's cork or a MSG_MORE (up to 200 ms), and the peer reads TCP
 * up to the SWITCH's count before it reads the ring.  Push them out; the
 * cork stays the application's (cork_app). */
void fs_sockopt_switch_push(struct fs_conn *c);

/* After the application's setsockopt succeeded on a tracked socket. */
void fs_sockopt_set(struct fs_conn *c, int fd, int level, int name, const void *val, socklen_t len);

/* c was just accepted from listener lc: the kernel copied lc's buffer sizes
 * and timeouts to it, and so does this. */
void fs_sockopt_inherit(struct fs_conn *c, const struct fs_conn *lc);

/* Is this (successful) setsockopt one whose effect the kernel alone gives,
 * so that the connection must go back to TCP for good (fs_sock_to_kernel,
 * kernel-io)?  SO_ZEROCOPY on (MSG_ZEROCOPY's completions come on the
 * kernel's error queue: a send to a ring never got one, and the program
 * waited for it), timestamping (SO_TIMESTAMP*: stamps on the kernel's
 * packets and error queue), SO_PEEK_OFF (peeks from an offset). */
bool fs_sockopt_kernel_only(int level, int name, const void *val, socklen_t len);

/* Set ch's tx cap from our SO_SNDBUF and the peer's SO_RCVBUF (either set
 * by an application), as kernel TCP would buffer; none if neither.  Under
 * the tx lock, or before anyone sends. */
void fs_sockopt_buf_cap(struct fs_conn *c, struct fs_chan *ch);

/* ch is being put on c: publish our SO_RCVBUF to the peer, cap our tx. */
void fs_sockopt_attach(struct fs_conn *c, struct fs_chan *ch);

/* FIONREAD on connection c (socket fd) with a channel; -ENOTSUP means
 * ask the kernel. */
int fs_sockopt_fionread(struct fs_conn *c, int fd, int *out);

#endif
