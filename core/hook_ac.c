#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/hook_ac.h"
#include "core/hook_trie.h"

#define NONE UINT32_MAX
#define MATCH 0x80000000u  /* in a goto entry: the target ends a pattern */

/* States are named by sid = index << sbits (premultiplied: a goto entry is
 * the target's sid, so a step is one add and one load); MATCH is or'ed into
 * goto entries only, never into a state carried between calls. */
struct fs_hook_ac {
  uint32_t nstates;
  uint32_t ndense;       /* states [0, ndense) have a goto row */
  uint32_t nshallow;     /* states [0, nshallow) are the root and depth 1 */
  unsigned sbits;        /* a row has 1 << sbits entries (byte classes) */
  uint32_t shallow_lim, dense_lim; /* nshallow << sbits, ndense << sbits */
  uint8_t cls[256];      /* byte -> class: bytes in no pattern share one */
  uint32_t *dense;       /* ndense << sbits goto entries */
  uint32_t *fail;        /* per state: index of the failure state */
  uint32_t *edge_start;  /* nstates + 1: sorted child edges, for deep states */
  uint8_t *edge_label;
  uint32_t *edge_target; /* index */
  uint32_t *out_cnt;     /* patterns ending in the state (with suffixes) */
  uint32_t *out_pat;     /* longest of them, NONE if out_cnt == 0 */
  uint8_t pair8[65536];       /* [c << 8 | p]: see core/hook_ac.h */
  uint64_t pair[65536 / 64];  /* the same as bits, for rank */
  uint32_t rank[65536 / 64];  /* set pair bits before each pair word */
  uint64_t *boring;      /* 4 words per set pair bit, see calm() */
  size_t mem;
};

/* ---- automaton ------------------------------------------------------------ */

/* Goto entry of any state (by index) on byte c: deep states follow failure
 * links down to a dense one. */
static uint32_t step_index(const struct fs_hook_ac *ac, uint32_t s, uint8_t c)
{
  while (s >= ac->ndense) {
    uint32_t lo = ac->edge_start[s], hi = ac->edge_start[s + 1];
    while (lo < hi) {
      uint32_t mid = (lo + hi) / 2;
      if (ac->edge_label[mid] < c)
        lo = mid + 1;
      else
        hi = mid;
    }
    if (lo < ac->edge_start[s + 1] && ac->edge_label[lo] == c) {
      uint32_t t = ac->edge_target[lo];
      return t << ac->sbits | (ac->out_cnt[t] ? MATCH : 0);
    }
    s = ac->fail[s];
  }
  return ac->dense[(s << ac->sbits) + ac->cls[c]];
}

static inline uint32_t step(const struct fs_hook_ac *ac, uint32_t sid, uint8_t c)
{
  if (sid < ac->dense_lim)
    return ac->dense[sid + ac->cls[c]];
  return step_index(ac, sid >> ac->sbits, c);
}

static int cmp_label(const void *a, const void *b, void *lab)
{
  const uint8_t *l = lab;
  return (int)l[*(const uint32_t *)a] - (int)l[*(const uint32_t *)b];
}

/* Byte classes: every byte that occurs in a pattern is its own class, all
 * others share class 0 (they always lead to the root).  Rows are padded to a
 * power of two. */
static void make_classes(struct fs_hook_ac *ac, const struct fs_hook_trie *t)
{
  uint8_t seen[256] = { 0 };
  unsigned n = 0, k = 0;
  for (uint32_t i = 1; i < t->n; i++)
    seen[t->label[i]] = 1;
  for (unsigned c = 0; c < 256; c++)
    n += seen[c];
  k = n < 256; /* class 0 for the absent bytes, if any */
  for (unsigned c = 0; c < 256; c++)
    ac->cls[c] = seen[c] ? (uint8_t)k++ : 0;
  ac->sbits = 0;
  while ((1u << ac->sbits) < k)
    ac->sbits++;
}

static inline unsigned popcount64(uint64_t x) /* SWAR: no -mpopcnt needed */
{
  x = x - ((x >> 1) & 0x5555555555555555ull);
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
  return (unsigned)((x * 0x0101010101010101ull) >> 56);
}

/* Skip tables (see core/hook_ac.h).  pair: may reading c in the shallow state
 * reached by p leave the shallow states or end a pattern?  boring, for each
 * set pair bit, 256 bits over the next byte d: after p c d are we back in a
 * shallow state with no match on the way?  The scanner then skips the three
 * bytes without touching goto rows. */
static int make_skip_tables(struct fs_hook_ac *ac)
{
  /* Everything depends on bytes only through their classes: decide per
   * class pair, then expand to bytes. */
  const uint32_t w = 1u << ac->sbits;
  uint8_t *pc = malloc((size_t)w * w);
  uint32_t npairs = 0;
  if (pc == NULL)
    return -ENOMEM;
  for (uint32_t kp = 0; kp < w; kp++) {
    uint32_t sp = ac->dense[kp] & ~MATCH; /* shallow, after a byte of class kp */
    for (uint32_t kc = 0; kc < w; kc++) {
      uint32_t x = ac->dense[sp + kc];
      pc[kp * w + kc] = (x & MATCH) || x >= ac->shallow_lim;
    }
  }
  /* Row c of the tables (all p) depends on the class of c only: build one
   * per class, copy it to every byte of the class. */
  int first[256]; /* first byte of each class, -1 before it was seen */
  for (uint32_t k = 0; k < w; k++)
    first[k] = -1;
  for (unsigned c = 0; c < 256; c++) {
    uint32_t kc = ac->cls[c];
    if (first[kc] < 0) {
      first[kc] = (int)c;
      for (unsigned p = 0; p < 256; p++)
        if (pc[ac->cls[p] * w + kc]) {
          ac->pair[(c << 8 | p) >> 6] |= 1ull << (p & 63);
          ac->pair8[c << 8 | p] = 1;
        }
    } else {
      unsigned c0 = (unsigned)first[kc];
      memcpy(&ac->pair8[c << 8], &ac->pair8[c0 << 8], 256);
      memcpy(&ac->pair[c << 2], &ac->pair[c0 << 2], 4 * sizeof ac->pair[0]);
    }
    for (unsigned k = 0; k < 4; k++)
      npairs += popcount64(ac->pair[c << 2 | k]);
  }
  free(pc);
  ac->boring = calloc((size_t)npairs * 4 + 1, sizeof *ac->boring);
  if (ac->boring == NULL)
    return -ENOMEM;
  ac->mem += (size_t)npairs * 32;
  uint8_t calm_cls[256];
  uint32_t r = 0;
  for (unsigned wd = 0; wd < 1024; wd++) {
    ac->rank[wd] = r;
    for (uint64_t bits = ac->pair[wd]; bits; bits &= bits - 1, r++) {
      unsigned idx = wd << 6 | (unsigned)__builtin_ctzll(bits); /* c << 8 | p */
      uint32_t x = step(ac, ac->dense[ac->cls[idx & 255]] & ~MATCH, (uint8_t)(idx >> 8));
      if (x & MATCH)
        continue;
      for (uint32_t kd = 0; kd < w; kd++) {
        uint32_t y = x < ac->dense_lim ? ac->dense[x + kd] : NONE;
        calm_cls[kd] = !(y & MATCH) && y < ac->shallow_lim;
      }
      for (unsigned d = 0; d < 256; d++) {
        int calm = x < ac->dense_lim ? calm_cls[ac->cls[d]] : 0;
        if (x >= ac->dense_lim) { /* compact state: no row to read */
          uint32_t y = step(ac, x, (uint8_t)d);
          calm = !(y & MATCH) && y < ac->shallow_lim;
        }
        if (calm)
          ac->boring[(size_t)r * 4 + (d >> 6)] |= 1ull << (d & 63);
      }
    }
  }
  return 0;
}

int fs_hook_ac_build(const struct fs_hook_ac_pattern *pats, uint32_t n, size_t dense_limit,
                     struct fs_hook_ac **out)
{
  struct fs_hook_trie t = { 0 };
  struct fs_hook_ac *ac = NULL;
  uint32_t *order = NULL, *newid = NULL, *kids = NULL;
  int rc = fs_hook_trie_build(&t, pats, n, FS_HOOK_AC_MAX_STATES);
  if (rc < 0)
    goto done;
  rc = -ENOMEM;
  uint32_t N = t.n;
  /* Breadth-first numbering: order[new] = old, newid[old] = new. */
  order = malloc(N * sizeof *order);
  newid = malloc(N * sizeof *newid);
  kids = malloc(256 * sizeof *kids);
  ac = calloc(1, sizeof *ac);
  if (!order || !newid || !kids || !ac)
    goto done;
  uint32_t head = 0, tail = 0;
  order[tail++] = 0;
  while (head < tail) {
    uint32_t u = order[head++];
    for (uint32_t k = t.first[u]; k != NONE; k = t.next[k])
      order[tail++] = k;
  }
  for (uint32_t i = 0; i < N; i++)
    newid[order[i]] = i;

  make_classes(ac, &t);
  if (dense_limit == 0)
    dense_limit = FS_HOOK_AC_DENSE_DEFAULT;
  ac->nstates = N;
  ac->nshallow = 1;
  for (uint32_t k = t.first[0]; k != NONE; k = t.next[k])
    ac->nshallow++;
  size_t nd = dense_limit / (sizeof(uint32_t) << ac->sbits);
  ac->ndense = nd >= N ? N : nd < ac->nshallow ? ac->nshallow : (uint32_t)nd;
  ac->shallow_lim = ac->nshallow << ac->sbits;
  ac->dense_lim = ac->ndense << ac->sbits;
  size_t nedges = N - 1;
  ac->dense = malloc(((size_t)ac->ndense << ac->sbits) * sizeof *ac->dense);
  ac->fail = malloc(N * sizeof *ac->fail);
  ac->edge_start = malloc(((size_t)N + 1) * sizeof *ac->edge_start);
  ac->edge_label = malloc(nedges + 1);
  ac->edge_target = malloc((nedges + 1) * sizeof *ac->edge_target);
  ac->out_cnt = malloc(N * sizeof *ac->out_cnt);
  ac->out_pat = malloc(N * sizeof *ac->out_pat);
  if (!ac->dense || !ac->fail || !ac->edge_start || !ac->edge_label || !ac->edge_target ||
      !ac->out_cnt || !ac->out_pat)
    goto done;
  ac->mem = sizeof *ac + ((size_t)ac->ndense << ac->sbits) * 4 + (size_t)N * 17 + nedges * 5;

  /* Edges in new numbering, sorted by label. */
  uint32_t e = 0;
  for (uint32_t s = 0; s < N; s++) {
    uint32_t nk = 0;
    ac->edge_start[s] = e;
    for (uint32_t k = t.first[order[s]]; k != NONE; k = t.next[k])
      kids[nk++] = k;
    if (nk > 1)
      qsort_r(kids, nk, sizeof *kids, cmp_label, t.label);
    for (uint32_t i = 0; i < nk; i++, e++) {
      ac->edge_label[e] = t.label[kids[i]];
      ac->edge_target[e] = newid[kids[i]];
    }
  }
  ac->edge_start[N] = e;

  /* Failure links, outputs and goto rows, breadth-first: everything a state
   * needs comes from shallower states, which come first. */
  ac->fail[0] = 0;
  ac->out_cnt[0] = 0;
  ac->out_pat[0] = NONE;
  const uint32_t width = 1u << ac->sbits;
  for (uint32_t s = 0; s < N; s++) {
    for (uint32_t i = ac->edge_start[s]; i < ac->edge_start[s + 1]; i++) {
      uint32_t v = ac->edge_target[i], f = 0;
      if (s != 0)
        f = (step_index(ac, ac->fail[s], ac->edge_label[i]) & ~MATCH) >> ac->sbits;
      uint32_t own = t.pat[order[v]];
      ac->fail[v] = f;
      ac->out_cnt[v] = ac->out_cnt[f] + (own != NONE);
      ac->out_pat[v] = own != NONE ? own : ac->out_pat[f];
    }
    if (s < ac->ndense) {
      uint32_t *row = ac->dense + ((size_t)s << ac->sbits);
      if (s == 0)
        memset(row, 0, width * sizeof *row);
      else
        memcpy(row, ac->dense + ((size_t)ac->fail[s] << ac->sbits), width * sizeof *row);
      for (uint32_t i = ac->edge_start[s]; i < ac->edge_start[s + 1]; i++) {
        uint32_t v = ac->edge_target[i];
        row[ac->cls[ac->edge_label[i]]] = v << ac->sbits | (ac->out_cnt[v] ? MATCH : 0);
      }
    }
  }
  if (make_skip_tables(ac) < 0)
    goto done;
  *out = ac;
  ac = NULL;
  rc = 0;
done:
  fs_hook_trie_free(&t);
  free(order), free(newid), free(kids);
  fs_hook_ac_free(ac);
  return rc;
}

void fs_hook_ac_free(struct fs_hook_ac *ac)
{
  if (ac == NULL)
    return;
  free(ac->dense), free(ac->fail), free(ac->edge_start), free(ac->edge_label);
  free(ac->edge_target), free(ac->out_cnt), free(ac->out_pat), free(ac->boring);
  free(ac);
}

/* ---- scanning ------------------------------------------------------------- */

/* Pair bits are indexed by c << 8 | p: the bytes "p c" read as a
 * little-endian 16-bit number (the compiler makes it one load). */
static inline unsigned pidx(const uint8_t *b)
{
  return (unsigned)b[0] | (unsigned)b[1] << 8;
}

/* b[0] b[1] has its pair bit set: does b[2] lead back to a shallow state with
 * no match on the way? */
static inline int calm(const struct fs_hook_ac *ac, const uint8_t *b)
{
  unsigned i = pidx(b), d = b[2];
  uint64_t below = ac->pair[i >> 6] & ((1ull << (i & 63)) - 1);
  size_t r = ac->rank[i >> 6] + popcount64(below);
  return (int)((ac->boring[r * 4 + (d >> 6)] >> (d & 63)) & 1);
}

/* From position j (>= 1) in the shallow state reached by buf[j-1]: the first
 * position where that no longer holds or that may end a match, or len. */
static size_t skip(const struct fs_hook_ac *ac, const uint8_t *buf, size_t j, size_t len)
{
  const uint8_t *p8 = ac->pair8;
  for (;;) {
    while (j + 8 <= len) {
      const uint8_t *b = buf + j - 1;
      if (p8[pidx(b)] | p8[pidx(b + 1)] | p8[pidx(b + 2)] | p8[pidx(b + 3)] |
          p8[pidx(b + 4)] | p8[pidx(b + 5)] | p8[pidx(b + 6)] | p8[pidx(b + 7)])
        break;
      j += 8;
    }
    while (j < len && !p8[pidx(buf + j - 1)])
      j++;
    if (j + 1 >= len || !calm(ac, buf + j - 1))
      return j;
    j += 2;
  }
}

/* The skip tables pay off when matches of pattern prefixes are rare (binary
 * patterns, random or unrelated data); on text full of prefixes (an English
 * word list over English) exits from the tight loop cost more than they save.
 * So after SKIP_TRIES skips in a row that each gained less than SKIP_GAIN
 * bytes, the next PLAIN_RUN bytes are walked without them. */
#define SKIP_GAIN 8
#define SKIP_TRIES 8
#define PLAIN_RUN 16384

size_t fs_hook_ac_scan(const struct fs_hook_ac *ac, uint32_t *state, const uint8_t *buf,
                       size_t len, uint32_t *nmatch)
{
  const uint32_t *dense = ac->dense;
  const uint8_t *cls = ac->cls;
  uint32_t s = *state;
  size_t i = 0, plain_end = 0;
  unsigned short_skips = 0;
  while (i < len) {
    /* Plain states (walked in the tight loop): dense, not shallow unless in
     * a plain run, not a match (match entries are >= MATCH). */
    uint32_t lo = ac->shallow_lim;
    size_t end = len;
    if (i < plain_end) {
      lo = 0;
      end = plain_end < len ? plain_end : len;
    } else if (s < lo && i > 0) {
      size_t j = skip(ac, buf, i, len);
      if (j - i >= SKIP_GAIN) {
        short_skips = 0;
      } else if (++short_skips == SKIP_TRIES) {
        short_skips = 0;
        plain_end = j + PLAIN_RUN;
      }
      if (j > i) {
        s = dense[cls[buf[j - 1]]] & ~MATCH;
        i = j;
        if (i == len)
          break;
      }
    }
    const uint32_t span = ac->dense_lim - lo;
    uint32_t e = step(ac, s, buf[i++]);
    while (e - lo < span && i < end)
      e = dense[e + cls[buf[i++]]];
    if (e & MATCH) {
      *state = e & ~MATCH;
      *nmatch = ac->out_cnt[*state >> ac->sbits];
      return i;
    }
    s = e;
  }
  *state = s;
  *nmatch = 0;
  return len;
}

uint32_t fs_hook_ac_state_pattern(const struct fs_hook_ac *ac, uint32_t state)
{
  state >>= ac->sbits;
  return state < ac->nstates ? ac->out_pat[state] : NONE;
}

uint32_t fs_hook_ac_states(const struct fs_hook_ac *ac)
{
  return ac->nstates;
}

uint32_t fs_hook_ac_dense_states(const struct fs_hook_ac *ac)
{
  return ac->ndense;
}

size_t fs_hook_ac_memory(const struct fs_hook_ac *ac)
{
  return ac->mem;
}
