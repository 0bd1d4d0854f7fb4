/* rdma connection management (protocol in fabric/rdma/rdmacm.h).  Everything but
 * fs_rdmacm_retire, fs_rdmacm_held and the wire checks runs with the agent
 * lock held (on the agent thread, or in listen()/close() through the
 * engine's agent), so the lists need no lock of their own.  Built only
 * with rdma (HAVE_RDMA); the wire format is rdmacm_wire.c. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/addr.h"
#include "base/bell.h"
#include "base/clock.h"
#include "base/fdreg.h"
#include "base/hmac.h"
#include "base/lock.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/real.h"
#include "base/reason.h"
#include "fabric/diag.h"
#include "fabric/fabric.h"
#include "fabric/rdma/rdma.h"
#include "fabric/rdma/rdmacm.h"
#include "fabric/rdma/rdmacm_int.h"
#include "fabric/rdma/verbs.h"

struct fs_cm_state fs_cm_m; /* all zero: FS_CM_UNPROBED, and an unlocked mutex */
#define M fs_cm_m

uint64_t fs_cm_wall_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void fs_cm_event(void);

static bool fs_cm_event_cb(void *arg)
{
  (void)arg;
  fs_cm_event();
  return false; /* no agent watch goes */
}

static bool fs_cm_probe(void);

bool fs_rdmacm_available(void)
{
  if (M.avail != FS_CM_UNPROBED)
    return M.avail == FS_CM_YES;
  fs_proc_fork_work_add(FS_FORK_FABRIC); /* the child must forget what this sets up */
  M.avail = FS_CM_NO;
  if (!fs_verbs_device_listed()) {
    fs_log(FS_LOG_DEBUG, "no rdma device in sysfs: rdma-core not loaded; remote peers stay on tcp");
    return false;
  }
  /* Loading rdma-core opens every library file and provider, and the
   * devices below: all at the application's lowest free numbers, some for
   * good until moved (base/fdreg.h, the window). */
  fs_fdreg_make_begin();
  bool ok = fs_cm_probe();
  fs_fdreg_make_end();
  return ok;
}

static bool fs_cm_probe(void)
{
  if (fs_verbs_load() < 0)
    return false;
  int n = 0;
  struct ibv_device **l = FS_VERBS(ibv_get_device_list)(&n);
  if (l)
    FS_VERBS(ibv_free_device_list)(l);
  if (n <= 0) {
    fs_log(FS_LOG_DEBUG, "no rdma device: remote peers stay on tcp");
    return false;
  }
  /* librdmacm opens a device (two fds) the first time an id needs it, at a
   * time only the network decides: open them all now, and move them out of
   * the application's low numbers (the application may be closing
   * everything).  Unused yet, and libibverbs and its providers use only the
   * numbers in the (public) context: safe to renumber.  The list is never
   * freed: it holds librdmacm's reference on each device, without which it
   * reopens the device, at a low number, when an id needs it. */
  M.devs = FS_VERBS(rdma_get_devices)(&n);
  for (int i = 0; M.devs && i < n; i++) {
    M.devs[i]->cmd_fd = fs_fdreg_move_high(M.devs[i]->cmd_fd);
    M.devs[i]->async_fd = fs_fdreg_move_high(M.devs[i]->async_fd);
  }
  M.ec = FS_VERBS(rdma_create_event_channel)();
  if (!M.ec) {
    fs_log(FS_LOG_INFO, "rdma_cm unavailable (%s): remote peers stay on tcp", strerror(errno));
    return false;
  }
  M.ec->fd = fs_fdreg_move_high(M.ec->fd); /* no id uses it yet */
  int fl = FS_REAL(fcntl)(M.ec->fd, F_GETFL, 0);
  if (fl < 0 || FS_REAL(fcntl)(M.ec->fd, F_SETFL, fl | O_NONBLOCK) < 0 || fs_host->watch(M.ec->fd, fs_cm_event_cb, NULL) < 0) {
    FS_VERBS(rdma_destroy_event_channel)(M.ec);
    M.ec = NULL;
    return false;
  }
  M.pid = getpid();
  M.avail = FS_CM_YES;
  return true;
}

static struct fs_cm_item *fs_cm_new(enum fs_cm_kind kind)
{
  struct fs_cm_item *it = calloc(1, sizeof *it);
  if (!it)
    return NULL;
  it->kind = kind;
  it->next = M.items;
  M.items = it;
  return it;
}

static void fs_cm_unlink(struct fs_cm_item *it)
{
  for (struct fs_cm_item **pp = &M.items; *pp; pp = &(*pp)->next)
    if (*pp == it) {
      *pp = it->next;
      break;
    }
  if (it->held)
    __atomic_fetch_sub(&M.nheld, 1, __ATOMIC_RELAXED);
  it->held = false;
}

/* Free an item and what it owns (an attached channel belongs to its conn). */
static void fs_cm_drop(struct fs_cm_item *it)
{
  fs_cm_unlink(it);
  if (it->kind != CM_CHAN && it->r)
    fs_rdma_destroy(it->r); /* destroys the id too */
  else if (it->kind != CM_CHAN && it->id)
    FS_VERBS(rdma_destroy_id)(it->id);
  if (it->c)
    fs_host->put(it->c);
  free(it);
}

void fs_cm_reject_id(struct rdma_cm_id *id, int reason)
{
  struct fs_rdmacm_rej rej = { htonl(FS_RDMACM_MAGIC_REJ), FS_RDMACM_VERSION, (uint8_t)reason, 0 };
  FS_VERBS(rdma_reject)(id, &rej, sizeof rej);
}

void fs_cm_reject(struct fs_cm_item *it, int reason)
{
  fs_cm_reject_id(it->id, reason);
}

struct rdma_conn_param fs_cm_param(struct fs_rdmacm_wire *w, uint32_t magic, uint8_t ring_log2, uint16_t port,
                                   uint64_t addr, uint32_t rkey, bool whole, const uint8_t *key,
                                   const struct sockaddr *client, const struct sockaddr *server, const uint8_t *bind)
{
  memset(w, 0, sizeof *w);
  w->m = (struct fs_rdmacm_msg){ htonl(magic), FS_RDMACM_VERSION, ring_log2, htons(port), htobe64(addr), htonl(rkey),
                                 htonl(whole ? FS_RDMACM_F_WHOLE : 0) };
  if (key)
    fs_rdmacm_seal(w, key, client, server, bind, fs_cm_wall_ms());
  return (struct rdma_conn_param){ .private_data = w, .private_data_len = key ? sizeof *w : sizeof w->m,
                                   .retry_count = 7, .rnr_retry_count = 7 };
}

uint8_t fs_cm_log2(uint32_t v)
{
  uint8_t l = 0;
  while ((1u << l) < v)
    l++;
  return l;
}

/* How c's waiters learn of r's news (fs_rdma_wake_local).  A channel on
 * the device's completion channel: a slot of c's door, rung as a peer on
 * this host rings it (host->bell: an epoll set's, a thread's or the
 * process's door; one ringer per door, fs_bell_peer_own), so the
 * connection holds no descriptor of its own.  Else, or where c takes no
 * door, its wake eventfd (its waiters sleep on their own completion channel
 * beside it: no door is looked at there, engine/ready.c).  0, or a reason
 * (no fd to spare, or closed meanwhile). */
static int fs_cm_wake(struct fs_link *c, struct fs_rdma *r)
{
  int efd, memfd;
  uint32_t slot;
  if (!fs_rdma_own_channel(r) && fs_host->bell(c, &efd, &memfd, &slot) == 0) {
    struct fs_bell_peer *b;
    int rc = fs_bell_peer_own(efd, memfd, &b);
    if (rc < 0) {
      fs_log(FS_LOG_INFO, "fd %d: no ringer for its door: %s", c->fd, strerror(-rc));
      return FS_REASON_RESOURCES;
    }
    fs_rdma_set_bell(r, b, slot);
    return 0;
  }
  int status = fs_host->wake(c);
  if (status == 0)
    fs_rdma_set_wake(r, c->wake_fd);
  return status;
}

/* The channel is the connection's now: the item only maps cm events to it. */
static void fs_cm_attached(struct fs_cm_item *it)
{
  struct fs_chan *ch = fs_rdma_chan(it->r);
  it->kind = CM_CHAN;
  it->deadline = 0;
  it->has_key = it->c->policy.has_key; /* a resume is sealed as the upgrade was */
  memcpy(it->key, it->c->policy.key, sizeof it->key);
  fs_host->put(it->c);
  it->c = NULL;
  ch->ops->wake_peer(ch); /* our "attached" flag */
}

/* ---- connecting end ----------------------------------------------------- */

static void fs_cm_cli_fail(struct fs_cm_item *it, int reason)
{
  fs_host->failed(it->c, reason);
  fs_cm_drop(it);
}

int fs_rdmacm_connect(struct fs_link *c)
{
  if (!fs_rdmacm_available())
    return FS_REASON_NO_DEVICE;
  struct fs_cm_item *it = fs_cm_new(CM_CLI);
  if (!it)
    return FS_REASON_RESOURCES;
  struct sockaddr_storage src, dst;
  const struct sockaddr *s = fs_addr_unmap((struct sockaddr *)&c->local, &src);
  const struct sockaddr *d = fs_addr_unmap((struct sockaddr *)&c->peer, &dst);
  memmove(&src, s, fs_addr_len(s));
  memmove(&dst, d, fs_addr_len(d));
  memcpy(&it->tl, &src, sizeof src); /* a resume goes the same way (rdmacm_resume.c) */
  memcpy(&it->tp, &dst, sizeof dst);
  fs_addr_set_port((struct sockaddr *)&src, 0);
  int reason = 0;
  if (FS_VERBS(rdma_create_id)(M.ec, &it->id, it, RDMA_PS_TCP) != 0)
    reason = FS_REASON_RESOURCES;
  else if (FS_VERBS(rdma_resolve_addr)(it->id, (struct sockaddr *)&src, (struct sockaddr *)&dst, (int)c->policy.timeout_ms) != 0)
    reason = FS_REASON_NO_DEVICE; /* no rdma device behind our address */
  if (reason) {
    fs_cm_drop(it);
    return reason;
  }
  it->c = c;
  it->ring = fs_rdma_ring_size(fs_policy_ring_size());
  it->deadline = fs_clock_ns() + (uint64_t)c->policy.timeout_ms * 1000000u;
  return 0;
}

static void fs_cm_cli_route(struct fs_cm_item *it)
{
  if (!fs_host->may_upgrade(it->c)) {
    fs_cm_drop(it);
    return;
  }
  /* No wake fd yet: it comes at ESTABLISHED (fs_cm_cli_established).
   * Until then the application's calls stay the kernel's own (blind), as
   * they were before the attempt: a peer host that never answers (no rdma
   * device) kept this connection pending for the whole set-up bound, each
   * blocking receive a non-blocking one, a poll on two fds and another
   * receive (sockperf 1.1-1.4x slower than plain across two guests). */
  int rc = fs_rdma_new(it->id, it->ring, 0, &it->r);
  if (rc < 0) {
    fs_log(FS_LOG_INFO, "fd %d: rdma resources: %s", it->c->fd, strerror(-rc));
    fs_cm_cli_fail(it, FS_REASON_RESOURCES);
    return;
  }
  uint64_t addr;
  uint32_t rkey;
  bool whole = fs_rdma_local(it->r, &addr, &rkey);
  struct fs_link *c = it->c;
  struct rdma_conn_param p =
      fs_cm_param(&it->raw, FS_RDMACM_MAGIC_REQ, fs_cm_log2(it->ring), fs_addr_port((struct sockaddr *)&c->local), addr,
                  rkey, whole, c->policy.has_key ? c->policy.key : NULL, (struct sockaddr *)&c->local,
                  (struct sockaddr *)&c->peer, NULL);
  if (FS_VERBS(rdma_connect)(it->id, &p) != 0)
    fs_cm_cli_fail(it, FS_REASON_NO_PEER);
}

static void fs_cm_cli_established(struct fs_cm_item *it, const uint8_t *pd, size_t len)
{
  struct fs_rdmacm_msg m;
  if (len < sizeof m) {
    fs_cm_cli_fail(it, FS_REASON_PROTOCOL);
    return;
  }
  memcpy(&m, pd, sizeof m);
  if (ntohl(m.magic) != FS_RDMACM_MAGIC_ACC || m.version != FS_RDMACM_VERSION || m.ring_log2 != fs_cm_log2(it->ring) || !m.rkey) {
    fs_cm_cli_fail(it, m.version != FS_RDMACM_VERSION ? FS_REASON_VERSION : FS_REASON_PROTOCOL);
    return;
  }
  struct fs_link *c = it->c;
  if (c->policy.has_key && fs_rdmacm_verify(pd, len, c->policy.key, (struct sockaddr *)&c->local,
                                            (struct sockaddr *)&c->peer, it->raw.a.mac, 0, NULL) != 0) {
    fs_log(FS_LOG_INFO, "fd %d: the rdma peer did not prove our rdma_key: stays on tcp", c->fd);
    fs_cm_cli_fail(it, FS_REASON_AUTH); /* the disconnect leaves the peer on tcp too */
    return;
  }
  int status = fs_cm_wake(c, it->r);
  if (status) {
    fs_cm_cli_fail(it, status); /* our disconnect leaves the peer on tcp, unattached */
    return;
  }
  fs_rdma_set_peer(it->r, be64toh(m.addr), ntohl(m.rkey), (ntohl(m.flags) & FS_RDMACM_F_WHOLE) != 0);
  if (fs_host->attach(it->c, fs_rdma_chan(it->r)) != 0) {
    fs_cm_drop(it); /* closed meanwhile; the peer sees the disconnect */
    return;
  }
  fs_cm_attached(it);
}

int fs_cm_rej_reason(int status, const uint8_t *pd, size_t len)
{
  struct fs_rdmacm_rej rej;
  if (len >= sizeof rej) {
    memcpy(&rej, pd, sizeof rej);
    if (ntohl(rej.magic) == FS_RDMACM_MAGIC_REJ && rej.reason > 0 && rej.reason < FS_REASON_COUNT)
      return rej.reason;
  }
  (void)status; /* no listener there (invalid service id): no libfabsock */
  return FS_REASON_NO_PEER;
}

/* ---- accepting end ------------------------------------------------------ */

int fs_rdmacm_listen(struct fs_link *c)
{
  if (!fs_rdmacm_available())
    return -ENODEV;
  struct sockaddr_storage b;
  const struct sockaddr *a = fs_addr_unmap((struct sockaddr *)&c->local, &b);
  for (struct fs_cm_item *it = M.items; it; it = it->next)
    if (it->kind == CM_LISTENER && !it->c && fs_addr_eq((struct sockaddr *)&it->bound, a)) {
      fs_host->get(c); /* adopt the orphan */
      it->c = c;
      return 0;
    }
  struct fs_cm_item *it = fs_cm_new(CM_LISTENER);
  if (!it)
    return -ENOMEM;
  memcpy(&it->bound, a, fs_addr_len(a));
  if (FS_VERBS(rdma_create_id)(M.ec, &it->id, it, RDMA_PS_TCP) != 0 || FS_VERBS(rdma_bind_addr)(it->id, (struct sockaddr *)&it->bound) != 0 ||
      FS_VERBS(rdma_listen)(it->id, 128) != 0) {
    char s[64];
    fs_addr_str(a, s, sizeof s);
    fs_log(FS_LOG_INFO, "no rdma listener beside %s (%s): its connections stay on tcp", s, strerror(errno));
    fs_cm_drop(it);
    return -ENODEV;
  }
  fs_host->get(c);
  it->c = c;
  return 0;
}

void fs_rdmacm_unlisten(struct fs_link *c)
{
  for (struct fs_cm_item *it = M.items; it; it = it->next)
    if (it->kind == CM_LISTENER && it->c == c) {
      it->c = NULL;
      fs_host->put(c);
      return;
    }
}

/* Match a request to an accepted connection and answer it; false: hold. */
static bool fs_cm_srv_try(struct fs_cm_item *it)
{
  struct fs_link *c = fs_host->find((struct sockaddr *)&it->tl, (struct sockaddr *)&it->tp);
  if (!c) {
    struct fs_link *l = it->listener ? it->listener->c : NULL;
    /* io_uring here, or another process holds it; or accepted and closed
     * already (a connection per request, upgrading at once): never found. */
    int why = fs_host->refuse_all();
    if (!why && l && l->listener_shared)
      why = FS_REASON_NOT_OWNER;
    if (!why && fs_diag_ended_look((struct sockaddr *)&it->tl, (struct sockaddr *)&it->tp, &it->look_ns, NULL))
      why = FS_REASON_CLOSED;
    if (why) {
      fs_cm_reject(it, why);
      fs_cm_drop(it);
    }
    return why != 0;
  }
  /* Only until accept() has set it up (opening hooks): not host->hold's
   * wait for the connection's first use, which shm takes.  An rdma_cm
   * request held that long and then orphaned by the accepting process's
   * death left the client's sends hanging (t_rdma_integration's killpeer
   * upgraded at 0 bytes); a connection handed on after an rdma attach goes
   * back to TCP. */
  if (!__atomic_load_n(&c->ready, __ATOMIC_ACQUIRE)) {
    fs_host->put(c);
    return false;
  }
  if (it->held) {
    it->held = false;
    __atomic_fetch_sub(&M.nheld, 1, __ATOMIC_RELAXED);
  }
  int status = fs_host->may_attach(c, geteuid());
  if (status == 0 && c->policy.has_key)
    status = fs_rdmacm_verify(&it->raw, it->req_mac ? sizeof it->raw : 0, c->policy.key, (struct sockaddr *)&c->peer,
                              (struct sockaddr *)&c->local, NULL, fs_cm_wall_ms(), &M.seen);
  if (status == FS_REASON_AUTH)
    fs_host->refused(c, status);
  if (status == 0) {
    int rc = fs_rdma_new(it->id, it->ring, 1, &it->r);
    if (rc < 0) {
      fs_log(FS_LOG_INFO, "fd %d: rdma resources: %s", c->fd, strerror(-rc));
      status = FS_REASON_RESOURCES;
    }
  }
  if (status == 0)
    status = fs_cm_wake(c, it->r);
  if (status != 0) {
    fs_log(FS_LOG_INFO, "rdma rendezvous refused for fd %d: %s", c->fd, fs_reason_name(status));
    fs_cm_reject(it, status);
    fs_host->put(c);
    fs_cm_drop(it);
    return true;
  }
  fs_rdma_set_peer(it->r, it->req.addr, it->req.rkey, (it->req.flags & FS_RDMACM_F_WHOLE) != 0);
  uint64_t addr;
  uint32_t rkey;
  bool whole = fs_rdma_local(it->r, &addr, &rkey);
  struct fs_rdmacm_wire w;
  struct rdma_conn_param p =
      fs_cm_param(&w, FS_RDMACM_MAGIC_ACC, it->req.ring_log2, fs_addr_port((struct sockaddr *)&it->tl), addr, rkey, whole,
                  c->policy.has_key ? c->policy.key : NULL, (struct sockaddr *)&c->peer, (struct sockaddr *)&c->local,
                  it->raw.a.mac);
  it->c = c;
  it->deadline = fs_clock_ns() + (uint64_t)FS_RDMACM_SETUP_MS * 1000000u;
  if (FS_VERBS(rdma_accept)(it->id, &p) != 0)
    fs_cm_drop(it);
  return true;
}

static void fs_cm_srv_request(struct fs_cm_item *l, struct rdma_cm_id *id, const uint8_t *pd, size_t len)
{
  struct fs_cm_item *it = fs_cm_new(CM_SRV);
  if (!it) {
    FS_VERBS(rdma_destroy_id)(id);
    return;
  }
  it->id = id;
  id->context = it;
  it->listener = l;
  int reason = fs_rdmacm_check_req(pd, len, &it->req, &it->req_mac);
  if (!reason)
    memcpy(&it->raw, pd, it->req_mac ? sizeof it->raw : sizeof it->raw.m);
  if (reason) {
    fs_log(FS_LOG_INFO, "rdma connect request refused: %s", fs_reason_name(reason));
    fs_cm_reject(it, reason);
    fs_cm_drop(it);
    return;
  }
  it->ring = 1u << it->req.ring_log2;
  /* The TCP connection it names: the client's address and TCP port, our
   * address and the listening port. */
  struct sockaddr *pa = rdma_get_peer_addr(id), *la = rdma_get_local_addr(id);
  memcpy(&it->tp, pa, fs_addr_len(pa));
  memcpy(&it->tl, la, fs_addr_len(la));
  fs_addr_set_port((struct sockaddr *)&it->tp, it->req.port);
  it->held = true;
  __atomic_fetch_add(&M.nheld, 1, __ATOMIC_RELAXED);
  it->deadline = fs_clock_ns() + (uint64_t)FS_RDMACM_HOLD_MS * 1000000u;
  (void)fs_cm_srv_try(it);
}

static void fs_cm_srv_established(struct fs_cm_item *it)
{
  if (!it->r || !it->c || fs_host->attach(it->c, fs_rdma_chan(it->r)) != 0) {
    fs_cm_drop(it);
    return;
  }
  fs_cm_attached(it);
}

/* ---- events -------------------------------------------------------------- */

static void fs_cm_dispatch(enum rdma_cm_event_type type, int status, struct rdma_cm_id *id, struct rdma_cm_id *lid,
                           const uint8_t *pd, size_t len)
{
  if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
    struct fs_cm_item *l = lid ? lid->context : NULL;
    uint32_t magic = 0;
    if (len >= sizeof magic)
      memcpy(&magic, pd, sizeof magic);
    if (l && l->kind == CM_LISTENER && ntohl(magic) == FS_RDMACM_MAGIC_RES)
      fs_cm_resume_request(id, pd, len);
    else if (l && l->kind == CM_LISTENER)
      fs_cm_srv_request(l, id, pd, len);
    else
      FS_VERBS(rdma_destroy_id)(id);
    return;
  }
  struct fs_cm_item *it = id ? id->context : NULL;
  if (!it)
    return;
  switch (it->kind) {
  case CM_CLI:
    switch (type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      if (FS_VERBS(rdma_resolve_route)(it->id, (int)it->c->policy.timeout_ms) != 0)
        fs_cm_cli_fail(it, FS_REASON_NO_PEER);
      break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      fs_cm_cli_route(it);
      break;
    case RDMA_CM_EVENT_ESTABLISHED:
      fs_cm_cli_established(it, pd, len);
      break;
    case RDMA_CM_EVENT_REJECTED:
      fs_cm_cli_fail(it, fs_cm_rej_reason(status, pd, len));
      break;
    case RDMA_CM_EVENT_ADDR_ERROR:
      fs_cm_cli_fail(it, FS_REASON_NO_DEVICE);
      break;
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      fs_cm_cli_fail(it, FS_REASON_NO_PEER);
      break;
    default:
      break;
    }
    break;
  case CM_SRV:
    if (type == RDMA_CM_EVENT_ESTABLISHED)
      fs_cm_srv_established(it);
    else if (type != RDMA_CM_EVENT_CONNECT_RESPONSE)
      fs_cm_drop(it);
    break;
  case CM_CHAN:
    fs_cm_chan_event(it, type, status, id, pd, len);
    break;
  case CM_LISTENER:
    break;
  }
}

/* Copy what we need, ack, then act: acting may destroy the id, and
 * rdma_destroy_id waits for its events to be acked. */
static void fs_cm_event(void)
{
  struct rdma_cm_event *ev;
  while (M.ec && FS_VERBS(rdma_get_cm_event)(M.ec, &ev) == 0) {
    uint8_t pd[64];
    size_t len = 0;
    enum rdma_cm_event_type type = ev->event;
    int status = ev->status;
    struct rdma_cm_id *id = ev->id, *lid = ev->listen_id;
    if (type == RDMA_CM_EVENT_CONNECT_REQUEST || type == RDMA_CM_EVENT_ESTABLISHED || type == RDMA_CM_EVENT_REJECTED) {
      len = ev->param.conn.private_data_len < sizeof pd ? ev->param.conn.private_data_len : sizeof pd;
      if (len && ev->param.conn.private_data)
        memcpy(pd, ev->param.conn.private_data, len);
      else
        len = 0;
    }
    FS_VERBS(rdma_ack_cm_event)(ev);
    fs_log(FS_LOG_DEBUG, "rdma_cm: %s (%d)", FS_VERBS(rdma_event_str)(type), status);
    fs_cm_dispatch(type, status, id, lid, pd, len);
  }
}

/* ---- housekeeping -------------------------------------------------------- */

void fs_rdmacm_retire(struct fs_rdma *r)
{
  pthread_mutex_lock(&M.rlock);
  if (M.nretired == M.capretired) {
    size_t cap = M.capretired ? 2 * M.capretired : 16;
    struct fs_rdma **n = realloc(M.retired, cap * sizeof *n);
    if (!n) { /* cannot queue it: leak rather than tear down off the agent */
      pthread_mutex_unlock(&M.rlock);
      fs_log(FS_LOG_WARN, "out of memory retiring an rdma channel; leaked");
      return;
    }
    M.retired = n;
    M.capretired = cap;
  }
  M.retired[M.nretired++] = r;
  pthread_mutex_unlock(&M.rlock);
  fs_host->kick();
}

/* A retired channel's end: its item (if any) and the channel itself. */
static void fs_cm_chan_free(struct fs_cm_item *it, struct fs_rdma *r)
{
  if (it) {
    fs_cm_resume_forget(it);
    fs_cm_unlink(it);
    free(it);
  }
  fs_rdma_destroy(r);
}

void fs_rdmacm_resume_kick(void)
{
  __atomic_store_n(&M.resume_news, true, __ATOMIC_RELEASE);
  fs_host->kick();
}

void fs_rdmacm_tick(void)
{
  for (;;) {
    pthread_mutex_lock(&M.rlock);
    struct fs_rdma *r = M.nretired ? M.retired[--M.nretired] : NULL;
    pthread_mutex_unlock(&M.rlock);
    if (!r)
      break;
    struct fs_cm_item *it = M.items;
    while (it && !(it->kind == CM_CHAN && it->r == r))
      it = it->next;
    if (it && fs_rdma_lingering(r)) {
      it->lingering = true; /* its cm events still reach it: a disconnect ends the wait */
      it->deadline = fs_clock_ns() + (uint64_t)(fs_rdma_resume_state(r) ? FS_RDMACM_RESUME_LINGER_MS
                                                                       : FS_RDMACM_LINGER_MS) * 1000000u;
      continue;
    }
    fs_cm_chan_free(it, r);
  }
  uint64_t now = fs_clock_ns();
  fs_cm_resume_tick(now);
  struct fs_cm_item *it = M.items, *next;
  for (; it; it = next) {
    next = it->next;
    if (it->lingering) {
      bool late = now >= it->deadline;
      if (late || !fs_rdma_lingering(it->r)) {
        if (late)
          fs_log(FS_LOG_INFO, "rdma channel %p: our last writes unconfirmed after %d ms; closed anyway",
                 (void *)it->r, FS_RDMACM_LINGER_MS);
        fs_cm_chan_free(it, it->r);
      }
      continue;
    }
    if (it->kind == CM_CLI && it->c && !fs_host->may_upgrade(it->c)) {
      fs_cm_cli_fail(it, FS_REASON_CLOSED); /* closed meanwhile: now, not at the set-up bound */
      continue;
    }
    if (it->kind == CM_SRV && it->held && fs_cm_srv_try(it))
      continue;
    if (it->deadline && now >= it->deadline) {
      if (it->kind == CM_CLI) {
        fs_cm_cli_fail(it, FS_REASON_TIMEOUT);
      } else if (it->kind == CM_SRV) {
        if (it->held)
          fs_cm_reject(it, FS_REASON_TIMEOUT);
        fs_cm_drop(it);
      }
    }
  }
}

/* Retired channels whose last writes are still landing (or not yet looked
 * at); agent lock held. */
static bool fs_rdmacm_draining(void)
{
  pthread_mutex_lock(&M.rlock);
  bool any = M.nretired > 0;
  pthread_mutex_unlock(&M.rlock);
  for (struct fs_cm_item *it = M.items; it && !any; it = it->next)
    any = it->lingering;
  return any;
}

bool fs_rdmacm_exit_drain(uint64_t deadline_ns)
{
  for (;;) {
    fs_cm_event(); /* a peer's disconnect ends its channel's wait */
    fs_rdmacm_tick();
    if (!fs_rdmacm_draining())
      return true;
    if (!fs_clock_nap(deadline_ns, 100000))
      return false;
  }
}

/* rdma set up in this very process: a vfork child that ends with _exit
 * sees its parent's memory, and must not poll the parent's queues. */
bool fs_rdmacm_up(void)
{
  return __atomic_load_n(&M.avail, __ATOMIC_RELAXED) == FS_CM_YES && M.pid == getpid();
}

int fs_rdmacm_next_timeout(void)
{
  uint64_t now = fs_clock_ns(), best = 0;
  for (struct fs_cm_item *it = M.items; it; it = it->next) {
    if (it->held)
      return 5; /* held requests are retried every few ms */
    if (it->lingering)
      return 1; /* the NIC's completion: polled, not waited for */
    if (it->deadline && (!best || it->deadline < best))
      best = it->deadline;
  }
  if (M.nretired || __atomic_load_n(&M.resume_news, __ATOMIC_ACQUIRE))
    return 0;
  int res = fs_cm_resume_next_ms(now);
  int ms = !best ? -1 : best > now ? (int)((best - now) / 1000000u + 1) : 0;
  return res >= 0 && (ms < 0 || res < ms) ? res : ms;
}

bool fs_rdmacm_held(void)
{
  return __atomic_load_n(&M.nheld, __ATOMIC_RELAXED) > 0;
}

void fs_rdmacm_after_fork_child(void)
{
  struct fs_cm_item *it = M.items;
  while (it) {
    struct fs_cm_item *next = it->next;
    if (it->c)
      fs_host->put(it->c);
    free(it); /* ids, queue pairs and rings are the parent's */
    it = next;
  }
  M.items = NULL;
  M.nheld = 0;
  M.nretired = 0;
  fs_lock_fork_reset_mutex(&M.rlock);
  if (M.ec)
    fs_fdreg_close(M.ec->fd);
  M.ec = NULL;
  /* librdmacm opened the verbs devices in the parent and keeps them in its
   * own globals; the child shares those contexts, whose write() commands
   * the kernel refuses to another process (EACCES: the file's credentials
   * are the parent's), and whose registrations pin the parent's memory.
   * So a child of a process that had set rdma up does without it (shm and
   * tcp still work); one forked before that probes afresh. */
  if (M.avail == FS_CM_YES) {
    M.avail = FS_CM_NO;
    M.fork_lost = true;
    fs_log(FS_LOG_INFO, "forked after rdma was set up in the parent: this process uses shm or tcp, not rdma");
  }
}

bool fs_rdmacm_fork_lost(void)
{
  return M.fork_lost;
}
/* ---- the fabric's ops (fabric/fabric.h) --------------------------------- */

static bool fs_cm_listen_op(struct fs_link *l, int fd)
{
  (void)fd;
  /* No other host reaches a loopback address: no rdma listener, and no
   * device probe for it (PostgreSQL's default listen_addresses). */
  if (fs_addr_is_loopback((const struct sockaddr *)&l->local))
    return false;
  /* The device probe this may do costs once per process. */
  return fs_rdmacm_listen(l) == 0;
}

static bool fs_cm_reachable(struct fs_link *l)
{
  (void)l;
  return __atomic_load_n(&M.avail, __ATOMIC_RELAXED) == FS_CM_UNPROBED || fs_rdmacm_up();
}

static int fs_cm_connect_op(struct fs_link *l)
{
  if (!fs_rdmacm_available())
    return fs_rdmacm_fork_lost()                 ? FS_REASON_FORK
           : l->policy.fabric == FS_FABRIC_RDMA ? FS_REASON_NO_DEVICE
                                                : FS_REASON_REMOTE_HOST;
  return fs_rdmacm_connect(l);
}

const struct fs_fabric_ops fs_rdma_fabric = {
  .name = "rdma",
  .id = FS_FABRIC_RDMA,
  .listen = fs_cm_listen_op,
  .unlisten = fs_rdmacm_unlisten,
  .serve_proc = fs_fabric_nop_true, /* nothing to serve: a queue pair cannot follow a fork (fork_shares) */
  .connect = fs_cm_connect_op,
  .tick = fs_rdmacm_tick,
  .next_timeout = fs_rdmacm_next_timeout,
  .held = fs_rdmacm_held,
  .reachable = fs_cm_reachable,
  .after_fork_child = fs_rdmacm_after_fork_child,
  .creds_changed = fs_fabric_nop, /* the peer's key or address proves it, not a uid */
  .exit_pending = fs_rdmacm_up,
  .exit_drain = fs_rdmacm_exit_drain,
};

