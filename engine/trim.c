/* Idle tx rings give their free space back (engine/trim.h). */
#include "base/hot.h"
#include "engine/trim.h"

#include "base/lock.h"
#include "base/log.h"
#include "engine/conn.h"
#include "engine/fdtab.h"
#include "fabric/chan.h"
#include "fabric/ring.h"

static uint32_t fs_trim_nchan FS_HOT; /* atomic */

void fs_trim_count(int delta)
{
  __atomic_add_fetch(&fs_trim_nchan, (uint32_t)delta, __ATOMIC_RELAXED);
}

uint32_t fs_trim_chans(void)
{
  return __atomic_load_n(&fs_trim_nchan, __ATOMIC_RELAXED);
}

/* c idle since the last pass (its fabric byte count did not move), not
 * trimmed since it moved last, and no send in progress: trim it.  A dup'd
 * fd names the same connection: the second visit finds it trimmed. */
static void fs_trim_one(int fd, struct fs_conn *c, void *arg)
{
  (void)fd;
  struct fs_chan *ch = __atomic_load_n(&c->chan, __ATOMIC_ACQUIRE);
  if (!ch || c->reverted)
    return;
  /* Nothing came for two whole periods: the peer's own pass has given
   * our rx ring's pages back by now (its tx ring), so our next reads of
   * them copy through the kernel again (fabric/ring.h, kcopy). */
  uint64_t rx = __atomic_load_n(&c->fab_rx, __ATOMIC_RELAXED);
  if (rx != c->trim_rx) {
    c->trim_rx = rx;
    c->rx_quiet = 0;
  } else if (c->rx_quiet < 2 && ++c->rx_quiet == 2) {
    fs_ring_kcopy_renew(&ch->rx);
  }
  uint64_t tx = __atomic_load_n(&c->fab_tx, __ATOMIC_RELAXED);
  if (tx != c->trim_tx) {
    c->trim_tx = tx;
    c->trimmed = false;
    return;
  }
  if (c->trimmed || !fs_lock_try(&c->txlock))
    return;
  bool all = true;
  if (__atomic_load_n(&c->fab_tx, __ATOMIC_RELAXED) == tx)
    *(uint64_t *)arg += ch->ops->trim(ch, &all);
  /* The peer had not read it all: its pages go at a later pass, once it
   * has (they stayed until the next write). */
  c->trimmed = all;
  fs_unlock(&c->txlock);
}

uint64_t fs_trim_idle(void)
{
  uint64_t bytes = 0;
  fs_fdtab_foreach(fs_trim_one, &bytes);
  if (bytes)
    fs_log(FS_LOG_DEBUG, "idle rings gave back %llu KiB", (unsigned long long)(bytes >> 10));
  return bytes;
}
