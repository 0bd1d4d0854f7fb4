#include <errno.h>
#include <stdint.h>

#include "fabric/chan.h"
#include "base/real.h"

void fs_chan_efd_write(int efd)
{
  uint64_t one = 1;
  int saved = errno;
  (void)FS_REAL(write)(efd, &one, sizeof one);
  errno = saved;
}

void fs_chan_shared_publish(struct fs_chan *ch)
{
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (__atomic_load_n(&ch->tx.ctl->want_data, __ATOMIC_RELAXED) &&
      __atomic_exchange_n(&ch->tx.ctl->want_data, 0, __ATOMIC_ACQ_REL))
    ch->ops->wake_peer(ch);
}

void fs_chan_shared_credit(struct fs_chan *ch)
{
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (fs_ring_room_reached(&ch->rx))
    ch->ops->wake_peer(ch);
}

bool fs_chan_tx_ready(struct fs_chan *ch)
{
  fs_chan_progress(ch);
  if (fs_chan_cramped(ch))
    return true; /* a send goes back to TCP where it would wait (engine/sockio.c) */
  size_t want = fs_chan_tx_mark(ch);
  return fs_ring_space_for(&ch->tx, want) >= want;
}

bool fs_chan_arm_rx(struct fs_chan *ch)
{
  __atomic_store_n(&ch->rx.ctl->want_data, 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  ch->ops->arm(ch);
  return fs_chan_rx_ready(ch) || fs_chan_peer_closed(ch);
}

bool fs_chan_arm_tx(struct fs_chan *ch, size_t need, size_t wake)
{
  fs_ring_want_space(&ch->tx, wake > need ? wake : need);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  ch->ops->arm(ch);
  fs_chan_progress(ch);
  return fs_ring_space_for(&ch->tx, need) >= need || fs_chan_peer_closed(ch);
}

void fs_chan_disarm(struct fs_chan *ch, bool rx, bool tx)
{
  if (rx && __atomic_load_n(&ch->rx.ctl->want_data, __ATOMIC_RELAXED))
    __atomic_exchange_n(&ch->rx.ctl->want_data, 0, __ATOMIC_ACQ_REL);
  if (tx && __atomic_load_n(&ch->tx.ctl->want_space, __ATOMIC_RELAXED))
    __atomic_exchange_n(&ch->tx.ctl->want_space, 0, __ATOMIC_ACQ_REL);
}

bool fs_chan_unref(struct fs_chan *ch)
{
  return __atomic_sub_fetch(&ch->me->refs, 1, __ATOMIC_ACQ_REL) == 0;
}

void fs_chan_close_end(struct fs_chan *ch)
{
  __atomic_store_n(&ch->me->closed, 1, __ATOMIC_RELEASE);
  ch->ops->wake_peer(ch);
}

void fs_chan_shut(struct fs_chan *ch)
{
  __atomic_store_n(&ch->me->closed, 1, __ATOMIC_RELEASE);
  ch->ops->wake_peer(ch);
}

void fs_chan_detach(struct fs_chan *ch)
{
  if (fs_chan_unref(ch))
    fs_chan_close_end(ch);
  ch->ops->release(ch);
}

void fs_chan_nop(struct fs_chan *ch)
{
  (void)ch;
}

bool fs_chan_yes(struct fs_chan *ch)
{
  (void)ch;
  return true;
}

bool fs_chan_no(struct fs_chan *ch)
{
  (void)ch;
  return false;
}

size_t fs_chan_trim_none(struct fs_chan *ch, bool *all)
{
  (void)ch;
  *all = true;
  return 0;
}
