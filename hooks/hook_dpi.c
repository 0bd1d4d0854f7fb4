#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hooks/hook_dpi.h"
#include "hooks/hook_frame.h"
#include "hooks/hook_spec.h"
#include "base/log.h"

#define DPI_LOG_MAX 8       /* matches logged per direction with action=log */
#define DPI_CACHE_MAX 16    /* compiled pattern files kept for reuse */

/* ---- pattern file --------------------------------------------------------- */

void fs_hook_dpi_patterns_free(struct fs_hook_dpi_patterns *p)
{
  if (p == NULL)
    return;
  free(p->pat), free(p->line), free(p->data), free(p->name);
  free(p);
}

static int hexval(unsigned char c)
{
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

int fs_hook_dpi_patterns_parse(const char *text, size_t len, const char *fname,
                               struct fs_hook_dpi_patterns **out, char *err, size_t errlen)
{
  struct fs_hook_dpi_patterns *ps = calloc(1, sizeof *ps);
  uint32_t cap = 0, lineno = 0;
  size_t total = 0, pos = 0;
  if (ps == NULL)
    goto nomem;
  ps->name = strdup(fname ? fname : "patterns");
  ps->data = malloc(len ? len : 1); /* decoded text is never longer */
  if (!ps->name || !ps->data)
    goto nomem;
  while (pos < len) {
    const char *l = text + pos;
    const char *nl = memchr(l, '\n', len - pos);
    size_t n = nl ? (size_t)(nl - l) : len - pos;
    pos += n + (nl != NULL);
    lineno++;
    if (n > 0 && l[n - 1] == '\r')
      n--;
    if (n == 0 || l[0] == '#')
      continue;
    if (ps->n == FS_HOOK_DPI_MAX_PATTERNS) {
      fs_hook_spec_errf(err, errlen, "%s:%u: more than %d patterns", ps->name, lineno,
                   FS_HOOK_DPI_MAX_PATTERNS);
      goto bad;
    }
    uint8_t *d = ps->data + total;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
      unsigned char c = (unsigned char)l[i];
      if (c == '\\') {
        if (i + 1 < n && l[i + 1] == '\\') {
          i++;
        } else if (i + 3 < n && l[i + 1] == 'x' && hexval((unsigned char)l[i + 2]) >= 0 &&
                   hexval((unsigned char)l[i + 3]) >= 0) {
          c = (unsigned char)(hexval((unsigned char)l[i + 2]) << 4 |
                              hexval((unsigned char)l[i + 3]));
          i += 3;
        } else {
          char bad[16] = "\\";
          fs_hook_spec_printable(bad + 1, sizeof bad - 1, l + i + 1, n - i - 1 < 3 ? n - i - 1 : 3);
          fs_hook_spec_errf(err, errlen, "%s:%u: bad escape '%s' (use \\xNN or \\\\)", ps->name,
                       lineno, bad);
          goto bad;
        }
      }
      if (m == FS_HOOK_DPI_MAX_PATLEN) {
        fs_hook_spec_errf(err, errlen, "%s:%u: pattern longer than %d bytes", ps->name, lineno,
                     FS_HOOK_DPI_MAX_PATLEN);
        goto bad;
      }
      d[m++] = c;
    }
    if (total + m > FS_HOOK_DPI_MAX_TOTAL) {
      fs_hook_spec_errf(err, errlen, "%s:%u: patterns exceed %u bytes in all", ps->name, lineno,
                   FS_HOOK_DPI_MAX_TOTAL);
      goto bad;
    }
    if (ps->n == cap) {
      uint32_t ncap = cap ? cap * 2 : 64;
      struct fs_hook_ac_pattern *np = realloc(ps->pat, ncap * sizeof *np);
      if (np)
        ps->pat = np;
      uint32_t *nl2 = realloc(ps->line, ncap * sizeof *nl2);
      if (nl2)
        ps->line = nl2;
      if (!np || !nl2)
        goto nomem;
      cap = ncap;
    }
    ps->pat[ps->n].p = d; /* data never moves */
    ps->pat[ps->n].len = (uint32_t)m;
    ps->line[ps->n] = lineno;
    ps->n++;
    total += m;
  }
  *out = ps;
  return 0;
nomem:
  fs_hook_spec_errf(err, errlen, "%s: out of memory", fname ? fname : "patterns");
  fs_hook_dpi_patterns_free(ps);
  return -ENOMEM;
bad:
  fs_hook_dpi_patterns_free(ps);
  return -EINVAL;
}

/* Read a whole regular file; *st gets its identity. */
static int read_file(const char *path, char **text, size_t *len, struct stat *st,
                     char *err, size_t errlen)
{
  char ebuf[128];
  FILE *f = fopen(path, "re");
  int rc;
  *text = NULL;
  if (f == NULL) {
    rc = -errno;
    fs_hook_spec_errf(err, errlen, "%s: %s", path, strerror_r(-rc, ebuf, sizeof ebuf));
    return rc;
  }
  if (fstat(fileno(f), st) < 0 || !S_ISREG(st->st_mode)) {
    fs_hook_spec_errf(err, errlen, "%s: not a regular file", path);
    rc = -EINVAL;
    goto out;
  }
  if (st->st_size > FS_HOOK_DPI_MAX_FILE) {
    fs_hook_spec_errf(err, errlen, "%s: larger than %u bytes", path, FS_HOOK_DPI_MAX_FILE);
    rc = -EINVAL;
    goto out;
  }
  *text = malloc((size_t)st->st_size + 1);
  if (*text == NULL) {
    fs_hook_spec_errf(err, errlen, "%s: out of memory", path);
    rc = -ENOMEM;
    goto out;
  }
  *len = fread(*text, 1, (size_t)st->st_size + 1, f);
  if (ferror(f) || *len > (size_t)st->st_size) { /* error, or it grew under us */
    fs_hook_spec_errf(err, errlen, "%s: read error or file changed while reading", path);
    rc = -EIO;
    free(*text);
    *text = NULL;
    goto out;
  }
  rc = 0;
out:
  fclose(f);
  return rc;
}

static int load(const char *path, struct fs_hook_dpi_patterns **out, struct stat *st,
                char *err, size_t errlen)
{
  char *text;
  size_t len = 0;
  int rc = read_file(path, &text, &len, st, err, errlen);
  if (rc < 0)
    return rc;
  rc = fs_hook_dpi_patterns_parse(text, len, path, out, err, errlen);
  free(text);
  return rc;
}

int fs_hook_dpi_patterns_load(const char *path, struct fs_hook_dpi_patterns **out, char *err,
                              size_t errlen)
{
  struct stat st;
  return load(path, out, &st, err, errlen);
}

/* ---- arguments ------------------------------------------------------------ */

int fs_hook_dpi_conf_parse(const char *args, struct fs_hook_dpi_conf *c, char *err, size_t errlen)
{
  memset(c, 0, sizeof *c);
  c->action = FS_HOOK_DPI_LOG;
  c->dirs = FS_HOOK_DIR_RECV;
  struct fs_hook_spec_kv kv;
  int r;
  const char *p = args ? args : "";
  while ((r = fs_hook_spec_kv_next(&p, &kv)) != 0) {
    if (r < 0) {
      fs_hook_spec_errf(err, errlen, "dpi: expected KEY=VALUE, got '%.*s'", (int)kv.klen, kv.key);
      return -EINVAL;
    }
    if (fs_hook_spec_is(kv.key, kv.klen, "patterns")) {
      c->path = kv.val;
      c->path_len = kv.vlen;
    } else if (fs_hook_spec_is(kv.key, kv.klen, "action")) {
      if (fs_hook_spec_is(kv.val, kv.vlen, "log"))
        c->action = FS_HOOK_DPI_LOG;
      else if (fs_hook_spec_is(kv.val, kv.vlen, "count"))
        c->action = FS_HOOK_DPI_COUNT;
      else if (fs_hook_spec_is(kv.val, kv.vlen, "close"))
        c->action = FS_HOOK_DPI_CLOSE;
      else {
        fs_hook_spec_errf(err, errlen, "dpi: bad action '%.*s' (log, count or close)",
                          (int)kv.vlen, kv.val);
        return -EINVAL;
      }
    } else if (fs_hook_spec_is(kv.key, kv.klen, "dir")) {
      if (fs_hook_spec_dir(kv.val, kv.vlen, "dpi", &c->dirs, err, errlen) < 0)
        return -EINVAL;
    } else {
      fs_hook_spec_errf(err, errlen, "dpi: unknown key '%.*s'", (int)kv.klen, kv.key);
      return -EINVAL;
    }
  }
  if (c->path == NULL) {
    fs_hook_spec_errf(err, errlen, "dpi: patterns=FILE is required");
    return -EINVAL;
  }
  if (c->path_len >= 4096) {
    fs_hook_spec_errf(err, errlen, "dpi: patterns path too long");
    return -EINVAL;
  }
  return 0;
}

/* ---- compiled sets, shared and cached ------------------------------------- */

struct dpi_set {
  uint32_t refs;               /* instances + 1 while in the cache; atomic */
  struct fs_hook_ac *ac;
  struct fs_hook_dpi_patterns *pats;
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime;
  struct dpi_set *next;        /* cache list, newest first */
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct dpi_set *cache;

static void set_put(struct dpi_set *s)
{
  if (s && __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0) {
    fs_hook_ac_free(s->ac);
    fs_hook_dpi_patterns_free(s->pats);
    free(s);
  }
}

static int same_file(const struct dpi_set *s, const char *path, const struct stat *st)
{
  return s->dev == st->st_dev && s->ino == st->st_ino && s->size == st->st_size &&
         s->mtime.tv_sec == st->st_mtim.tv_sec && s->mtime.tv_nsec == st->st_mtim.tv_nsec &&
         strcmp(s->pats->name, path) == 0;
}

/* A referenced set for path, from the cache or freshly built. */
static int set_get(const char *path, struct dpi_set **out, char *err, size_t errlen)
{
  struct stat st;
  struct dpi_set *s;
  if (stat(path, &st) == 0) {
    pthread_mutex_lock(&cache_lock);
    for (s = cache; s; s = s->next)
      if (same_file(s, path, &st)) {
        __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
        break;
      }
    pthread_mutex_unlock(&cache_lock);
    if (s) {
      *out = s;
      return 0;
    }
  }
  /* Build outside the lock: a large file takes a while. */
  s = calloc(1, sizeof *s);
  if (s == NULL)
    return -ENOMEM;
  int rc = load(path, &s->pats, &st, err, errlen);
  if (rc == 0) {
    rc = fs_hook_ac_build(s->pats->pat, s->pats->n, 0, &s->ac);
    if (rc == -EINVAL)
      fs_hook_spec_errf(err, errlen, "%s: patterns need more than %u automaton states", path,
                   FS_HOOK_AC_MAX_STATES);
    else if (rc < 0)
      fs_hook_spec_errf(err, errlen, "%s: out of memory compiling patterns", path);
  }
  if (rc < 0) {
    fs_hook_dpi_patterns_free(s->pats);
    free(s);
    return rc;
  }
  s->dev = st.st_dev, s->ino = st.st_ino, s->size = st.st_size, s->mtime = st.st_mtim;
  s->refs = 2; /* the caller's and the cache's */
  fs_log(FS_LOG_INFO, "dpi: %s: %u patterns, %u states (%u dense), %zu KiB", path,
         s->pats->n, fs_hook_ac_states(s->ac), fs_hook_ac_dense_states(s->ac),
         fs_hook_ac_memory(s->ac) >> 10);
  /* Insert, dropping older versions of the same file and the oldest sets. */
  struct dpi_set *drop = NULL, **pp;
  unsigned n = 0;
  pthread_mutex_lock(&cache_lock);
  s->next = cache;
  cache = s;
  for (pp = &s->next; *pp;) {
    struct dpi_set *x = *pp;
    if (strcmp(x->pats->name, path) == 0 || ++n >= DPI_CACHE_MAX) {
      *pp = x->next;
      x->next = drop;
      drop = x;
    } else {
      pp = &x->next;
    }
  }
  pthread_mutex_unlock(&cache_lock);
  while (drop) {
    struct dpi_set *x = drop;
    drop = x->next;
    set_put(x);
  }
  *out = s;
  return 0;
}

void fs_hook_dpi_cache_clear(void)
{
  pthread_mutex_lock(&cache_lock);
  struct dpi_set *s = cache;
  cache = NULL;
  pthread_mutex_unlock(&cache_lock);
  while (s) {
    struct dpi_set *x = s;
    s = s->next;
    set_put(x);
  }
}

/* ---- instances ------------------------------------------------------------ */

struct dpi_dir {
  uint32_t state;
  unsigned logged;
  uint64_t offset;   /* stream offset of the next byte */
  uint64_t matches;  /* written by this direction's thread only; read relaxed */
};

struct fs_hook_dpi {
  struct dpi_set *set;
  int fd, action, dirs;
  struct dpi_dir d[2];
};

int fs_hook_dpi_new(const struct fs_hook_dpi_conf *c, int fd, struct fs_hook_dpi **out,
                    char *err, size_t errlen)
{
  char path[4096];
  memcpy(path, c->path, c->path_len);
  path[c->path_len] = '\0';
  struct fs_hook_dpi *d = calloc(1, sizeof *d);
  if (d == NULL)
    return -ENOMEM;
  int rc = set_get(path, &d->set, err, errlen);
  if (rc < 0) {
    free(d);
    return rc;
  }
  d->fd = fd;
  d->action = c->action;
  d->dirs = c->dirs;
  *out = d;
  return 0;
}

void fs_hook_dpi_free(struct fs_hook_dpi *d)
{
  if (d == NULL)
    return;
  set_put(d->set);
  free(d);
}

uint64_t fs_hook_dpi_count(const struct fs_hook_dpi *d)
{
  return __atomic_load_n(&d->d[0].matches, __ATOMIC_RELAXED) +
         __atomic_load_n(&d->d[1].matches, __ATOMIC_RELAXED);
}

static const char *const dir_name[2] = { "send", "recv" };

static void log_match(struct fs_hook_dpi *d, int dir, uint32_t nmatch)
{
  struct dpi_dir *x = &d->d[dir];
  const struct fs_hook_dpi_patterns *ps = d->set->pats;
  uint32_t id = fs_hook_ac_state_pattern(d->set->ac, x->state);
  if (id >= ps->n)
    return;
  char txt[100];
  fs_hook_spec_printable(txt, sizeof txt, ps->pat[id].p, ps->pat[id].len);
  fs_log(FS_LOG_WARN, "dpi: fd %d: pattern '%s' (%s:%u%s) matched at %s offset %llu; %s", d->fd,
         txt, ps->name, ps->line[id], nmatch > 1 ? " and others" : "", dir_name[dir],
         (unsigned long long)(x->offset - ps->pat[id].len),
         d->action == FS_HOOK_DPI_CLOSE ? "closing" : "logged");
}

int fs_hook_dpi_feed(struct fs_hook_dpi *d, int dir, const uint8_t *buf, size_t len)
{
  if (!((d->dirs >> dir) & 1))
    return 0;
  struct dpi_dir *x = &d->d[dir];
  const struct fs_hook_ac *ac = d->set->ac;
  while (len > 0) {
    uint32_t nmatch;
    size_t used = fs_hook_ac_scan(ac, &x->state, buf, len, &nmatch);
    buf += used, len -= used, x->offset += used;
    if (nmatch == 0)
      continue;
    __atomic_store_n(&x->matches, x->matches + nmatch, __ATOMIC_RELAXED);
    if (d->action == FS_HOOK_DPI_CLOSE) {
      log_match(d, dir, nmatch);
      return 1;
    }
    if (d->action == FS_HOOK_DPI_LOG) {
      if (x->logged < DPI_LOG_MAX)
        log_match(d, dir, nmatch);
      else if (x->logged == DPI_LOG_MAX)
        fs_log(FS_LOG_WARN, "dpi: fd %d: further %s matches not logged (still counted)", d->fd,
               dir_name[dir]);
      if (x->logged <= DPI_LOG_MAX)
        x->logged++;
    }
  }
  return 0;
}
