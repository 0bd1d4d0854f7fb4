/* Pattern trie, the first step of building the dpi matcher (hooks/hook_ac.h).
 * Node 0 is the root; a node's children are a linked list (first, next) and
 * are found by byte through a hash; pat[node] is the first pattern ending
 * there.  Build-time only: the automaton copies what it needs. */
#ifndef FS_HOOKS_HOOK_TRIE_H
#define FS_HOOKS_HOOK_TRIE_H

#include <stddef.h>
#include <stdint.h>

#include "hooks/hook_ac.h"

#define FS_HOOK_TRIE_NONE UINT32_MAX

struct fs_hook_trie {
  uint32_t n, cap, max;
  uint32_t *first, *next;  /* first child, next sibling; FS_HOOK_TRIE_NONE ends */
  uint8_t *label;          /* byte on the edge into the node */
  uint32_t *pat;           /* pattern ending here, FS_HOOK_TRIE_NONE if none */
  uint64_t *hkey;          /* (parent << 8 | byte) + 1; 0 = empty slot */
  uint32_t *hval;
  size_t hcap;             /* power of two */
};

/* Insert n patterns into the zeroed *t.  0, -EINVAL (an empty pattern, or
 * more than max_nodes nodes) or -ENOMEM.  Free with fs_hook_trie_free, also
 * after an error. */
int fs_hook_trie_build(struct fs_hook_trie *t, const struct fs_hook_ac_pattern *pats, uint32_t n,
                       uint32_t max_nodes);
void fs_hook_trie_free(struct fs_hook_trie *t);

#endif
