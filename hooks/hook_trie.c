/* The trie under the Aho-Corasick automaton (hooks/hook_ac.c): nodes in flat
 * arrays, children found through an open-addressing hash of (node, byte). */
#include <errno.h>
#include <stdlib.h>

#include "hooks/hook_trie.h"

static size_t hslot(uint64_t key, size_t mask)
{
  return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
}

static int trie_grow(struct fs_hook_trie *t)
{
  uint32_t cap = t->cap ? t->cap * 2 : 1024;
  uint32_t *f = realloc(t->first, cap * sizeof *f);
  if (f) t->first = f;
  uint32_t *x = realloc(t->next, cap * sizeof *x);
  if (x) t->next = x;
  uint8_t *l = realloc(t->label, cap);
  if (l) t->label = l;
  uint32_t *p = realloc(t->pat, cap * sizeof *p);
  if (p) t->pat = p;
  if (!f || !x || !l || !p)
    return -ENOMEM;
  t->cap = cap;
  return 0;
}

static int hash_grow(struct fs_hook_trie *t)
{
  size_t cap = t->hcap ? t->hcap * 2 : 2048;
  uint64_t *k = calloc(cap, sizeof *k);
  uint32_t *v = malloc(cap * sizeof *v);
  if (!k || !v) {
    free(k), free(v);
    return -ENOMEM;
  }
  for (size_t i = 0; i < t->hcap; i++)
    if (t->hkey[i]) {
      size_t s = hslot(t->hkey[i], cap - 1);
      while (k[s])
        s = (s + 1) & (cap - 1);
      k[s] = t->hkey[i];
      v[s] = t->hval[i];
    }
  free(t->hkey), free(t->hval);
  t->hkey = k, t->hval = v, t->hcap = cap;
  return 0;
}

void fs_hook_trie_free(struct fs_hook_trie *t)
{
  free(t->first), free(t->next), free(t->label), free(t->pat), free(t->hkey), free(t->hval);
}

static uint32_t trie_new_node(struct fs_hook_trie *t, uint8_t c)
{
  uint32_t i = t->n++;
  t->first[i] = FS_HOOK_TRIE_NONE;
  t->next[i] = FS_HOOK_TRIE_NONE;
  t->label[i] = c;
  t->pat[i] = FS_HOOK_TRIE_NONE;
  return i;
}

/* The child of node for byte c, created if absent. */
static int trie_child(struct fs_hook_trie *t, uint32_t node, uint8_t c, uint32_t *child)
{
  uint64_t key = ((uint64_t)node << 8 | c) + 1;
  size_t s = hslot(key, t->hcap - 1);
  for (; t->hkey[s]; s = (s + 1) & (t->hcap - 1))
    if (t->hkey[s] == key) {
      *child = t->hval[s];
      return 0;
    }
  if (t->n >= t->max)
    return -EINVAL;
  if (t->n == t->cap && trie_grow(t) < 0)
    return -ENOMEM;
  uint32_t k = trie_new_node(t, c);
  t->next[k] = t->first[node];
  t->first[node] = k;
  t->hkey[s] = key;
  t->hval[s] = k;
  *child = k;
  if ((size_t)t->n * 2 > t->hcap && hash_grow(t) < 0)
    return -ENOMEM;
  return 0;
}

int fs_hook_trie_build(struct fs_hook_trie *t, const struct fs_hook_ac_pattern *pats, uint32_t n,
                       uint32_t max_nodes)
{
  t->max = max_nodes;
  if (trie_grow(t) < 0 || hash_grow(t) < 0)
    return -ENOMEM;
  trie_new_node(t, 0);
  for (uint32_t i = 0; i < n; i++) {
    uint32_t node = 0;
    if (pats[i].len == 0)
      return -EINVAL;
    for (uint32_t j = 0; j < pats[i].len; j++) {
      int r = trie_child(t, node, pats[i].p[j], &node);
      if (r < 0)
        return r;
    }
    if (t->pat[node] == FS_HOOK_TRIE_NONE)
      t->pat[node] = i;
  }
  return 0;
}
