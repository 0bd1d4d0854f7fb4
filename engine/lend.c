/* What the engine lends the fabrics: each fabric_host entry is a thin
 * adapter from a link to its connection (engine/sock.c decides). */
#include "engine/agent.h"
#include "engine/conn.h"
#include "engine/hold.h"
#include "engine/lend.h"
#include "engine/ready.h"
#include "engine/sock.h"
#include "engine/wake.h"

static void fs_lend_get(struct fs_link *l)
{
  fs_conn_get(fs_conn_of(l));
}

static void fs_lend_put(struct fs_link *l)
{
  fs_conn_put(fs_conn_of(l));
}

static struct fs_link *fs_lend_find(const struct sockaddr *local, const struct sockaddr *peer)
{
  struct fs_conn *c = fs_sock_find(local, peer);
  return c ? &c->link : NULL;
}

static bool fs_lend_may_upgrade(struct fs_link *l)
{
  return fs_sock_may_upgrade(fs_conn_of(l));
}

static bool fs_lend_hold(struct fs_link *l)
{
  return fs_hold_request(fs_conn_of(l));
}

static int fs_lend_may_attach(struct fs_link *l, uint32_t uid)
{
  return fs_sock_may_attach(fs_conn_of(l), uid);
}

/* wake and bell: for a connection the application closed while its
 * rendezvous ran, no wake fd and no door (a set's or the process's, made
 * for it, would outlive it: nbconnect saw two descriptors more after the
 * connection was gone); the rendezvous ends there, as its attach would. */
static int fs_lend_wake(struct fs_link *l)
{
  struct fs_conn *c = fs_conn_of(l);
  return fs_conn_closed(c) ? FS_REASON_ERROR : fs_wake_get(c);
}

static int fs_lend_bell(struct fs_link *l, int *efd, int *memfd, uint32_t *slot)
{
  struct fs_conn *c = fs_conn_of(l);
  return fs_conn_closed(c) ? -1 : fs_ready_door_offer(c, efd, memfd, slot);
}

static int fs_lend_attach(struct fs_link *l, struct fs_chan *ch)
{
  return fs_sock_attach(fs_conn_of(l), ch);
}

static void fs_lend_failed(struct fs_link *l, int reason)
{
  fs_sock_upgrade_failed(fs_conn_of(l), reason);
}

static void fs_lend_refused(struct fs_link *l, int reason)
{
  fs_sock_refused(fs_conn_of(l), reason);
}

static int fs_lend_refuse_all(void)
{
  return fs_sock_refuse_all();
}

const struct fs_fabric_host fs_lend_host = {
  .get = fs_lend_get,
  .put = fs_lend_put,
  .find = fs_lend_find,
  .may_upgrade = fs_lend_may_upgrade,
  .hold = fs_lend_hold,
  .may_attach = fs_lend_may_attach,
  .wake = fs_lend_wake,
  .bell = fs_lend_bell,
  .attach = fs_lend_attach,
  .failed = fs_lend_failed,
  .refused = fs_lend_refused,
  .refuse_all = fs_lend_refuse_all,
  .watch = fs_agent_watch,
  .unwatch = fs_agent_unwatch,
  .kick = fs_agent_kick,
};
