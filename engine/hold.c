/* Requests held until a connection's first use.  See engine/hold.h. */
#include "base/clock.h"
#include "engine/agent.h"
#include "engine/hold.h"

bool fs_hold_request(struct fs_conn *c)
{
  if (!__atomic_load_n(&c->ready, __ATOMIC_ACQUIRE))
    return true; /* accept() is still setting it up (opening hooks) */
  /* Used here, or in the image that forked us with it (then we took over
   * its flag): fs_sock_may_attach decides, alone with it or not. */
  if (c->dir != FS_DIR_ACCEPT || c->no_upgrade || __atomic_load_n(&c->used, __ATOMIC_ACQUIRE))
    return false;
  uint64_t now = fs_clock_coarse_ns();
  if (!c->hold_ns)
    c->hold_ns = now;
  /* Unused that long: a busy server, not a hand-over; the peer gives up
   * only after the whole bound. */
  return now - c->hold_ns < (uint64_t)c->policy.timeout_ms * 250000u;
}

void fs_hold_first_use(struct fs_conn *c)
{
  __atomic_store_n(&c->used, true, __ATOMIC_RELEASE);
  if (c->dir == FS_DIR_ACCEPT)
    fs_agent_retry_held();
}
