/* Built-in hook `frame`: message framing, size limit, message counting.
 *
 * Arguments (all optional):
 *   header=H   H is one of
 *                lenNN[be|le]   NN = 8, 16, 32, 64: an NN-bit unsigned payload
 *                               length (big-endian unless `le`), then the payload
 *                magic:HEX+lenNN[be|le]  1..8 bytes given as hex (e.g. FAB50C0D)
 *                               that must open every frame, then the length
 *                line           LF-terminated lines; a CR before the LF is not
 *                               counted in the line's length
 *              default len32be.  The length counts the payload only, not the
 *              header.
 *   max=N      largest payload (line: line length without CR LF); decimal with
 *              optional k/m/g (KiB/MiB/GiB) suffix; default unlimited
 *   action=A   close (default): log and close the connection on a violation;
 *              log: log and continue
 *   dir=D      send, recv or both (default both); each direction is its own
 *              stream of frames
 *
 * Violations and what `action=log` does afterwards:
 *   oversized frame  the frame's extent is known: it is skipped and parsing
 *                    goes on with the next header (stays in sync)
 *   long line        parsing goes on from the next LF
 *   wrong magic      no way to find the next frame: that direction stops being
 *                    checked (and counted) for the rest of the connection
 * At most 8 violations per direction are logged (then one "not logging" line).
 *
 * A message is counted when its last byte was seen (an empty line or a frame
 * with length 0 counts).  Cost: O(1) per frame plus memchr for lines, not per
 * byte. */
#ifndef FS_HOOKS_HOOK_FRAME_H
#define FS_HOOKS_HOOK_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "hooks/hook.h"
#include "base/stat.h"

struct fs_hook_frame_conf {
  int line;               /* 1: line mode */
  unsigned width;         /* length field bytes: 1, 2, 4, 8 */
  int little;             /* length field little-endian */
  unsigned magic_len;     /* 0..8 */
  uint8_t magic[8];
  uint64_t max;           /* UINT64_MAX: unlimited */
  int close;              /* action=close */
  int dirs;               /* FS_HOOK_DIR_* mask */
};

struct fs_hook_frame;

/* Parse arguments; 0 or -EINVAL with a message in err. */
int fs_hook_frame_conf_parse(const char *args, struct fs_hook_frame_conf *conf, char *err,
                             size_t errlen);

/* New instance.  fd is for log lines.  Whole messages of the directions in
 * count_dirs (FS_HOOK_DIR_* mask) are added to stat->tx_msgs / rx_msgs;
 * stat may be NULL.  NULL when out of memory. */
struct fs_hook_frame *fs_hook_frame_new(const struct fs_hook_frame_conf *conf, int fd,
                                        struct fs_stat_conn *stat, int count_dirs);

/* Feed bytes of direction FS_HOOK_SEND/FS_HOOK_RECV.  0 pass, 1 close (logged). */
int fs_hook_frame_feed(struct fs_hook_frame *f, int dir, const uint8_t *buf, size_t len);

/* See fs_hook_wake_hint (hooks/hook.h); for the recv direction. */
size_t fs_hook_frame_wake_hint(const struct fs_hook_frame *f);

/* Whether this instance checks direction dir. */
int fs_hook_frame_checks(const struct fs_hook_frame *f, int dir);

/* Counters of one direction: whole messages, and the largest payload seen. */
void fs_hook_frame_counts(const struct fs_hook_frame *f, int dir, uint64_t *msgs,
                          uint64_t *largest);

void fs_hook_frame_free(struct fs_hook_frame *f);

#endif
