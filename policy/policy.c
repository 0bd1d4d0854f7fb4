/* Policy: fabsock.conf(5) parsing, FABSOCK_* overrides, rule matching.
 *
 * File format (see man/fabsock.conf.5 for the full text):
 *
 *   # comment                      a '#' starting a word comments out the rest
 *   default KEY=VALUE ...          action defaults (every rule inherits them)
 *   rule    KEY=VALUE ...          first rule whose match keys all hold wins
 *
 *   match keys:  program=GLOB dir=connect|accept|any local=SPEC remote=SPEC
 *   action keys: fabric=auto|rdma|shm|tcp upgrade=BYTES|never
 *                spin=adaptive|busy|US timeout=MS uid=same|any hooks=SPEC
 *                rdma_key=FILE|none
 *
 * A VALUE is a bare word, or "double quoted" (\" and \\ escapes) to hold
 * spaces.  Lines are at most 4096 bytes, rules 10000.  Reading the file:
 * policy/conffile.c. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hot.h"
#include "base/log.h"
#include "policy/conffile.h"
#include "policy/cidr.h"
#include "policy/glob.h"
#include "policy/policy.h"
#include "policy/value.h"

#define FS_POLICY_LINE_MAX 4096
#define FS_POLICY_RULES_MAX 10000

/* Keys, in the order of the man page.  The first four are match keys. */
enum { K_PROGRAM, K_DIR, K_LOCAL, K_REMOTE, K_FABRIC, K_UPGRADE, K_SPIN, K_TIMEOUT, K_UID,
       K_HOOKS, K_RDMA_KEY, K_COUNT };
static const char *const fs_policy_keys[K_COUNT] = {
  "program", "dir", "local", "remote", "fabric", "upgrade", "spin", "timeout", "uid", "hooks",
  "rdma_key",
};
#define K_MATCH_MASK ((1u << K_PROGRAM) | (1u << K_DIR) | (1u << K_LOCAL) | (1u << K_REMOTE))

struct fs_policy_rule {
  const char *program;             /* glob; NULL: any */
  unsigned dirs;                   /* FS_DIR_* bits; 0: any */
  struct fs_cidr_spec local, remote;
  unsigned set;                    /* 1 << K_* for each action key given */
  enum fs_fabric fabric;           /* the action keys, valid when set says so */
  uint64_t upgrade_bytes;
  int32_t spin_us;
  bool busy_poll;
  bool any_uid;
  uint32_t timeout_ms;
  const char *hooks;               /* in the arena (not a 512-byte array per rule) */
  bool has_key;
  uint8_t key[FS_HMAC_LEN];
};

/* Strings and port lists live in a few big blocks freed together, so the
 * error path of the parser cannot leak them. */
struct fs_policy_block {
  struct fs_policy_block *next;
  size_t used, size;
  char data[];
};

struct fs_policy {
  struct fs_policy_action defaults;
  int forced;                      /* FABSOCK_TRANSPORT: enum fs_fabric, or -1 */
  size_t nrules, cap;
  struct fs_policy_rule *rules;
  struct fs_policy_block *blocks;
};

static void *fs_policy_alloc(struct fs_policy *p, size_t n)
{
  struct fs_policy_block *b = p->blocks;
  n = (n + 7) & ~(size_t)7;
  if (b == NULL || b->size - b->used < n) {
    size_t size = n > 16384 ? n : 16384;
    b = malloc(sizeof *b + size);
    if (b == NULL)
      return NULL;
    b->used = 0;
    b->size = size;
    b->next = p->blocks;
    p->blocks = b;
  }
  b->used += n;
  return b->data + b->used - n;
}

static void fs_policy_builtin(struct fs_policy_action *a)
{
  memset(a, 0, sizeof *a);
  a->fabric = FS_FABRIC_AUTO;
  a->upgrade_bytes = FS_POLICY_UPGRADE_DEFAULT;
  a->spin_us = FS_POLICY_SPIN_ADAPTIVE;
  a->busy_poll = false;
  a->timeout_ms = 1000;
  /* Another user's peer upgrades too: the rendezvous proves it holds this
   * very connection, and a hostile peer can break only its own channel
   * (docs/design.md 1.3).  uid=same restricts. */
  a->any_uid = true;
}

static int fs_policy_vfail(char *err, size_t errlen, const char *prefix, const char *fmt, va_list ap)
{
  if (err != NULL && errlen > 0) {
    int n = snprintf(err, errlen, "%s", prefix);
    if (n >= 0 && (size_t)n < errlen)
      vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
  }
  return -EINVAL;
}

/* ---- the parser ------------------------------------------------------- */

struct fs_policy_parser {
  struct fs_policy *p;
  const char *s, *end;             /* rest of the current line */
  char where[300];                 /* "file:line: " */
  char *err;
  size_t errlen;
  char val[FS_POLICY_LINE_MAX + 1];/* the current value, unquoted */
  size_t vlen;
};

static int fs_policy_fail(struct fs_policy_parser *c, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));

static int fs_policy_fail(struct fs_policy_parser *c, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  int rc = fs_policy_vfail(c->err, c->errlen, c->where, fmt, ap);
  va_end(ap);
  return rc;
}

static bool fs_policy_space(char ch)
{
  return ch == ' ' || ch == '\t' || ch == '\r';
}

static void fs_policy_skip(struct fs_policy_parser *c)
{
  while (c->s < c->end && fs_policy_space(*c->s))
    c->s++;
}

/* The word at c->s (up to white space), for messages. */
static const char *fs_policy_word(struct fs_policy_parser *c, char *buf, size_t size)
{
  const char *e = c->s;
  while (e < c->end && !fs_policy_space(*e))
    e++;
  return fs_value_show(c->s, (size_t)(e - c->s), buf, size);
}

/* KEY=VALUE at c->s: the key's index in *key, the value unquoted in c->val. */
static int fs_policy_pair(struct fs_policy_parser *c, int *key)
{
  const char *k = c->s;
  char show[80];
  size_t klen;
  while (c->s < c->end && !fs_policy_space(*c->s) && *c->s != '=')
    c->s++;
  if (c->s == c->end || *c->s != '=') {
    c->s = k;
    return fs_policy_fail(c, "expected KEY=VALUE, got '%s'", fs_policy_word(c, show, sizeof show));
  }
  klen = (size_t)(c->s - k);
  *key = -1;
  for (int i = 0; i < K_COUNT; i++)
    if (strlen(fs_policy_keys[i]) == klen && memcmp(fs_policy_keys[i], k, klen) == 0)
      *key = i;
  if (*key < 0)
    return fs_policy_fail(c, "unknown key '%s'", fs_value_show(k, klen, show, sizeof show));
  c->s++;
  c->vlen = 0;
  if (c->s < c->end && *c->s == '"') {
    for (c->s++;;) {
      char ch;
      if (c->s == c->end)
        return fs_policy_fail(c, "%s: unterminated quote", fs_policy_keys[*key]);
      ch = *c->s++;
      if (ch == '"')
        break;
      if (ch == '\\') {
        if (c->s == c->end)
          return fs_policy_fail(c, "%s: unterminated quote", fs_policy_keys[*key]);
        ch = *c->s++;
        if (ch != '"' && ch != '\\')
          return fs_policy_fail(c, "%s: bad escape '\\%s' (only \\\" and \\\\)", fs_policy_keys[*key],
                                fs_value_show(&ch, 1, show, sizeof show));
      }
      c->val[c->vlen++] = ch;
    }
    if (c->s < c->end && !fs_policy_space(*c->s))
      return fs_policy_fail(c, "%s: text after the closing quote", fs_policy_keys[*key]);
  } else {
    while (c->s < c->end && !fs_policy_space(*c->s)) {
      if (*c->s == '"')
        return fs_policy_fail(c, "%s: '\"' inside an unquoted value (quote the whole value)",
                              fs_policy_keys[*key]);
      c->val[c->vlen++] = *c->s++;
    }
  }
  c->val[c->vlen] = '\0';
  return 0;
}

static int fs_policy_oom(struct fs_policy_parser *c)
{
  fs_policy_fail(c, "out of memory");
  return -ENOMEM;
}

/* Store c->val, the value of key, into r. */
static int fs_policy_value(struct fs_policy_parser *c, int key, struct fs_policy_rule *r)
{
  char why[128], show[80];
  int rc = 0;
  why[0] = '\0';
  switch (key) {
  case K_PROGRAM: {
    char *g = fs_policy_alloc(c->p, c->vlen + 1);
    if (g == NULL)
      return fs_policy_oom(c);
    memcpy(g, c->val, c->vlen + 1);
    r->program = g;
    if (c->vlen == 0)
      rc = fs_value_failf(why, sizeof why, "expected a glob");
    break;
  }
  case K_DIR:
    if (strcmp(c->val, "connect") == 0)
      r->dirs = FS_DIR_CONNECT;
    else if (strcmp(c->val, "accept") == 0)
      r->dirs = FS_DIR_ACCEPT;
    else if (strcmp(c->val, "any") == 0)
      r->dirs = 0;
    else
      rc = fs_value_failf(why, sizeof why, "expected connect, accept or any");
    break;
  case K_LOCAL:
  case K_REMOTE: {
    size_t n = fs_cidr_max_ranges(c->val, c->vlen);
    struct fs_cidr_range *ports = fs_policy_alloc(c->p, n * sizeof *ports);
    if (ports == NULL)
      return fs_policy_oom(c);
    rc = fs_cidr_parse(c->val, c->vlen, key == K_LOCAL ? &r->local : &r->remote, ports, why,
                       sizeof why);
    break;
  }
  case K_FABRIC:
    rc = fs_value_fabric(c->val, &r->fabric, why, sizeof why);
    break;
  case K_UPGRADE:
    rc = fs_value_bytes(c->val, &r->upgrade_bytes, why, sizeof why);
    break;
  case K_SPIN:
    rc = fs_value_spin(c->val, &r->spin_us, &r->busy_poll, why, sizeof why);
    break;
  case K_TIMEOUT:
    rc = fs_value_timeout(c->val, &r->timeout_ms, why, sizeof why);
    break;
  case K_UID:
    if (strcmp(c->val, "same") == 0)
      r->any_uid = false;
    else if (strcmp(c->val, "any") == 0)
      r->any_uid = true;
    else
      rc = fs_value_failf(why, sizeof why, "expected same or any");
    break;
  case K_HOOKS: {
    char *h = fs_policy_alloc(c->p, c->vlen + 1);
    if (h == NULL)
      return fs_policy_oom(c);
    memcpy(h, c->val, c->vlen + 1);
    r->hooks = h;
    rc = fs_value_hooks(c->val, c->vlen, NULL, why, sizeof why);
    break;
  }
  case K_RDMA_KEY:
    rc = fs_conffile_key(c->val, &r->has_key, r->key, why, sizeof why);
    break;
  }
  if (rc < 0)
    return fs_policy_fail(c, "%s: bad value '%s': %s", fs_policy_keys[key],
                          fs_value_show(c->val, c->vlen, show, sizeof show), why);
  r->set |= 1u << key;
  return 0;
}

/* Copy the actions r sets over a. */
static void fs_policy_overlay(struct fs_policy_action *a, const struct fs_policy_rule *r)
{
  if (r->set & (1u << K_FABRIC))
    a->fabric = r->fabric;
  if (r->set & (1u << K_UPGRADE))
    a->upgrade_bytes = r->upgrade_bytes;
  if (r->set & (1u << K_SPIN)) {
    a->spin_us = r->spin_us;
    a->busy_poll = r->busy_poll;
  }
  if (r->set & (1u << K_TIMEOUT))
    a->timeout_ms = r->timeout_ms;
  if (r->set & (1u << K_UID))
    a->any_uid = r->any_uid;
  if (r->set & (1u << K_HOOKS)) {
    size_t n = strlen(r->hooks); /* < FS_POLICY_HOOKS_MAX, checked at parse */
    memcpy(a->hooks, r->hooks, n + 1);
  }
  if (r->set & (1u << K_RDMA_KEY)) {
    a->has_key = r->has_key;
    memcpy(a->key, r->key, sizeof a->key);
  }
}

static int fs_policy_line(struct fs_policy_parser *c)
{
  struct fs_policy_rule r;
  const char *w;
  bool is_rule;
  char show[80];

  fs_policy_skip(c);
  if (c->s == c->end || *c->s == '#')
    return 0;
  w = c->s;
  while (c->s < c->end && !fs_policy_space(*c->s))
    c->s++;
  if ((size_t)(c->s - w) == 4 && memcmp(w, "rule", 4) == 0) {
    is_rule = true;
  } else if ((size_t)(c->s - w) == 7 && memcmp(w, "default", 7) == 0) {
    is_rule = false;
  } else {
    c->s = w;
    return fs_policy_fail(c, "unknown statement '%s' (expected default or rule)",
                          fs_policy_word(c, show, sizeof show));
  }
  if (is_rule && c->p->nrules >= FS_POLICY_RULES_MAX)
    return fs_policy_fail(c, "too many rules (at most %d)", FS_POLICY_RULES_MAX);
  memset(&r, 0, sizeof r);
  for (;;) {
    int key = -1, rc;
    fs_policy_skip(c);
    if (c->s == c->end || *c->s == '#')
      break;
    rc = fs_policy_pair(c, &key);
    if (rc < 0)
      return rc;
    if (r.set & (1u << key))
      return fs_policy_fail(c, "%s given twice", fs_policy_keys[key]);
    if (!is_rule && ((1u << key) & K_MATCH_MASK))
      return fs_policy_fail(c, "%s is a match key: not allowed in a default statement",
                            fs_policy_keys[key]);
    rc = fs_policy_value(c, key, &r);
    if (rc < 0)
      return rc;
  }
  if (!is_rule) {
    fs_policy_overlay(&c->p->defaults, &r);
    return 0;
  }
  if (c->p->nrules == c->p->cap) {
    size_t cap = c->p->cap ? c->p->cap * 2 : 16;
    struct fs_policy_rule *nr = realloc(c->p->rules, cap * sizeof *nr);
    if (nr == NULL)
      return fs_policy_oom(c);
    c->p->rules = nr;
    c->p->cap = cap;
  }
  c->p->rules[c->p->nrules++] = r;
  return 0;
}

int fs_policy_parse(const char *text, size_t len, const char *filename, struct fs_policy **out,
                    char *err, size_t errlen)
{
  struct fs_policy_parser *c;
  struct fs_policy *p;
  const char *pos = text, *end = text + len;
  unsigned lineno = 0;
  int rc = 0;

  if (err != NULL && errlen > 0)
    err[0] = '\0';
  if (out == NULL || (text == NULL && len > 0))
    return -EINVAL;
  *out = NULL;
  if (filename == NULL)
    filename = "(config)";
  p = calloc(1, sizeof *p);
  /* 4 KiB value buffer: keep it off the caller's stack.  None for no text
   * (no config file: most processes), whose first socket it cost a page. */
  c = pos < end ? malloc(sizeof *c) : NULL;
  if (p == NULL || (c == NULL && pos < end)) {
    free(p);
    free(c);
    if (err != NULL && errlen > 0)
      snprintf(err, errlen, "%s: out of memory", filename);
    return -ENOMEM;
  }
  fs_policy_builtin(&p->defaults);
  p->forced = -1;
  if (c != NULL) {
    c->p = p;
    c->err = err;
    c->errlen = errlen;
  }
  while (rc == 0 && pos < end) {
    const char *nl = memchr(pos, '\n', (size_t)(end - pos));
    const char *eol = nl != NULL ? nl : end;
    snprintf(c->where, sizeof c->where, "%.256s:%u: ", filename, ++lineno);
    c->s = pos;
    c->end = eol;
    if ((size_t)(eol - pos) > FS_POLICY_LINE_MAX)
      rc = fs_policy_fail(c, "line too long (more than %d bytes)", FS_POLICY_LINE_MAX);
    else if (memchr(pos, '\0', (size_t)(eol - pos)) != NULL)
      rc = fs_policy_fail(c, "NUL byte in line");
    else
      rc = fs_policy_line(c);
    pos = nl != NULL ? nl + 1 : end;
  }
  free(c);
  if (rc < 0) {
    fs_policy_free(p);
    return rc;
  }
  *out = p;
  return 0;
}

void fs_policy_free(struct fs_policy *p)
{
  if (p == NULL)
    return;
  while (p->blocks != NULL) {
    struct fs_policy_block *b = p->blocks;
    p->blocks = b->next;
    free(b);
  }
  free(p->rules);
  free(p);
}

size_t fs_policy_rule_count(const struct fs_policy *p)
{
  return p != NULL ? p->nrules : 0;
}

/* ---- environment ------------------------------------------------------ */

static int fs_policy_envfail(char *err, size_t errlen, const char *name, const char *v,
                             const char *why)
{
  char show[80];
  if (err != NULL && errlen > 0)
    snprintf(err, errlen, "%s: bad value '%s': %s", name,
             fs_value_show(v, strlen(v), show, sizeof show), why);
  return -EINVAL;
}

int fs_policy_apply_env(struct fs_policy *p, const char *(*get)(const char *name), char *err,
                        size_t errlen)
{
  struct fs_policy_action a;
  enum fs_fabric fabric;
  int forced;
  const char *v;
  char why[128];
  bool b;

  if (err != NULL && errlen > 0)
    err[0] = '\0';
  if (p == NULL || get == NULL)
    return -EINVAL;
  /* Work on a copy so a bad variable leaves p as it was. */
  a = p->defaults;
  forced = p->forced;
#define FS_ENV(name) ((v = get(name)) != NULL && v[0] != '\0')
  if (FS_ENV("FABSOCK_TRANSPORT")) {
    if (fs_value_fabric(v, &fabric, why, sizeof why) < 0)
      return fs_policy_envfail(err, errlen, "FABSOCK_TRANSPORT", v, why);
    forced = (int)fabric;
  }
  if (FS_ENV("FABSOCK_UPGRADE_BYTES") && fs_value_bytes(v, &a.upgrade_bytes, why, sizeof why) < 0)
    return fs_policy_envfail(err, errlen, "FABSOCK_UPGRADE_BYTES", v, why);
  if (FS_ENV("FABSOCK_SPIN_US") && fs_value_spin(v, &a.spin_us, &a.busy_poll, why, sizeof why) < 0)
    return fs_policy_envfail(err, errlen, "FABSOCK_SPIN_US", v, why);
  if (FS_ENV("FABSOCK_BUSY_POLL")) {
    if (fs_value_bool(v, &b, why, sizeof why) < 0)
      return fs_policy_envfail(err, errlen, "FABSOCK_BUSY_POLL", v, why);
    a.busy_poll = b;
  }
  if (FS_ENV("FABSOCK_TIMEOUT_MS") && fs_value_timeout(v, &a.timeout_ms, why, sizeof why) < 0)
    return fs_policy_envfail(err, errlen, "FABSOCK_TIMEOUT_MS", v, why);
  if (FS_ENV("FABSOCK_ANY_UID")) {
    if (fs_value_bool(v, &b, why, sizeof why) < 0)
      return fs_policy_envfail(err, errlen, "FABSOCK_ANY_UID", v, why);
    a.any_uid = b;
  }
  if (FS_ENV("FABSOCK_RDMA_KEY_FILE") && fs_conffile_key(v, &a.has_key, a.key, why, sizeof why) < 0)
    return fs_policy_envfail(err, errlen, "FABSOCK_RDMA_KEY_FILE", v, why);
#undef FS_ENV
  /* An empty FABSOCK_HOOKS means "no hooks", overriding the file's default. */
  v = get("FABSOCK_HOOKS");
  if (v != NULL && fs_value_hooks(v, strlen(v), a.hooks, why, sizeof why) < 0)
    return fs_policy_envfail(err, errlen, "FABSOCK_HOOKS", v, why);
  p->defaults = a;
  p->forced = forced;
  return 0;
}

/* ---- matching --------------------------------------------------------- */

static bool fs_policy_rule_matches(const struct fs_policy_rule *r, const struct fs_policy_query *q)
{
  if (r->dirs != 0 && (r->dirs & (unsigned)q->dir) == 0)
    return false;
  if (r->program != NULL && !fs_glob_match(r->program, q->program != NULL ? q->program : ""))
    return false;
  return fs_cidr_match(&r->local, q->local) && fs_cidr_match(&r->remote, q->remote);
}

void fs_policy_match(const struct fs_policy *p, const struct fs_policy_query *q,
                     struct fs_policy_action *out)
{
  static const struct fs_policy_query none = { NULL, 0, NULL, NULL };
  if (p == NULL) {
    fs_policy_builtin(out);
    return;
  }
  *out = p->defaults;
  if (q == NULL)
    q = &none;
  for (size_t i = 0; i < p->nrules; i++)
    if (fs_policy_rule_matches(&p->rules[i], q)) {
      fs_policy_overlay(out, &p->rules[i]);
      break;
    }
  if (p->forced >= 0)
    out->fabric = (enum fs_fabric)p->forced;
}

const char *fs_fabric_name(int fabric)
{
  static const char *const names[] = { "auto", "rdma", "shm", "tcp" };
  if (fabric < 0 || fabric > FS_FABRIC_TCP)
    return "unknown";
  return names[fabric];
}

/* ---- the process's policy --------------------------------------------- */

static pthread_once_t fs_policy_once FS_HOT = PTHREAD_ONCE_INIT;
static const struct fs_policy *fs_policy_global FS_HOT;
static bool fs_policy_disabled FS_HOT;
static bool fs_policy_env_off FS_HOT; /* FABSOCK_DISABLE: not even tracked */
static uint32_t fs_policy_ring FS_HOT;  /* FABSOCK_SHM_RING, bytes; 0 = the fabric's default */
static uint32_t fs_policy_drop FS_HOT;  /* FABSOCK_TEST_RDMA_DROP or _WEDGE: test seams, see policy.h */
static bool fs_policy_wedge FS_HOT;     /* ... it was _WEDGE */
static bool fs_policy_door FS_HOT = true; /* FABSOCK_DOORBELL (0: off) */
static bool fs_policy_kc FS_HOT = true;   /* FABSOCK_KCOPY (0: off) */
static uint32_t fs_policy_own_cc FS_HOT = FS_POLICY_RDMA_OWN_CC; /* FABSOCK_RDMA_OWN_CHANNELS */
static struct fs_policy fs_policy_fallback; /* no rules, every match tcp */
static bool fs_policy_hooks_any FS_HOT;  /* some connection may get inspection hooks */
static bool fs_policy_local_any FS_HOT;  /* some rule names a local address or port */

/* No rules, every match tcp: filled only when used (its page is not
 * FS_HOT, and most processes never need it). */
static void fs_policy_fall_back(void)
{
  fs_policy_builtin(&fs_policy_fallback.defaults);
  fs_policy_fallback.defaults.fabric = FS_FABRIC_TCP;
  fs_policy_fallback.forced = FS_FABRIC_TCP;
  fs_policy_disabled = true;
  fs_policy_global = &fs_policy_fallback;
}

static const char *fs_policy_getenv(const char *name)
{
  return getenv(name);
}

/* A switch that is on unless set to 0 (anything but 0 or 1 is warned of
 * and taken as 1); unset or empty leaves *on as it is. */
static void fs_policy_env_switch(const char *name, bool *on)
{
  const char *v = getenv(name);
  if (v == NULL || !*v)
    return;
  if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
    fs_log(FS_LOG_WARN, "%s: '%.32s' taken as 1", name, v);
  *on = strcmp(v, "0") != 0;
}

static void fs_policy_load(void)
{
  const char *v;
  char err[512];
  struct fs_policy *p = NULL;
  int rc;

  if (fs_log_configure(getenv("FABSOCK_LOG")) < 0)
    fs_log(FS_LOG_WARN, "FABSOCK_LOG: unknown words ignored");

  v = getenv("FABSOCK_DISABLE");
  if (v != NULL && v[0] != '\0' && strcmp(v, "0") != 0) {
    if (strcmp(v, "1") != 0)
      fs_log(FS_LOG_WARN, "FABSOCK_DISABLE: '%.32s' taken as 1", v);
    fs_log(FS_LOG_INFO, "FABSOCK_DISABLE set: running unaccelerated");
    fs_policy_env_off = true;
    fs_policy_fall_back();
    return;
  }
  v = getenv("FABSOCK_SHM_RING");
  if (v != NULL && *v) {
    char *end;
    unsigned long n = strtoul(v, &end, 0);
    if (*end == 'K' || *end == 'k')
      n <<= 10;
    else if (*end == 'M' || *end == 'm')
      n <<= 20;
    fs_policy_ring = n > UINT32_MAX ? 0 : (uint32_t)n; /* the fabric checks the bounds */
  }
  fs_policy_env_switch("FABSOCK_DOORBELL", &fs_policy_door);
  fs_policy_env_switch("FABSOCK_KCOPY", &fs_policy_kc);
  v = getenv("FABSOCK_RDMA_OWN_CHANNELS");
  if (v != NULL && *v) {
    char *end;
    unsigned long n = strtoul(v, &end, 10);
    if (*end || n > 65536)
      fs_log(FS_LOG_WARN, "FABSOCK_RDMA_OWN_CHANNELS: '%.32s' is not a count up to 65536; %u kept", v,
             fs_policy_own_cc);
    else
      fs_policy_own_cc = (uint32_t)n;
  }
  v = getenv("FABSOCK_TEST_RDMA_DROP");
  if (v != NULL && *v)
    fs_policy_drop = (uint32_t)strtoul(v, NULL, 10);
  v = getenv("FABSOCK_TEST_RDMA_WEDGE");
  if (v != NULL && *v && (uint32_t)strtoul(v, NULL, 10) != 0) {
    fs_policy_drop = (uint32_t)strtoul(v, NULL, 10);
    fs_policy_wedge = true;
  }
  rc = fs_conffile_load(fs_policy_getenv, &p, err, sizeof err);
  if (rc < 0) {
    fs_log(FS_LOG_ERROR, "%s; running unaccelerated", err);
    fs_policy_free(p);
    fs_policy_fall_back();
    return;
  }
  fs_policy_global = p;
  bool any = p->defaults.hooks[0] != '\0';
  for (size_t i = 0; i < p->nrules && !any; i++)
    any = (p->rules[i].set & (1u << K_HOOKS)) && p->rules[i].hooks && p->rules[i].hooks[0];
  fs_policy_hooks_any = any;
  for (size_t i = 0; i < p->nrules && !fs_policy_local_any; i++)
    fs_policy_local_any = p->rules[i].local.family != 0 || p->rules[i].local.nports != 0;
}

const struct fs_policy *fs_policy_get(bool *disabled)
{
  int saved = errno;
  pthread_once(&fs_policy_once, fs_policy_load);
  errno = saved;
  if (disabled != NULL)
    *disabled = fs_policy_disabled;
  return fs_policy_global;
}

bool fs_policy_off(void)
{
  (void)fs_policy_get(NULL);
  return fs_policy_env_off;
}

uint32_t fs_policy_test_rdma_drop(void)
{
  (void)fs_policy_get(NULL);
  return fs_policy_drop;
}

bool fs_policy_may_hook(void)
{
  (void)fs_policy_get(NULL);
  return fs_policy_hooks_any;
}

bool fs_policy_needs_local(void)
{
  (void)fs_policy_get(NULL);
  return fs_policy_local_any;
}

bool fs_policy_test_rdma_wedge(void)
{
  (void)fs_policy_get(NULL);
  return fs_policy_wedge;
}

bool fs_policy_doorbell(void)
{
  (void)fs_policy_get(NULL);
  return fs_policy_door;
}

bool fs_policy_kcopy(void)
{
  (void)fs_policy_get(NULL);
  return fs_policy_kc;
}

uint32_t fs_policy_rdma_own(void)
{
  (void)fs_policy_get(NULL);
  return fs_policy_own_cc;
}

uint32_t fs_policy_ring_size(void)
{
  (void)fs_policy_get(NULL);
  return fs_policy_ring;
}
