/* Resuming an rdma channel on a new queue pair: the rdma_cm half (the
 * channel's half and the protocol: fabric/rdma/heal.c; the request's wire
 * format: fabric/rdma/rdmacm.h).  Agent thread, agent lock held.
 *
 * The connecting end resumes: a new id from the same local address to the
 * same listener, the channel moved onto its queue pair once the route is
 * known, then a resume request.  A failed attempt (no route, unreachable:
 * the link may still be down) is tried again after 0.5 s, doubling to 4 s,
 * for as long as the channel lives; a refusal means the peer holds no such
 * channel any more (its process is gone): the peer is gone, as a
 * disconnect said before resumes existed.  The id the peer knew stays until
 * the new one is up, so the accepting end never reads our resume as our
 * death.
 *
 * The accepting end never connects, and never disconnects to ask (a
 * disconnect during an outage is a CM message into a down link, and
 * Soft-RoCE's connection manager has been seen dead for good after one):
 * it destroys its failed or wedged queue pair (not the id), the connecting
 * end's stall watch finds its probes unanswered, and resumes.  It moves the
 * channel onto whatever queue pair a valid resume request brings.
 *
 * Attempts that fail for FS_RDMACM_RESUME_GIVEUP_MS (the peer host
 * unreachable that long, or a connection manager that stays dead) end in a
 * reset: bytes in flight may be lost, and TCP cannot be told where to
 * take over without a message on its stream. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <string.h>

#include "base/addr.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/reason.h"
#include "fabric/rdma/rdma.h"
#include "fabric/rdma/rdmacm_int.h"

#define M fs_cm_m
#define FS_CM_RESUME_TIMEOUT_MS 2000 /* address and route resolution, each */

static struct fs_cm_item *fs_cm_resume_of(struct fs_cm_item *it)
{
  return it && it->kind == CM_CHAN && it->r ? it : NULL;
}

/* An attempt failed: drop its id (unless the channel runs on it now: the
 * next attempt's swap replaces it) and try again later. */
static void fs_cm_resume_retry(struct fs_cm_item *it, const char *why)
{
  struct fs_rdma *r = it->r;
  if (it->rid && it->rid != fs_rdma_id(r))
    FS_VERBS(rdma_destroy_id)(it->rid);
  it->rid = NULL;
  it->backoff_ms = !it->backoff_ms ? FS_RDMACM_RESUME_RETRY_MS
                   : it->backoff_ms * 2 > FS_RDMACM_RESUME_RETRY_MAX_MS ? FS_RDMACM_RESUME_RETRY_MAX_MS
                                                                        : it->backoff_ms * 2;
  uint64_t now = fs_clock_ns();
  if (!it->resume_since)
    it->resume_since = now;
  if (now - it->resume_since > (uint64_t)FS_RDMACM_RESUME_GIVEUP_MS * 1000000u) {
    fs_rdma_resume_failed(r, "no resume attempt got through", false);
    return;
  }
  it->retry_at = now + (uint64_t)it->backoff_ms * 1000000u;
  fs_log(FS_LOG_INFO, "rdma channel %p: resume attempt failed (%s); again in %u ms", (void *)r, why, it->backoff_ms);
  (void)fs_rdma_resume_ask(r, "resume attempt failed"); /* back to ASKED: nothing posted */
}

static void fs_cm_resume_start(struct fs_cm_item *it)
{
  struct sockaddr_storage src;
  memcpy(&src, &it->tl, sizeof src);
  fs_addr_set_port((struct sockaddr *)&src, 0);
  if (FS_VERBS(rdma_create_id)(M.ec, &it->rid, it, RDMA_PS_TCP) != 0) {
    it->rid = NULL;
    fs_cm_resume_retry(it, "no id");
    return;
  }
  if (FS_VERBS(rdma_resolve_addr)(it->rid, (struct sockaddr *)&src, (struct sockaddr *)&it->tp,
                                  FS_CM_RESUME_TIMEOUT_MS) != 0)
    fs_cm_resume_retry(it, "address");
}

/* Route known: move the channel onto this id's queue pair, and ask. */
static void fs_cm_resume_route(struct fs_cm_item *it)
{
  struct fs_rdma *r = it->r;
  struct rdma_cm_id *prev = fs_rdma_id(r);
  int rc = fs_rdma_swap_qp(r, it->rid);
  if (rc < 0) {
    fs_cm_resume_retry(it, strerror(-rc));
    return;
  }
  if (prev != it->id && prev != it->rid)
    FS_VERBS(rdma_destroy_id)(prev); /* an earlier attempt's (its pair went in the swap) */
  uint64_t addr;
  uint32_t rkey;
  fs_rdma_remote(r, &addr, &rkey);
  struct rdma_conn_param p =
      fs_cm_param(&it->raw, FS_RDMACM_MAGIC_RES, fs_cm_log2(it->ring), fs_addr_port((struct sockaddr *)&it->tl), addr,
                  rkey, false, it->has_key ? it->key : NULL, (struct sockaddr *)&it->tl, (struct sockaddr *)&it->tp, NULL);
  if (FS_VERBS(rdma_connect)(it->rid, &p) != 0)
    fs_cm_resume_retry(it, "connect");
}

static void fs_cm_resume_established(struct fs_cm_item *it, const uint8_t *pd, size_t len)
{
  struct fs_rdma *r = it->r;
  struct fs_rdmacm_msg m;
  uint64_t addr;
  uint32_t rkey;
  fs_rdma_remote(r, &addr, &rkey);
  bool ok = len >= sizeof m;
  if (ok) {
    memcpy(&m, pd, sizeof m);
    ok = ntohl(m.magic) == FS_RDMACM_MAGIC_ACC && m.version == FS_RDMACM_VERSION && m.ring_log2 == fs_cm_log2(it->ring) &&
         be64toh(m.addr) == addr && ntohl(m.rkey) == rkey;
  }
  if (ok && it->has_key)
    ok = fs_rdmacm_verify(pd, len, it->key, (struct sockaddr *)&it->tl, (struct sockaddr *)&it->tp, it->raw.a.mac, 0,
                          NULL) == 0;
  if (!ok) {
    fs_rdma_resume_failed(r, "the accept does not name our channel", false);
    return;
  }
  if (it->id && it->id != it->rid)
    FS_VERBS(rdma_destroy_id)(it->id); /* the old connection: the peer has let go of it */
  it->id = it->rid;
  it->rid = NULL;
  it->backoff_ms = 0;
  it->resume_since = 0;
  fs_rdma_resumed(r);
}

void fs_cm_resume_request(struct rdma_cm_id *id, const uint8_t *pd, size_t len)
{
  struct fs_rdmacm_msg m;
  bool has_mac = false;
  struct sockaddr_storage tl, tp;
  struct sockaddr *pa = rdma_get_peer_addr(id), *la = rdma_get_local_addr(id);
  int reason = fs_rdmacm_check_req(pd, len, &m, &has_mac);
  struct fs_cm_item *it = NULL;
  if (!reason) {
    memcpy(&tp, pa, fs_addr_len(pa));
    memcpy(&tl, la, fs_addr_len(la));
    fs_addr_set_port((struct sockaddr *)&tp, m.port);
    for (it = M.items; it; it = it->next) {
      if (it->kind != CM_CHAN || !it->r || fs_rdma_side(it->r) != 1 || !fs_addr_eq((struct sockaddr *)&it->tl, (struct sockaddr *)&tl) ||
          !fs_addr_eq((struct sockaddr *)&it->tp, (struct sockaddr *)&tp))
        continue;
      uint64_t addr;
      uint32_t rkey;
      fs_rdma_local(it->r, &addr, &rkey);
      if (addr == m.addr && rkey == m.rkey && m.ring_log2 == fs_cm_log2(it->ring))
        break;
    }
    if (!it)
      reason = FS_REASON_NO_PEER;
  }
  if (!reason && it->has_key)
    reason = fs_rdmacm_verify(pd, has_mac ? len : 0, it->key, (struct sockaddr *)&tp, (struct sockaddr *)&tl, NULL,
                              fs_cm_wall_ms(), &M.seen);
  struct fs_rdma *r = it ? it->r : NULL;
  if (!reason) {
    int rc = fs_rdma_swap_qp(r, id);
    if (rc < 0) {
      fs_log(FS_LOG_INFO, "rdma channel %p: no queue pair to resume on: %s", (void *)r, strerror(-rc));
      reason = FS_REASON_RESOURCES;
    }
  }
  if (reason) {
    fs_log(FS_LOG_INFO, "rdma resume request refused: %s", fs_reason_name(reason));
    fs_cm_reject_id(id, reason);
    FS_VERBS(rdma_destroy_id)(id);
    return;
  }
  if (it->id && it->id != id)
    FS_VERBS(rdma_destroy_id)(it->id); /* its pair went in the swap */
  it->id = id;
  id->context = it;
  memcpy(&it->raw, pd, has_mac ? sizeof it->raw : sizeof it->raw.m);
  uint64_t addr;
  uint32_t rkey;
  bool whole = fs_rdma_local(r, &addr, &rkey);
  struct fs_rdmacm_wire w;
  struct rdma_conn_param p =
      fs_cm_param(&w, FS_RDMACM_MAGIC_ACC, m.ring_log2, fs_addr_port((struct sockaddr *)&tl), addr, rkey, whole,
                  it->has_key ? it->key : NULL, (struct sockaddr *)&tp, (struct sockaddr *)&tl, it->raw.a.mac);
  fs_log(FS_LOG_INFO, "rdma channel %p: the peer resumes it on a new queue pair", (void *)r);
  if (FS_VERBS(rdma_accept)(id, &p) != 0)
    fs_log(FS_LOG_INFO, "rdma channel %p: resume accept failed: %s", (void *)r, strerror(errno));
}

void fs_cm_chan_event(struct fs_cm_item *it, enum rdma_cm_event_type type, int status, struct rdma_cm_id *id,
                      const uint8_t *pd, size_t len)
{
  struct fs_rdma *r = it->r;
  (void)status;
  if (id && id == it->rid) { /* the connecting end's attempt */
    switch (type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      if (FS_VERBS(rdma_resolve_route)(id, FS_CM_RESUME_TIMEOUT_MS) != 0)
        fs_cm_resume_retry(it, "route");
      break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      fs_cm_resume_route(it);
      break;
    case RDMA_CM_EVENT_ESTABLISHED:
      fs_cm_resume_established(it, pd, len);
      break;
    case RDMA_CM_EVENT_REJECTED: {
      /* No listener there, or no such channel: the peer's process is gone.
       * Any other reason (resources, auth): bytes may be lost, reset. */
      int why = fs_cm_rej_reason(status, pd, len);
      it->rid = NULL; /* the channel's id now: it goes with the channel */
      fs_rdma_resume_failed(r, fs_reason_name(why), why == FS_REASON_NO_PEER);
      break;
    }
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_DISCONNECTED:
      fs_cm_resume_retry(it, FS_VERBS(rdma_event_str)(type));
      break;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      fs_rdma_resume_failed(r, "device removed", false);
      break;
    default:
      break;
    }
    return;
  }
  if (id != fs_rdma_id(r))
    return; /* an id resumed from */
  if (type == RDMA_CM_EVENT_ESTABLISHED) { /* the accepting end, resumed */
    fs_rdma_resumed(r);
    return;
  }
  if (type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
    fs_rdma_peer_gone(r);
    return;
  }
  if (type != RDMA_CM_EVENT_DISCONNECTED)
    return;
  if (fs_rdma_side(r) == 1) {
    /* A resuming peer keeps the id we know until its new one is up: this
     * is its death, or the end of its channel.  But during a resume it is
     * an attempt of its that failed: it tries again. */
    uint32_t rs = fs_rdma_resume_state(r);
    if (rs == 0 || rs == 1)
      fs_rdma_peer_gone(r);
    return;
  }
  /* The accepting end disconnected without closing its end: its queue pair
   * failed, or its process died.  A resume tells which. */
  if (fs_rdma_peer_closed(r) || !fs_rdma_resume_ask(r, "the peer disconnected"))
    fs_rdma_peer_gone(r);
}

void fs_cm_resume_tick(uint64_t now)
{
  if (!__atomic_exchange_n(&M.resume_news, false, __ATOMIC_ACQ_REL) && fs_cm_resume_next_ms(now) != 0)
    return;
  for (struct fs_cm_item *it = M.items; it; it = it->next) {
    if (!fs_cm_resume_of(it) || fs_rdma_resume_state(it->r) != 1)
      continue;
    if (fs_rdma_side(it->r) == 1)
      fs_rdma_drop_qp(it->r);
    else if (!it->rid && now >= it->retry_at)
      fs_cm_resume_start(it);
  }
}

int fs_cm_resume_next_ms(uint64_t now)
{
  int best = -1;
  for (struct fs_cm_item *it = M.items; it; it = it->next) {
    if (!fs_cm_resume_of(it) || fs_rdma_resume_state(it->r) != 1 || fs_rdma_side(it->r) == 1 || it->rid)
      continue;
    int ms = it->retry_at > now ? (int)((it->retry_at - now) / 1000000u + 1) : 0;
    if (best < 0 || ms < best)
      best = ms;
  }
  return best;
}

void fs_cm_resume_forget(struct fs_cm_item *it)
{
  if (it->kind != CM_CHAN || !it->r)
    return;
  struct rdma_cm_id *cur = fs_rdma_id(it->r);
  if (it->rid && it->rid != cur)
    FS_VERBS(rdma_destroy_id)(it->rid);
  if (it->id && it->id != cur && it->id != it->rid)
    FS_VERBS(rdma_destroy_id)(it->id);
  it->rid = it->id = NULL;
}
