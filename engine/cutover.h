/* The cutover rules of the engine, each written once.
 *
 * A connection's two directions move between TCP and its fabric channel
 * on records in the rings (fabric/ring.h), never on bytes in the TCP
 * stream:
 *   SWITCH(n)  the sender's next bytes come on the fabric, after exactly n
 *              bytes on TCP: the receiver moves rx over once it has read n.
 *   REVERT(n)  the sender's fabric bytes end here (after n of them): the
 *              rest comes on TCP.
 *   EOF        the sender shut down its direction (after its last bytes).
 * And the rx_revert flag of an end (fabric/chan.h): that end stopped
 * reading its ring at its head; the peer re-sends what it did not read, on
 * TCP, before anything new (fs_cutover_service).
 *
 * The tx-side rules run with the connection's txlock held, the rx-side
 * ones with its rxlock (or a try-lock of it). */
#ifndef FS_ENGINE_CUTOVER_H
#define FS_ENGINE_CUTOVER_H

#include <stdbool.h>

#include "engine/conn.h"
#include "fabric/chan.h"

/* c stays on TCP for good: no channel used again, no upgrade; directions not
 * at EOF read and write TCP; state tcp with reason, fabric tcp in the stats.
 * (The caller has settled what the fabric still held.) */
void fs_cutover_tcp_for_good(struct fs_conn *c, int reason);

/* fs_cutover_chan, taking in the peer's news first only with progress: other
 * callers act on what is already known here (a completion poll on rdma
 * costs about as much as the rest of a small send or receive).  A receive
 * takes news in once, where it looks at the ring (fs_sockio_rx_step), a
 * send at most once (fs_sockio_tx_look); waits poll as they spin. */
static inline __attribute__((always_inline)) struct fs_chan *fs_cutover_chan_known(struct fs_conn *c, bool progress)
{
  struct fs_chan *ch = __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE);
  if (!ch || c->reverted)
    return NULL;
  if (progress)
    fs_chan_progress(ch);
  /* Another process sharing this end since fork downgraded it (it exec'd,
   * passed the fd on, confined itself): the stream continues on TCP for us
   * too, and stat says why. */
  uint32_t why = __atomic_load_n(&ch->me->reverted, __ATOMIC_ACQUIRE);
  if (__builtin_expect(why != 0, 0)) {
    fs_cutover_tcp_for_good(c, why < FS_REASON_COUNT ? (int)why : FS_REASON_EXEC);
    return NULL;
  }
  /* The peer gave the channel up without ever attaching it (its attach
   * lost a race with close or fork): it never left TCP, and neither do we. */
  if (__builtin_expect(fs_chan_peer_closed(ch), 0) && !__atomic_load_n(&ch->peer->attached, __ATOMIC_ACQUIRE) &&
      c->tx_flow == FS_FLOW_TCP && c->rx_flow == FS_FLOW_TCP) {
    /* A polled fabric learns of the close out of band (rdma: the
     * disconnect) and of the attach in its queue: what came before the
     * close is taken in first.  Else a peer that attached, wrote on the
     * fabric and quit before this process looked lost those bytes. */
    fs_chan_progress(ch);
    if (__atomic_load_n(&ch->peer->attached, __ATOMIC_ACQUIRE))
      return ch;
    fs_cutover_tcp_for_good(c, FS_REASON_REJECTED);
    return NULL;
  }
  return ch;
}

/* txlock held, tx on TCP (never switched, or behind our REVERT): it stays
 * there for good while rx may still read the ring (tx_back); state tcp with
 * reason, fabric tcp in the stats. */
void fs_cutover_tx_back(struct fs_conn *c, int reason);

/* The connection's live channel, or NULL when it is on TCP (never
 * attached, reverted here, reverted by another process sharing it since
 * fork, or given up by the peer before it attached).  Every path that asks
 * "is this connection on a fabric" asks this. */
struct fs_chan *fs_cutover_chan(struct fs_conn *c);

/* What heads ch's rx ring: 1 a SWITCH (*n: the TCP bytes before it), 0
 * nothing, 2 another record, < 0 a broken ring. */
static inline int fs_cutover_switch_head(struct fs_chan *ch, uint64_t *n)
{
  uint32_t t, l;
  int pr = fs_ring_peek(&ch->rx, &t, &l, n);
  return pr == 1 && t != FS_REC_SWITCH ? 2 : pr;
}

/* rx on TCP: is a record at the ring's head to act on now (readable)?  A
 * SWITCH is, once every TCP byte before it was read; until then the
 * socket's data (which ends a sleep) comes first, as does the socket's EOF
 * after a peer's close with nothing in the ring. */
static inline bool fs_cutover_switch_due(struct fs_conn *c, struct fs_chan *ch)
{
  uint32_t t, l;
  uint64_t n;
  int pr = fs_ring_peek(&ch->rx, &t, &l, &n);
  /* A count not yet taken from the kernel (c->resync_rx): rx_step takes it. */
  return pr < 0 || (pr == 1 && (t != FS_REC_SWITCH || c->resync_rx || c->tcp_rx >= n)); /* a broken ring: rx_step says so */
}

/* rxlock held: the rx count of a connection others held too (fork) is
 * taken from the kernel once, before its first SWITCH (fs_sock_attach):
 * bytes received less what waits unread. */
/* rxlock held, rx on TCP: if the peer's SWITCH is at the head and every
 * TCP byte before it was read, move rx to the fabric (true). */
void fs_cutover_resync_rx(struct fs_conn *c);

static inline bool fs_cutover_rx_switch(struct fs_conn *c, struct fs_chan *ch)
{
  uint64_t n;
  if (__builtin_expect(c->resync_rx, 0)) {
    fs_cutover_resync_rx(c);
    if (c->resync_rx)
      return false;
  }
  if (c->rx_flow != FS_FLOW_TCP || fs_cutover_switch_head(ch, &n) != 1 || c->tcp_rx != n)
    return false;
  fs_ring_pop(&ch->rx);
  fs_chan_kick_space(ch);
  c->rx_flow = FS_FLOW_FABRIC;
  return true;
}

/* rxlock held, rx on TCP, a record other than a SWITCH at the head: on an
 * end shared since fork, another holder took the peer's SWITCH (and every
 * TCP byte before it), so rx is on the fabric (true; the TCP count from
 * the kernel).  Anywhere else the peer broke the protocol (false). */
static inline bool fs_cutover_rx_adopt(struct fs_conn *c, struct fs_chan *ch)
{
  if (!c->fork_shared || !fs_ring_consumed(&ch->rx) || c->no_upgrade ||
      __atomic_load_n(&ch->me->reverted, __ATOMIC_ACQUIRE) || __atomic_load_n(&ch->me->rx_revert, __ATOMIC_ACQUIRE))
    return false;
  fs_cutover_resync_rx(c);
  c->resync_rx = false;
  c->rx_flow = FS_FLOW_FABRIC;
  return true;
}

/* Is the peer's REVERT at the head of ch's rx ring (nothing before it)? */
static inline bool fs_cutover_revert_head(struct fs_chan *ch)
{
  uint32_t t, l;
  uint64_t n;
  return fs_ring_peek(&ch->rx, &t, &l, &n) == 1 && t == FS_REC_REVERT;
}

/* rxlock held: the peer's REVERT is at the head: rx goes back to TCP. */
static inline void fs_cutover_rx_revert(struct fs_conn *c, struct fs_chan *ch)
{
  fs_ring_pop(&ch->rx);
  fs_chan_kick_space(ch);
  c->rx_flow = FS_FLOW_TCP;
  c->no_upgrade = true;
}

/* txlock held: if c has a channel and its tx is still on TCP, write
 * SWITCH(tcp_tx) and move tx to the fabric. */
void fs_cutover_switch_tx(struct fs_conn *c, struct fs_chan *ch);

/* The same for a send of `want` bytes, unless the ring is cramped and its
 * window shorter: then tx stays on TCP for good (tx_back, reason resources). */
void fs_cutover_switch_for(struct fs_conn *c, struct fs_chan *ch, size_t want);

/* rxlock held: rx on TCP read past the peer's SWITCH (its next bytes on
 * TCP overtook it) where no look right after the read caught it
 * (engine/overhang.h), and the ring's bytes can no longer come first:
 * reset, -ECONNRESET. */
int fs_cutover_read_past(struct fs_conn *c, int fd, uint64_t n);

/* txlock held: end our fabric bytes with REVERT(fab_tx); tx is on TCP now. */
void fs_cutover_tx_revert(struct fs_conn *c, struct fs_chan *ch);

/* txlock held: shutdown(SHUT_WR) on the fabric: EOF after our last bytes. */
void fs_cutover_tx_eof(struct fs_conn *c, struct fs_chan *ch);

/* txlock held, the connection's last fd in this process closed: drop our
 * hold on the end; the last holder anywhere ends a tx still on the fabric
 * with EOF, then marks the end closed.  abort_fd >= 0: the close of that
 * fd aborts (SO_LINGER {1, 0}): no EOF, the kernel's reset first.  tx is at
 * EOF here from now on. */
void fs_cutover_last_close(struct fs_conn *c, struct fs_chan *ch, int abort_fd);

/* TCP says the peer's side closed (its FIN) while its end of ch is not
 * closed: did its process die (SIGKILL) instead?  A peer that closes or
 * shuts down on the fabric closes its end, or queues EOF, before its FIN;
 * one that only half-closed TCP is alive, and is asked again at most every
 * 20 ms.  Dead: its end reads closed from now on, and if it left bytes of
 * ours unread, the next send and the next receive (after what the ring
 * holds) fail once with ECONNRESET, as the kernel's reset would make them. */
bool fs_cutover_peer_died(struct fs_conn *c, struct fs_chan *ch);

/* Reset the kernel's TCP connection now: connect(AF_UNSPEC) on a connected
 * socket makes the kernel send a reset and drop both queues.  errno is left
 * alone. */
void fs_cutover_reset_tcp(int fd);

/* The channel broke under the stream (fs_chan_broken): bytes may be lost, so
 * the connection ends as a reset would end it.  Both directions owe
 * ECONNRESET once (after what our ring still holds), poll reports
 * POLLERR | POLLHUP, and the kernel socket fd is reset so that the peer learns
 * it too.  Cheap no-op otherwise; call where the peer's end reads closed. */
void fs_cutover_broken(struct fs_conn *c, struct fs_chan *ch, int fd);

/* Answer a pending peer revert request (see fs_sock_downgrade): queue the
 * re-send of our unread ring bytes on the agent (fs_cutover_resend_job). */
void fs_cutover_service(struct fs_conn *c, int fd);
/* The last close of c, by fd, while the peer reverted and c's re-send has
 * not run (txlock held): true if the re-send now has a dup of its own to
 * write on and close (queue it with fs_cutover_resend_queue, after
 * txlock), so that the bytes go before the FIN and close() never waits;
 * without a descriptor to spare it re-sends here and now. */
bool fs_cutover_close_resend(struct fs_conn *c, struct fs_chan *ch, int fd);
void fs_cutover_resend_queue(struct fs_conn *c);
void fs_cutover_resend_job(struct fs_conn *c);

#endif
