/* SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), for the rdma
 * rendezvous's pre-shared-key authentication (fabric/rdma/rdmacm.h) and for turning
 * a key file into a key (policy/).  Small and dependency-free: libfabsock
 * lives in other people's processes and must not pull a crypto library into
 * them.  Pure functions, any thread. */
#ifndef FS_BASE_HMAC_H
#define FS_BASE_HMAC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FS_HMAC_LEN 32   /* SHA-256 digest bytes */
#define FS_HMAC_BLOCK 64 /* SHA-256 block bytes */

struct fs_hmac_sha {
  uint32_t h[8];
  uint64_t len;                  /* bytes hashed so far */
  uint8_t buf[FS_HMAC_BLOCK];
  size_t nbuf;
};

struct fs_hmac {
  struct fs_hmac_sha inner, outer;
};

void fs_hmac_sha_init(struct fs_hmac_sha *s);
void fs_hmac_sha_update(struct fs_hmac_sha *s, const void *data, size_t len);
void fs_hmac_sha_final(struct fs_hmac_sha *s, uint8_t out[FS_HMAC_LEN]);

/* HMAC-SHA-256 with a key of any length. */
void fs_hmac_init(struct fs_hmac *h, const void *key, size_t klen);
void fs_hmac_update(struct fs_hmac *h, const void *data, size_t len);
void fs_hmac_final(struct fs_hmac *h, uint8_t out[FS_HMAC_LEN]);

/* a == b over n bytes, in time independent of where they differ. */
bool fs_hmac_equal(const void *a, const void *b, size_t n);

#endif
