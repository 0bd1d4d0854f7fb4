/* The rdma_cm private-data messages (fabric/rdma/rdmacm.h): checks, seals
 * and authenticators.  Pure: built in every configuration, for the fuzzer
 * and the unit tests. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <string.h>

#include "base/addr.h"
#include "base/hmac.h"
#include "fabric/rdma/rdmacm.h"
#include "base/reason.h"

int fs_rdmacm_check_req(const void *data, size_t len, struct fs_rdmacm_msg *out, bool *has_mac)
{
  struct fs_rdmacm_msg m;
  if (!data || len < sizeof m)
    return FS_REASON_PROTOCOL;
  memcpy(&m, data, sizeof m);
  if (ntohl(m.magic) != FS_RDMACM_MAGIC_REQ && ntohl(m.magic) != FS_RDMACM_MAGIC_RES)
    return FS_REASON_PROTOCOL;
  if (m.version != FS_RDMACM_VERSION)
    return FS_REASON_VERSION;
  uint32_t flags = ntohl(m.flags);
  if (m.ring_log2 < FS_RDMACM_RING_LOG2_MIN || m.ring_log2 > FS_RDMACM_RING_LOG2_MAX ||
      (flags & ~(FS_RDMACM_F_MAC | FS_RDMACM_F_WHOLE)) != 0 || ((flags & FS_RDMACM_F_MAC) && len < sizeof(struct fs_rdmacm_wire)) ||
      m.port == 0 || m.rkey == 0)
    return FS_REASON_PROTOCOL;
  out->magic = ntohl(m.magic);
  out->version = m.version;
  out->ring_log2 = m.ring_log2;
  out->port = ntohs(m.port);
  out->addr = be64toh(m.addr);
  out->rkey = ntohl(m.rkey);
  out->flags = flags;
  *has_mac = (flags & FS_RDMACM_F_MAC) != 0;
  return 0;
}

/* One end of the TCP connection as the MAC covers it: 16-byte IP (IPv4
 * mapped, so an AF_INET and a v4-mapped AF_INET6 view agree), port. */
static void fs_rdmacm_mac_addr(struct fs_hmac *h, const struct sockaddr *sa)
{
  uint8_t b[18] = { 0 };
  struct fs_addr_ip k;
  fs_addr_ip_of(sa, &k);
  if (k.family == AF_INET) {
    b[10] = b[11] = 0xff;
    memcpy(b + 12, k.ip, 4);
  } else if (k.family == AF_INET6) {
    memcpy(b, k.ip, 16);
  }
  memcpy(b + 16, &k.port_be, 2);
  fs_hmac_update(h, b, sizeof b);
}

static void fs_rdmacm_mac(const struct fs_rdmacm_wire *w, const uint8_t key[32], const struct sockaddr *client,
                          const struct sockaddr *server, const uint8_t *bind, uint8_t out[FS_RDMACM_MAC_LEN])
{
  static const char label[17] = "fabsock-rdmacm-v1";
  struct fs_hmac h;
  uint8_t d[FS_HMAC_LEN];
  fs_hmac_init(&h, key, FS_HMAC_LEN);
  fs_hmac_update(&h, label, sizeof label);
  fs_hmac_update(&h, w, offsetof(struct fs_rdmacm_wire, a.mac));
  fs_rdmacm_mac_addr(&h, client);
  fs_rdmacm_mac_addr(&h, server);
  if (bind)
    fs_hmac_update(&h, bind, FS_RDMACM_MAC_LEN);
  fs_hmac_final(&h, d);
  memcpy(out, d, FS_RDMACM_MAC_LEN);
  memset(&h, 0, sizeof h);
}

void fs_rdmacm_seal(struct fs_rdmacm_wire *w, const uint8_t key[32], const struct sockaddr *client,
                    const struct sockaddr *server, const uint8_t *bind, uint64_t now_ms)
{
  w->m.flags = htonl(ntohl(w->m.flags) | FS_RDMACM_F_MAC);
  w->a.time_ms = htobe64(now_ms);
  fs_rdmacm_mac(w, key, client, server, bind, w->a.mac);
}

int fs_rdmacm_verify(const void *data, size_t len, const uint8_t key[32], const struct sockaddr *client,
                     const struct sockaddr *server, const uint8_t *bind, uint64_t now_ms,
                     struct fs_rdmacm_seen *seen)
{
  struct fs_rdmacm_wire w;
  uint8_t mac[FS_RDMACM_MAC_LEN];
  if (!data || len < sizeof w)
    return FS_REASON_AUTH;
  memcpy(&w, data, sizeof w);
  if (!(ntohl(w.m.flags) & FS_RDMACM_F_MAC))
    return FS_REASON_AUTH;
  fs_rdmacm_mac(&w, key, client, server, bind, mac);
  if (!fs_hmac_equal(mac, w.a.mac, sizeof mac))
    return FS_REASON_AUTH;
  if (bind)
    return 0; /* an accept answers our own fresh request */
  uint64_t t = be64toh(w.a.time_ms);
  if ((t > now_ms ? t - now_ms : now_ms - t) > FS_RDMACM_AUTH_WINDOW_MS)
    return FS_REASON_AUTH;
  if (!seen)
    return 0;
  size_t slot = 0;
  for (size_t i = 0; i < FS_RDMACM_SEEN; i++) {
    if (seen->time_ms[i] && fs_hmac_equal(seen->mac[i], mac, sizeof mac))
      return FS_REASON_AUTH; /* a replay */
    if (seen->time_ms[i] < seen->time_ms[slot])
      slot = i; /* the oldest (or an empty one) makes room */
  }
  memcpy(seen->mac[slot], mac, sizeof mac);
  seen->time_ms[slot] = t ? t : 1;
  return 0;
}

