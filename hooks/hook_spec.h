/* Hook spec text: splitting FABSOCK_HOOKS into items, KEY=VAL iteration, and
 * the small helpers the built-in hooks share (numbers, error text, log-once).
 * The syntax is in hooks/hook.h and docs/hooks.md. */
#ifndef FS_HOOKS_HOOK_SPEC_H
#define FS_HOOKS_HOOK_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "hooks/hook.h"

struct fs_hook_spec_item {
  const char *name;  /* trimmed, non-empty, NUL-terminated (inside buf) */
  const char *args;  /* trimmed, "" when there is no ':' */
};

struct fs_hook_spec {
  char *buf;         /* private copy of the spec, owned */
  int n;
  struct fs_hook_spec_item item[FS_HOOK_CHAIN_MAX];
};

/* Split spec into items.  0 (n may be 0), -EINVAL with err, or -ENOMEM.
 * On success free with fs_hook_spec_free (also fine after an error). */
int fs_hook_spec_parse(const char *spec, struct fs_hook_spec *out, char *err, size_t errlen);
void fs_hook_spec_free(struct fs_hook_spec *s);

/* One KEY=VAL of built-in args; not NUL-terminated: use the lengths. */
struct fs_hook_spec_kv {
  const char *key, *val;
  size_t klen, vlen;
};

/* Next pair from *p (advanced).  1 = got one, 0 = end, -EINVAL = a pair with
 * no '=' or an empty key or value (kv->key/klen name the offending text). */
int fs_hook_spec_kv_next(const char **p, struct fs_hook_spec_kv *kv);

/* Exact, case-sensitive comparisons of a key or value with a C string. */
int fs_hook_spec_is(const char *s, size_t n, const char *lit);

/* Decimal with an optional binary suffix k/K, m/M, g/G; 0 or -EINVAL. */
int fs_hook_spec_size(const char *s, size_t n, uint64_t *out);

/* The dir= value shared by the built-in hooks: send, recv or both, as an
 * FS_HOOK_DIR_* mask in *dirs; -EINVAL with "HOOK: bad dir ..." in err. */
int fs_hook_spec_dir(const char *v, size_t n, const char *hook, int *dirs, char *err, size_t errlen);

/* snprintf into err when err is non-NULL (errlen may be 0). */
void fs_hook_spec_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* fs_log(level, "%s", msg) unless the same text was logged recently (per
 * process), so a bad spec applied to every connection logs once. */
void fs_hook_spec_log_once(int level, const char *msg);

/* Copy up to n bytes of s into out (size outlen) with non-printable bytes and
 * backslashes written as \xNN / \\, "..." appended when truncated. */
void fs_hook_spec_printable(char *out, size_t outlen, const void *s, size_t n);

#endif
