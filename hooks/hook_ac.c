#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hooks/hook_ac.h"
#include "hooks/hook_trie.h"

#define NONE UINT32_MAX
#define MATCH 0x80000000u  /* in a goto entry: the target ends a pattern */

/* States are named by sid = index << sbits (premultiplied: a goto entry is
 * the target's sid, so a step is one add and one load); MATCH is or'ed into
 * goto entries only, never into a state carried between calls.  States are
 * numbered breadth-first, so a state's depth grows with its sid. */
struct fs_hook_ac {
  uint32_t nstates;
  uint32_t ndense;       /* states [0, ndense) have a goto row */
  unsigned sbits;        /* a row has 1 << sbits entries (byte classes) */
  uint32_t dense_lim;    /* ndense << sbits */
  uint8_t cls[256];      /* byte -> class: bytes in no pattern share one */
  uint32_t *dense;       /* ndense << sbits goto entries */
  uint32_t *fail;        /* per state: index of the failure state */
  uint32_t *edge_start;  /* nstates + 1: sorted child edges, for deep states */
  uint8_t *edge_label;
  uint32_t *edge_target; /* index */
  uint32_t *out_cnt;     /* patterns ending in the state (with suffixes) */
  uint32_t *out_pat;     /* longest of them, NONE if out_cnt == 0 */
  uint32_t maxdepth;     /* the longest pattern */
  uint32_t *depth_lim;   /* [k], k <= maxdepth + 1: sid of the first state of depth >= k */
  uint32_t fmask;        /* the filter hashes the first fwidth bytes: x & fmask */
  unsigned fshift;       /* 32 - log2(filter buckets) */
  uint8_t *filter;       /* hashed starts of patterns, see cand() */
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

/* The start filter (see hooks/hook_ac.h): a byte per hash bucket of the
 * first fwidth = min(4, shortest pattern) bytes of every pattern, about 256
 * buckets per pattern (few false positives), at most 2^20 (1 MiB).  Bytes
 * rather than bits: a test is one load, which is what the scan loop does. */
static uint32_t filter_hash(const struct fs_hook_ac *ac, uint32_t x)
{
  return ((x & ac->fmask) * 0x9e3779b1u) >> ac->fshift;
}

static int make_filter(struct fs_hook_ac *ac, const struct fs_hook_ac_pattern *pats, uint32_t n)
{
  uint32_t w = 4;
  unsigned bits = 12;
  for (uint32_t i = 0; i < n; i++)
    if (pats[i].len < w)
      w = pats[i].len;
  while (bits < 20 && (1ull << bits) < (uint64_t)n * 256)
    bits++;
  ac->fmask = w == 4 ? UINT32_MAX : (1u << (8 * w)) - 1;
  ac->fshift = 32 - bits;
  ac->filter = calloc((size_t)1 << bits, 1);
  if (ac->filter == NULL)
    return -ENOMEM;
  ac->mem += (size_t)1 << bits;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t x = 0;
    for (uint32_t k = 0; k < w; k++)
      x |= (uint32_t)pats[i].p[k] << (8 * k); /* as a little-endian load reads them */
    ac->filter[filter_hash(ac, x)] = 1;
  }
  return 0;
}

int fs_hook_ac_build(const struct fs_hook_ac_pattern *pats, uint32_t n, size_t dense_limit,
                     struct fs_hook_ac **out)
{
  struct fs_hook_trie t = { 0 };
  struct fs_hook_ac *ac = NULL;
  uint32_t *order = NULL, *newid = NULL, *kids = NULL, *depth = NULL;
  int rc = fs_hook_trie_build(&t, pats, n, FS_HOOK_AC_MAX_STATES);
  if (rc < 0)
    goto done;
  rc = -ENOMEM;
  uint32_t N = t.n;
  /* Breadth-first numbering: order[new] = old, newid[old] = new. */
  order = malloc(N * sizeof *order);
  newid = malloc(N * sizeof *newid);
  kids = malloc(256 * sizeof *kids);
  depth = malloc(N * sizeof *depth);
  ac = calloc(1, sizeof *ac);
  if (!order || !newid || !kids || !depth || !ac)
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
  uint32_t nshallow = 1; /* the root and depth 1: always dense */
  for (uint32_t k = t.first[0]; k != NONE; k = t.next[k])
    nshallow++;
  size_t nd = dense_limit / (sizeof(uint32_t) << ac->sbits);
  ac->ndense = nd >= N ? N : nd < nshallow ? nshallow : (uint32_t)nd;
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
  depth[0] = 0;
  const uint32_t width = 1u << ac->sbits;
  for (uint32_t s = 0; s < N; s++) {
    for (uint32_t i = ac->edge_start[s]; i < ac->edge_start[s + 1]; i++) {
      uint32_t v = ac->edge_target[i], f = 0;
      depth[v] = depth[s] + 1;
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
  /* depth_lim[k]: the first sid of depth >= k (depth grows with the index). */
  ac->maxdepth = depth[N - 1];
  ac->depth_lim = malloc((ac->maxdepth + 2) * sizeof *ac->depth_lim);
  if (ac->depth_lim == NULL || make_filter(ac, pats, n) < 0)
    goto done;
  ac->mem += (ac->maxdepth + 2) * sizeof *ac->depth_lim;
  for (uint32_t k = 0, i = 0; k <= ac->maxdepth + 1; k++) {
    while (i < N && depth[i] < k)
      i++;
    ac->depth_lim[k] = i << ac->sbits;
  }
  *out = ac;
  ac = NULL;
  rc = 0;
done:
  fs_hook_trie_free(&t);
  free(order), free(newid), free(kids), free(depth);
  fs_hook_ac_free(ac);
  return rc;
}

void fs_hook_ac_free(struct fs_hook_ac *ac)
{
  if (ac == NULL)
    return;
  free(ac->dense), free(ac->fail), free(ac->edge_start), free(ac->edge_label);
  free(ac->edge_target), free(ac->out_cnt), free(ac->out_pat), free(ac->depth_lim);
  free(ac->filter);
  free(ac);
}

/* ---- scanning ------------------------------------------------------------- */

/* May a match start at p?  (p[0..3] are readable.)  No if the hash of its
 * first fwidth bytes is not in the filter. */
static inline int cand(const struct fs_hook_ac *ac, const uint8_t *p)
{
  uint32_t x;
  memcpy(&x, p, 4);
  return ac->filter[filter_hash(ac, x)];
}

/* The first position in [i, full) where a match may start, or full. */
static size_t next_cand(const struct fs_hook_ac *ac, const uint8_t *buf, size_t i, size_t full)
{
  while (i + 8 <= full) {
    const uint8_t *b = buf + i;
    if (cand(ac, b) | cand(ac, b + 1) | cand(ac, b + 2) | cand(ac, b + 3) | cand(ac, b + 4) |
        cand(ac, b + 5) | cand(ac, b + 6) | cand(ac, b + 7))
      break;
    i += 8;
  }
  while (i < full && !cand(ac, buf + i))
    i++;
  return i;
}

/* Every match starts where the filter says one may.  `since` counts the
 * bytes read since the last such position; a state of depth < since only
 * holds prefixes that started after it, which can never complete (their own
 * start would have been such a position): the walk drops to the root, which
 * finds the same matches from then on, and skips to the next candidate.  The
 * last 3 bytes of a buffer cannot be hashed: they count as candidates, and
 * so does every byte before buf (the start of any prefix carried in). */
size_t fs_hook_ac_scan(const struct fs_hook_ac *ac, uint32_t *state, const uint8_t *buf,
                       size_t len, uint32_t *nmatch)
{
  const uint32_t *lim = ac->depth_lim, top = ac->maxdepth + 1;
  const size_t full = len > 3 ? len - 3 : 0;
  uint32_t s = *state, since = 1; /* as if the byte before buf were a candidate */
  size_t i = 0;
  while (i < len) {
    if (s == 0) {
      i = next_cand(ac, buf, i, full);
      since = 0;
    }
    if (i >= full || cand(ac, buf + i))
      since = 0;
    uint32_t e = step(ac, s, buf[i++]);
    if (e & MATCH) {
      *state = e & ~MATCH;
      *nmatch = ac->out_cnt[*state >> ac->sbits];
      return i;
    }
    since += since < top;
    s = e < lim[since] ? 0 : e;
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
