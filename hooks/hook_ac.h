/* Aho-Corasick multi-pattern matcher for the dpi hook.
 *
 * An automaton is immutable once built and shared by every connection that
 * uses the same pattern file; a scan carries only a uint32_t state, so a match
 * that spans two chunks is found.  Matches are reported at the byte that ends
 * them; every (pattern, end offset) pair counts once, so overlapping patterns
 * ("he", "she", "hers" over "ushers") all count.
 *
 * Layout (why it is fast):
 *  - states are numbered breadth-first and named by index << sbits, so a goto
 *    entry is the next row's offset and a step is one add and one load; bit 31
 *    of an entry flags a target that ends a pattern;
 *  - rows are indexed by byte class (every byte used in a pattern is a class,
 *    all others share one), padded to a power of two: 32-entry rows for
 *    lowercase words instead of 256;
 *  - the first D states (all when the rows fit in dense_limit bytes; at least
 *    the root and depth 1) have full rows; deeper ones keep sorted child edges
 *    and a failure link and are resolved by following failure links;
 *  - a start filter: one byte per hash bucket of the first min(4, shortest
 *    pattern) bytes of every pattern (about 256 buckets a pattern, at most
 *    1 MiB).  A match can only start where that hash is in the filter, so
 *    while no prefix that started at such a position is live the scanner
 *    only hashes and tests (independent loads, no automaton steps) until the
 *    next one; a walk from there drops back to that loop as soon as every
 *    live prefix started elsewhere.  The matches found, their order and the
 *    states reported are exactly those of the plain walk. */
#ifndef FS_HOOKS_HOOK_AC_H
#define FS_HOOKS_HOOK_AC_H

#include <stddef.h>
#include <stdint.h>

#define FS_HOOK_AC_MAX_STATES (1u << 22)  /* bounds memory: ~25 B a state, ~50 building */
#define FS_HOOK_AC_DENSE_DEFAULT (64u << 20)  /* bytes of full goto rows */

struct fs_hook_ac_pattern {
  const uint8_t *p;
  uint32_t len;          /* >= 1 */
};

struct fs_hook_ac;

/* Build from n patterns (duplicates allowed: they count once, as the first).
 * Returns 0, -EINVAL (an empty pattern, or more than FS_HOOK_AC_MAX_STATES states),
 * or -ENOMEM.  dense_limit: bytes for full rows (0: FS_HOOK_AC_DENSE_DEFAULT); the
 * root and depth-1 states are always dense. */
int fs_hook_ac_build(const struct fs_hook_ac_pattern *pats, uint32_t n, size_t dense_limit,
                     struct fs_hook_ac **out);
void fs_hook_ac_free(struct fs_hook_ac *ac);

/* Scan buf from *state until a byte that ends at least one pattern.  Returns
 * the bytes consumed (the matching byte included) and sets *nmatch to the
 * number of patterns ending there, or consumes all of buf with *nmatch = 0. */
size_t fs_hook_ac_scan(const struct fs_hook_ac *ac, uint32_t *state, const uint8_t *buf,
                       size_t len, uint32_t *nmatch);

/* The longest pattern (index into the build array) ending in state. */
uint32_t fs_hook_ac_state_pattern(const struct fs_hook_ac *ac, uint32_t state);

/* Statistics for logs and tests. */
uint32_t fs_hook_ac_states(const struct fs_hook_ac *ac);
uint32_t fs_hook_ac_dense_states(const struct fs_hook_ac *ac);
size_t fs_hook_ac_memory(const struct fs_hook_ac *ac);

#endif
