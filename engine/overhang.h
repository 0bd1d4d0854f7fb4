/* TCP bytes read past the peer's SWITCH, kept aside until their turn.
 *
 * A sender that switched and went back at once (SWITCH, a record or two,
 * REVERT: its ring cramped, engine/sock.c fs_sock_revert_tx) writes its
 * next bytes on TCP, and a receiver still on TCP that had not seen the
 * SWITCH when it read may read them: they belong after the ring's records
 * up to the REVERT.  The sender settles its records before those bytes
 * (fabric/chan.h, settle), so a look at the ring right after the read
 * finds the SWITCH; the bytes past it wait here, delivered once rx is
 * back on TCP (fs_sockio_rx_step), before anything the kernel holds.
 * Before this, such a read reset the connection (fs_cutover_read_past). */
#ifndef FS_ENGINE_OVERHANG_H
#define FS_ENGINE_OVERHANG_H

#include <stdbool.h>
#include <sys/types.h>

#include "engine/conn.h"
#include "engine/io.h"
#include "fabric/chan.h"

/* rxlock held, rx on TCP with no SWITCH seen before a TCP read of r > 0
 * bytes into io after `skip`: take the ring's news in, and if a SWITCH(n)
 * heads it now with c->tcp_rx + r > n, keep the bytes past n aside (not
 * for a peek: they stay in the kernel) and count only those before it.
 * The count that stays (0: all were past it: the ring comes first), or
 * -ECONNRESET (nowhere to keep them, or an earlier read went past it:
 * reset, as fs_cutover_read_past). */
ssize_t fs_overhang_split(struct fs_conn *c, struct fs_chan *ch, struct fs_io *io, size_t skip, size_t r,
                          bool peek);

/* rxlock held, rx on TCP, bytes kept aside: up to `want` of them into io
 * after `skip` (consumed unless peek); the count. */
size_t fs_overhang_take(struct fs_conn *c, struct fs_io *io, size_t skip, size_t want, bool peek);

/* Bytes kept aside, as a reader without the lock may ask (poll, FIONREAD). */
static inline size_t fs_overhang_len(const struct fs_conn *c)
{
  return __atomic_load_n(&c->ovh_len, __ATOMIC_ACQUIRE);
}

/* The connection is done: what was kept goes. */
void fs_overhang_free(struct fs_conn *c);

#endif
