/* Inline hooks: the per-connection chain of hook instances.
 *
 * A chain is built from a spec in FABSOCK_HOOKS syntax (docs/hooks.md):
 *
 *     spec  := item { ';' item }          empty items are ignored
 *     item  := NAME [ ':' args ]
 *     args  := KEY=VAL { ',' KEY=VAL }     (built-ins; a .so gets args verbatim)
 *
 * NAME is a built-in (`frame`, `dpi`, see hooks/hook_frame.h, hooks/hook_dpi.h)
 * or the path of a hook shared object (any NAME containing '/', see
 * <fabsock/hook.h>).  Spaces around items, keys and values are ignored.
 *
 * Threads: one thread at a time per direction; fs_hook_send and fs_hook_recv
 * may run concurrently.  fs_hook_close must not race either. */
#ifndef FS_HOOKS_HOOK_H
#define FS_HOOKS_HOOK_H

#include <stddef.h>
#include <stdint.h>

#include "fabsock/hook.h"
#include "base/stat.h"

#define FS_HOOK_SPEC_MAX 4096  /* bytes of spec text */
#define FS_HOOK_CHAIN_MAX 8    /* hooks per connection */

struct fs_hookset;   /* the per-connection chain of hook instances */

/* Directions, for the built-in hooks: an index, and the dir= mask. */
enum { FS_HOOK_SEND = 0, FS_HOOK_RECV = 1 };
enum { FS_HOOK_DIR_SEND = 1, FS_HOOK_DIR_RECV = 2, FS_HOOK_DIR_BOTH = 3 };

/* spec: FABSOCK_HOOKS syntax; NULL or "" (or only separators) -> *out = NULL,
 * return 0.  info: the connection (may be NULL in tests: fd -1).  stat: may be
 * NULL; if non-NULL the first frame hook checking a direction counts whole
 * messages of it into stat->tx_msgs / stat->rx_msgs (relaxed atomics).
 * Returns 0 or -errno, the reason logged once per distinct reason: -EINVAL
 * for a bad spec or pattern file, -ENOENT (or what reading failed with) for
 * a missing pattern file or hook .so, -ELIBBAD for a .so that cannot be
 * loaded or has the wrong ABI, -ENOMEM, or what a hook's open returned (a
 * positive value becomes -EINVAL). */
int fs_hook_open(const char *spec, const struct fabsock_conn_info *info,
                 struct fs_stat_conn *stat, struct fs_hookset **out);

/* Called exactly once per byte, in order, after the bytes were accepted by the
 * transport (send) or before they are handed to the application (recv).
 * Returns 0 = pass, or -ECONNABORTED = a hook asked to close (the reason was
 * logged).  Once a set returned -ECONNABORTED it keeps returning it.  hs may
 * be NULL (returns 0).  errno is preserved. */
int fs_hook_send(struct fs_hookset *hs, const void *buf, size_t len);
int fs_hook_recv(struct fs_hookset *hs, const void *buf, size_t len);

/* Closes every instance (user close callbacks included) and frees; NULL ok. */
void fs_hook_close(struct fs_hookset *hs);

/* Validate a spec without opening anything: syntax, built-in arguments, the
 * dpi pattern file is read and parsed (errors as file:line), a hook .so must
 * be a readable regular file (it is not loaded).  0 or -EINVAL with a one-line
 * message in err. */
int fs_hook_spec_check(const char *spec, char *err, size_t errlen);

/* Bytes the recv direction still needs (beyond what fs_hook_recv has seen)
 * to complete the current frame, per the first frame hook that checks recv:
 * the rest of the payload once the header was parsed, the rest of the header
 * while it is partial.  0 = no hint: at a frame boundary, no frame hook, line
 * mode, checking stopped, or the set aborted.  Never more than needed, so a
 * receiver may sleep until that many more bytes are readable.  A read of the
 * state the recv thread updates: call it from that thread (or under the
 * lock that serializes recv). */
size_t fs_hook_wake_hint(struct fs_hookset *hs);

/* Directions whose messages a frame hook counts into the stat slot (so the
 * data path should not count calls as messages there): bit 0 (1) send,
 * bit 1 (2) recv; 0 when none or hs is NULL. */
int fs_hook_counts_msgs(const struct fs_hookset *hs);

/* Total dpi matches on this set (all dpi instances, both directions). */
uint64_t fs_hook_dpi_matches(const struct fs_hookset *hs);

/* 1 once the set returned -ECONNABORTED. */
int fs_hook_aborted(const struct fs_hookset *hs);

#endif
