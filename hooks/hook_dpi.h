/* Built-in hook `dpi`: multi-pattern matching over the byte stream.
 *
 * Arguments:
 *   patterns=FILE  required; the pattern file below
 *   action=A       log (default): count and log (the first 8 matches per
 *                  direction, then one "not logging" line); count: count
 *                  only; close: log and close the connection
 *   dir=D          recv (default), send or both
 *
 * Pattern file format (one pattern a line):
 *   - a line is split at LF; one CR before the LF is removed (CRLF files);
 *   - empty lines and lines whose first byte is '#' are ignored;
 *   - every other line is one pattern of literal bytes (spaces included) with
 *     two escapes: \xNN (exactly two hex digits) for any byte and \\ for a
 *     backslash; any other backslash is an error (write '#' at the start of a
 *     pattern as \x23, a trailing CR as \x0d);
 *   - at most FS_HOOK_DPI_MAX_PATTERNS patterns of at most FS_HOOK_DPI_MAX_PATLEN bytes
 *     (after unescaping), at most FS_HOOK_DPI_MAX_TOTAL bytes in all, a file of at
 *     most FS_HOOK_DPI_MAX_FILE bytes; duplicates count once.  An empty file (no
 *     patterns) is valid and matches nothing.
 * Errors are reported as "FILE:LINE: message".
 *
 * The compiled automaton (hooks/hook_ac.h) is shared by every connection
 * using the same file; it is rebuilt for new connections when the file's
 * identity (device, inode, size, mtime) changes.  Matching carries state
 * across chunks, so a pattern split over two send/recv calls is found. */
#ifndef FS_HOOKS_HOOK_DPI_H
#define FS_HOOKS_HOOK_DPI_H

#include <stddef.h>
#include <stdint.h>

#include "hooks/hook_ac.h"

#define FS_HOOK_DPI_MAX_PATTERNS 100000
#define FS_HOOK_DPI_MAX_PATLEN 4096
#define FS_HOOK_DPI_MAX_TOTAL (4u << 20)
#define FS_HOOK_DPI_MAX_FILE (64u << 20)

struct fs_hook_dpi_patterns {
  uint32_t n;
  struct fs_hook_ac_pattern *pat;  /* into data */
  uint32_t *line;             /* source line of each */
  uint8_t *data;
  char *name;                 /* file name, for messages */
};

/* Parse pattern-file text (need not be NUL-terminated).  fname is used in
 * messages.  0, -EINVAL ("fname:line: ..." in err) or -ENOMEM. */
int fs_hook_dpi_patterns_parse(const char *text, size_t len, const char *fname,
                               struct fs_hook_dpi_patterns **out, char *err, size_t errlen);
/* Read and parse a file (-errno from opening or reading it, with err). */
int fs_hook_dpi_patterns_load(const char *path, struct fs_hook_dpi_patterns **out, char *err,
                              size_t errlen);
void fs_hook_dpi_patterns_free(struct fs_hook_dpi_patterns *p);

struct fs_hook_dpi_conf {
  const char *path;  /* points into the args string it was parsed from */
  size_t path_len;
  int action;        /* FS_HOOK_DPI_LOG, FS_HOOK_DPI_COUNT, FS_HOOK_DPI_CLOSE */
  int dirs;          /* FS_HOOK_DIR_* mask (hooks/hook_frame.h) */
};

enum { FS_HOOK_DPI_LOG, FS_HOOK_DPI_COUNT, FS_HOOK_DPI_CLOSE };

int fs_hook_dpi_conf_parse(const char *args, struct fs_hook_dpi_conf *c, char *err, size_t errlen);

struct fs_hook_dpi;

/* New instance over the (cached) compiled pattern file.  fd is for logs. */
int fs_hook_dpi_new(const struct fs_hook_dpi_conf *c, int fd, struct fs_hook_dpi **out,
                    char *err, size_t errlen);
/* Feed bytes of direction FS_HOOK_SEND/RECV.  0 pass, 1 close (logged). */
int fs_hook_dpi_feed(struct fs_hook_dpi *d, int dir, const uint8_t *buf, size_t len);
uint64_t fs_hook_dpi_count(const struct fs_hook_dpi *d);  /* matches, both directions */
void fs_hook_dpi_free(struct fs_hook_dpi *d);

/* Drop the cache's references (compiled sets still in use stay alive until
 * their last instance is freed).  For tests and leak checkers. */
void fs_hook_dpi_cache_clear(void);

#endif
