/* SHA-256 and HMAC-SHA-256 (see base/hmac.h), written from FIPS 180-4 and
 * RFC 2104; tests/unit/check_hmac runs the FIPS and RFC 4231 vectors. */
#include <string.h>

#include "base/hmac.h"

static const uint32_t fs_hmac_k[64] = {
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t fs_hmac_ror(uint32_t x, unsigned n)
{
  return x >> n | x << (32 - n);
}

static void fs_hmac_block(uint32_t h[8], const uint8_t p[FS_HMAC_BLOCK])
{
  uint32_t w[64];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = fs_hmac_ror(w[i - 15], 7) ^ fs_hmac_ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = fs_hmac_ror(w[i - 2], 17) ^ fs_hmac_ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = k + (fs_hmac_ror(e, 6) ^ fs_hmac_ror(e, 11) ^ fs_hmac_ror(e, 25)) + ((e & f) ^ (~e & g)) +
                  fs_hmac_k[i] + w[i];
    uint32_t t2 = (fs_hmac_ror(a, 2) ^ fs_hmac_ror(a, 13) ^ fs_hmac_ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
  h[5] += f;
  h[6] += g;
  h[7] += k;
}

void fs_hmac_sha_init(struct fs_hmac_sha *s)
{
  static const uint32_t iv[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                  0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
  memcpy(s->h, iv, sizeof iv);
  s->len = 0;
  s->nbuf = 0;
}

void fs_hmac_sha_update(struct fs_hmac_sha *s, const void *data, size_t len)
{
  const uint8_t *p = data;
  s->len += len;
  if (s->nbuf) {
    size_t n = FS_HMAC_BLOCK - s->nbuf < len ? FS_HMAC_BLOCK - s->nbuf : len;
    memcpy(s->buf + s->nbuf, p, n);
    s->nbuf += n;
    p += n;
    len -= n;
    if (s->nbuf < FS_HMAC_BLOCK)
      return;
    fs_hmac_block(s->h, s->buf);
    s->nbuf = 0;
  }
  for (; len >= FS_HMAC_BLOCK; p += FS_HMAC_BLOCK, len -= FS_HMAC_BLOCK)
    fs_hmac_block(s->h, p);
  if (len) {
    memcpy(s->buf, p, len);
    s->nbuf = len;
  }
}

void fs_hmac_sha_final(struct fs_hmac_sha *s, uint8_t out[FS_HMAC_LEN])
{
  uint64_t bits = s->len * 8;
  /* 0x80, zeros to 56 mod 64, then the length in bits, big-endian */
  uint8_t pad[FS_HMAC_BLOCK + 8] = { 0x80 };
  size_t n = (s->nbuf < 56 ? 56 : 120) - s->nbuf;
  for (int i = 0; i < 8; i++)
    pad[n + (size_t)i] = (uint8_t)(bits >> (56 - 8 * i));
  fs_hmac_sha_update(s, pad, n + 8);
  for (int i = 0; i < 8; i++) {
    out[4 * i] = (uint8_t)(s->h[i] >> 24);
    out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
    out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
    out[4 * i + 3] = (uint8_t)s->h[i];
  }
  memset(s, 0, sizeof *s);
}

void fs_hmac_init(struct fs_hmac *h, const void *key, size_t klen)
{
  uint8_t k[FS_HMAC_BLOCK] = { 0 }, pad[FS_HMAC_BLOCK];
  if (klen > FS_HMAC_BLOCK) { /* a long key is replaced by its digest */
    fs_hmac_sha_init(&h->inner);
    fs_hmac_sha_update(&h->inner, key, klen);
    fs_hmac_sha_final(&h->inner, k);
  } else if (klen) {
    memcpy(k, key, klen);
  }
  for (int i = 0; i < FS_HMAC_BLOCK; i++)
    pad[i] = k[i] ^ 0x36;
  fs_hmac_sha_init(&h->inner);
  fs_hmac_sha_update(&h->inner, pad, sizeof pad);
  for (int i = 0; i < FS_HMAC_BLOCK; i++)
    pad[i] = k[i] ^ 0x5c;
  fs_hmac_sha_init(&h->outer);
  fs_hmac_sha_update(&h->outer, pad, sizeof pad);
  memset(k, 0, sizeof k);
  memset(pad, 0, sizeof pad);
}

void fs_hmac_update(struct fs_hmac *h, const void *data, size_t len)
{
  fs_hmac_sha_update(&h->inner, data, len);
}

void fs_hmac_final(struct fs_hmac *h, uint8_t out[FS_HMAC_LEN])
{
  uint8_t d[FS_HMAC_LEN];
  fs_hmac_sha_final(&h->inner, d);
  fs_hmac_sha_update(&h->outer, d, sizeof d);
  fs_hmac_sha_final(&h->outer, out);
  memset(d, 0, sizeof d);
}

bool fs_hmac_equal(const void *a, const void *b, size_t n)
{
  const volatile uint8_t *x = a, *y = b;
  uint8_t acc = 0;
  for (size_t i = 0; i < n; i++)
    acc |= (uint8_t)(x[i] ^ y[i]);
  return acc == 0;
}
