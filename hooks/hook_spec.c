#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hooks/hook.h"
#include "hooks/hook_spec.h"
#include "base/log.h"

static int is_space(char c)
{
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Trim [s, e) in place; returns the new start and NUL-terminates. */
static char *trim(char *s, char *e)
{
  while (s < e && is_space(*s))
    s++;
  while (e > s && is_space(e[-1]))
    e--;
  *e = '\0';
  return s;
}

void fs_hook_spec_errf(char *err, size_t errlen, const char *fmt, ...)
{
  if (err == NULL || errlen == 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

void fs_hook_spec_free(struct fs_hook_spec *s)
{
  if (s == NULL)
    return;
  free(s->buf);
  s->buf = NULL;
  s->n = 0;
}

int fs_hook_spec_parse(const char *spec, struct fs_hook_spec *out, char *err, size_t errlen)
{
  memset(out, 0, sizeof *out);
  if (spec == NULL)
    return 0;
  size_t len = strnlen(spec, FS_HOOK_SPEC_MAX + 1);
  if (len > FS_HOOK_SPEC_MAX) {
    fs_hook_spec_errf(err, errlen, "hook spec longer than %d bytes", FS_HOOK_SPEC_MAX);
    return -EINVAL;
  }
  out->buf = malloc(len + 1);
  if (out->buf == NULL) {
    fs_hook_spec_errf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  memcpy(out->buf, spec, len + 1);
  char *p = out->buf;
  for (;;) {
    char *end = p + strcspn(p, ";");
    int last = *end == '\0';
    char *colon = memchr(p, ':', (size_t)(end - p));
    char *name, *args;
    if (colon) {
      args = trim(colon + 1, end);
      name = trim(p, colon);
    } else {
      name = trim(p, end);
      args = end; /* "" */
    }
    if (*name == '\0' && *args != '\0') {
      fs_hook_spec_errf(err, errlen, "hook %d: arguments without a hook name", out->n + 1);
      goto bad;
    }
    if (*name != '\0') {
      if (out->n == FS_HOOK_CHAIN_MAX) {
        fs_hook_spec_errf(err, errlen, "more than %d hooks", FS_HOOK_CHAIN_MAX);
        goto bad;
      }
      out->item[out->n].name = name;
      out->item[out->n].args = args;
      out->n++;
    }
    if (last)
      break;
    p = end + 1;
  }
  return 0;
bad:
  fs_hook_spec_free(out);
  return -EINVAL;
}

int fs_hook_spec_kv_next(const char **pp, struct fs_hook_spec_kv *kv)
{
  const char *p = *pp;
  for (;;) {
    while (is_space(*p))
      p++;
    if (*p == '\0') {
      *pp = p;
      return 0;
    }
    if (*p != ',')
      break;
    p++; /* empty pair: tolerated */
  }
  const char *end = p + strcspn(p, ",");
  const char *eq = memchr(p, '=', (size_t)(end - p));
  *pp = *end ? end + 1 : end;
  const char *ke = eq ? eq : end;
  while (ke > p && is_space(ke[-1]))
    ke--;
  kv->key = p;
  kv->klen = (size_t)(ke - p);
  const char *v = eq ? eq + 1 : end, *ve = end;
  while (v < ve && is_space(*v))
    v++;
  while (ve > v && is_space(ve[-1]))
    ve--;
  kv->val = v;
  kv->vlen = (size_t)(ve - v);
  if (eq == NULL || kv->klen == 0 || kv->vlen == 0) {
    kv->klen = (size_t)(ve > ke ? ve - p : ke - p); /* the whole pair, for messages */
    return -EINVAL;
  }
  return 1;
}

int fs_hook_spec_is(const char *s, size_t n, const char *lit)
{
  return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

int fs_hook_spec_size(const char *s, size_t n, uint64_t *out)
{
  uint64_t v = 0, mul = 1;
  size_t i = 0;
  if (n == 0)
    return -EINVAL;
  switch (s[n - 1]) {
  case 'k': case 'K': mul = 1ull << 10; n--; break;
  case 'm': case 'M': mul = 1ull << 20; n--; break;
  case 'g': case 'G': mul = 1ull << 30; n--; break;
  default: break;
  }
  if (n == 0)
    return -EINVAL;
  for (; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return -EINVAL;
    unsigned d = (unsigned)(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10)
      return -EINVAL;
    v = v * 10 + d;
  }
  if (v > UINT64_MAX / mul)
    return -EINVAL;
  *out = v * mul;
  return 0;
}

void fs_hook_spec_printable(char *out, size_t outlen, const void *s, size_t n)
{
  static const char hex[] = "0123456789abcdef";
  const unsigned char *p = s;
  size_t o = 0;
  if (outlen == 0)
    return;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = p[i];
    size_t need = (c >= 0x20 && c < 0x7f && c != '\\') ? 1 : (c == '\\' ? 2 : 4);
    if (o + need + 4 > outlen) { /* room for "..." and NUL */
      if (o + 4 <= outlen)
        memcpy(out + o, "...", 3), o += 3;
      break;
    }
    if (need == 1) {
      out[o++] = (char)c;
    } else if (need == 2) {
      out[o++] = '\\';
      out[o++] = '\\';
    } else {
      out[o++] = '\\';
      out[o++] = 'x';
      out[o++] = hex[c >> 4];
      out[o++] = hex[c & 15];
    }
  }
  out[o] = '\0';
}

/* Recently logged messages, by hash (FNV-1a); a small ring is enough to keep
 * one bad spec used by every connection from flooding the log. */
#define LOG_ONCE_SLOTS 32
static uint64_t log_once_hash[LOG_ONCE_SLOTS];
static unsigned log_once_next;
static pthread_mutex_t log_once_lock = PTHREAD_MUTEX_INITIALIZER;

void fs_hook_spec_log_once(int level, const char *msg)
{
  uint64_t h = 1469598103934665603ull;
  for (const char *p = msg; *p; p++)
    h = (h ^ (unsigned char)*p) * 1099511628211ull;
  h |= 1; /* 0 marks an empty slot */
  int seen = 0;
  pthread_mutex_lock(&log_once_lock);
  for (unsigned i = 0; i < LOG_ONCE_SLOTS; i++)
    if (log_once_hash[i] == h)
      seen = 1;
  if (!seen)
    log_once_hash[log_once_next++ % LOG_ONCE_SLOTS] = h;
  pthread_mutex_unlock(&log_once_lock);
  if (!seen)
    fs_log(level, "%s", msg);
}

int fs_hook_spec_dir(const char *v, size_t n, const char *hook, int *dirs, char *err, size_t errlen)
{
  if (fs_hook_spec_is(v, n, "send"))
    *dirs = FS_HOOK_DIR_SEND;
  else if (fs_hook_spec_is(v, n, "recv"))
    *dirs = FS_HOOK_DIR_RECV;
  else if (fs_hook_spec_is(v, n, "both"))
    *dirs = FS_HOOK_DIR_BOTH;
  else {
    fs_hook_spec_errf(err, errlen, "%s: bad dir '%.*s' (send, recv or both)", hook, (int)n, v);
    return -EINVAL;
  }
  return 0;
}
