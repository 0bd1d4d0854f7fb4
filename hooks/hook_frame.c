#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hooks/hook_frame.h"
#include "hooks/hook_spec.h"
#include "base/log.h"

#define FRAME_LOG_MAX 8  /* violations logged per direction */

enum { PH_HDR, PH_BODY, PH_STOPPED };

struct frame_dir {
  int phase;
  unsigned have;           /* header bytes collected (PH_HDR) */
  uint8_t hdr[16];
  uint64_t remaining;      /* payload bytes left (PH_BODY) */
  uint64_t cur;            /* payload length of the current frame */
  uint64_t line_len;       /* line mode: bytes since the last LF */
  uint8_t last;            /* line mode: the byte before the current one */
  int line_over;           /* line mode: this line was reported */
  uint64_t offset;         /* stream offset of the next byte */
  uint64_t msgs, largest;
  unsigned logged;
};

struct fs_hook_frame {
  struct fs_hook_frame_conf conf;
  int fd;
  struct fs_stat_conn *stat;
  int count_dirs;          /* directions counted into stat */
  struct frame_dir d[2];
};

static int hexval(char c)
{
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* "lenNN[be|le]" */
static int parse_len(const char *s, size_t n, struct fs_hook_frame_conf *c)
{
  static const struct { const char *txt; unsigned width; } w[] = {
    { "len8", 1 }, { "len16", 2 }, { "len32", 4 }, { "len64", 8 },
  };
  for (unsigned i = 0; i < 4; i++) {
    size_t l = strlen(w[i].txt);
    if (n < l || memcmp(s, w[i].txt, l) != 0)
      continue;
    if (n == l || fs_hook_spec_is(s + l, n - l, "be")) {
      c->width = w[i].width;
      c->little = 0;
      return 0;
    }
    if (fs_hook_spec_is(s + l, n - l, "le")) {
      c->width = w[i].width;
      c->little = 1;
      return 0;
    }
  }
  return -EINVAL;
}

static int parse_header(const char *s, size_t n, struct fs_hook_frame_conf *c)
{
  c->line = 0;
  c->magic_len = 0;
  if (fs_hook_spec_is(s, n, "line")) {
    c->line = 1;
    return 0;
  }
  if (n > 6 && memcmp(s, "magic:", 6) == 0) {
    const char *hex = s + 6, *plus = memchr(hex, '+', n - 6);
    if (plus == NULL)
      return -EINVAL;
    size_t hn = (size_t)(plus - hex);
    if (hn < 2 || hn > 16 || hn % 2)
      return -EINVAL;
    for (size_t i = 0; i < hn; i += 2) {
      int hi = hexval(hex[i]), lo = hexval(hex[i + 1]);
      if (hi < 0 || lo < 0)
        return -EINVAL;
      c->magic[i / 2] = (uint8_t)(hi << 4 | lo);
    }
    c->magic_len = (unsigned)(hn / 2);
    return parse_len(plus + 1, n - (size_t)(plus + 1 - s), c);
  }
  return parse_len(s, n, c);
}

int fs_hook_frame_conf_parse(const char *args, struct fs_hook_frame_conf *c, char *err,
                             size_t errlen)
{
  memset(c, 0, sizeof *c);
  c->width = 4;
  c->max = UINT64_MAX;
  c->close = 1;
  c->dirs = FS_HOOK_DIR_BOTH;
  struct fs_hook_spec_kv kv;
  int r;
  const char *p = args ? args : "";
  while ((r = fs_hook_spec_kv_next(&p, &kv)) != 0) {
    if (r < 0) {
      fs_hook_spec_errf(err, errlen, "frame: expected KEY=VALUE, got '%.*s'", (int)kv.klen, kv.key);
      return -EINVAL;
    }
    if (fs_hook_spec_is(kv.key, kv.klen, "header")) {
      if (parse_header(kv.val, kv.vlen, c) < 0) {
        fs_hook_spec_errf(err, errlen, "frame: bad header '%.*s' (lenNN[be|le] with NN 8/16/32/64, "
                     "magic:HEX+lenNN[be|le], or line)", (int)kv.vlen, kv.val);
        return -EINVAL;
      }
    } else if (fs_hook_spec_is(kv.key, kv.klen, "max")) {
      if (fs_hook_spec_size(kv.val, kv.vlen, &c->max) < 0) {
        fs_hook_spec_errf(err, errlen, "frame: bad max '%.*s'", (int)kv.vlen, kv.val);
        return -EINVAL;
      }
    } else if (fs_hook_spec_is(kv.key, kv.klen, "action")) {
      if (fs_hook_spec_is(kv.val, kv.vlen, "close"))
        c->close = 1;
      else if (fs_hook_spec_is(kv.val, kv.vlen, "log"))
        c->close = 0;
      else {
        fs_hook_spec_errf(err, errlen, "frame: bad action '%.*s' (log or close)",
                          (int)kv.vlen, kv.val);
        return -EINVAL;
      }
    } else if (fs_hook_spec_is(kv.key, kv.klen, "dir")) {
      if (fs_hook_spec_dir(kv.val, kv.vlen, "frame", &c->dirs, err, errlen) < 0)
        return -EINVAL;
    } else {
      fs_hook_spec_errf(err, errlen, "frame: unknown key '%.*s'", (int)kv.klen, kv.key);
      return -EINVAL;
    }
  }
  return 0;
}

struct fs_hook_frame *fs_hook_frame_new(const struct fs_hook_frame_conf *conf, int fd,
                                        struct fs_stat_conn *stat, int count_dirs)
{
  struct fs_hook_frame *f = calloc(1, sizeof *f);
  if (f == NULL)
    return NULL;
  f->conf = *conf;
  f->fd = fd;
  f->stat = stat;
  f->count_dirs = count_dirs & conf->dirs;
  return f;
}

void fs_hook_frame_free(struct fs_hook_frame *f)
{
  if (f == NULL)
    return;
  fs_log(FS_LOG_DEBUG,
         "frame: fd %d: sent %llu messages (largest %llu), received %llu (largest %llu)",
         f->fd, (unsigned long long)f->d[0].msgs, (unsigned long long)f->d[0].largest,
         (unsigned long long)f->d[1].msgs, (unsigned long long)f->d[1].largest);
  free(f);
}

int fs_hook_frame_checks(const struct fs_hook_frame *f, int dir)
{
  return (f->conf.dirs >> dir) & 1;
}

void fs_hook_frame_counts(const struct fs_hook_frame *f, int dir, uint64_t *msgs, uint64_t *largest)
{
  *msgs = f->d[dir].msgs;
  *largest = f->d[dir].largest;
}

static const char *const dir_name[2] = { "send", "recv" };

/* Log one violation (rate-limited) and return the verdict: 1 close, 0 go on. */
static int violation(struct fs_hook_frame *f, int dir, const char *what)
{
  struct frame_dir *d = &f->d[dir];
  if (f->conf.close) {
    fs_log(FS_LOG_WARN, "frame: fd %d: %s; closing (%s, stream offset %llu)", f->fd, what,
           dir_name[dir], (unsigned long long)d->offset);
    return 1;
  }
  if (d->logged < FRAME_LOG_MAX)
    fs_log(FS_LOG_WARN, "frame: fd %d: %s; logged (%s, stream offset %llu)", f->fd, what,
           dir_name[dir], (unsigned long long)d->offset);
  else if (d->logged == FRAME_LOG_MAX)
    fs_log(FS_LOG_WARN, "frame: fd %d: further %s violations not logged", f->fd, dir_name[dir]);
  if (d->logged <= FRAME_LOG_MAX)
    d->logged++;
  return 0;
}

static void count_msg(struct fs_hook_frame *f, int dir, uint64_t size)
{
  struct frame_dir *d = &f->d[dir];
  d->msgs++;
  if (size > d->largest)
    d->largest = size;
  if (!((f->count_dirs >> dir) & 1))
    return;
  if (dir == FS_HOOK_SEND) /* this direction's calls are serialized (hooks/hook.h) */
    FS_STAT_BUMP(f->stat, tx_msgs, 1);
  else
    FS_STAT_BUMP(f->stat, rx_msgs, 1);
}

static uint64_t decode_len(const struct fs_hook_frame_conf *c, const uint8_t *p)
{
  uint64_t v = 0;
  for (unsigned i = 0; i < c->width; i++)
    v |= (uint64_t)p[i] << (8 * (c->little ? i : c->width - 1 - i));
  return v;
}

/* A complete header at h: check it and enter PH_BODY (or count an empty frame).
 * Returns 1 to close. */
static int header_done(struct fs_hook_frame *f, int dir, const uint8_t *h)
{
  const struct fs_hook_frame_conf *c = &f->conf;
  struct frame_dir *d = &f->d[dir];
  char what[160];
  d->have = 0;
  if (c->magic_len && memcmp(h, c->magic, c->magic_len) != 0) {
    char got[20], want[20];
    for (unsigned i = 0; i < c->magic_len; i++) {
      snprintf(got + 2 * i, 3, "%02X", h[i]);
      snprintf(want + 2 * i, 3, "%02X", c->magic[i]);
    }
    snprintf(what, sizeof what, "bad frame magic %s (expected %s)", got, want);
    /* Offsets are of the frame start: the header was consumed already. */
    d->offset -= c->magic_len + c->width;
    int v = violation(f, dir, what);
    d->offset += c->magic_len + c->width;
    if (!v && d->logged <= FRAME_LOG_MAX)
      fs_log(FS_LOG_WARN, "frame: fd %d: no longer checking %s (cannot resynchronize)",
             f->fd, dir_name[dir]);
    d->phase = PH_STOPPED;
    return v;
  }
  uint64_t n = decode_len(c, h + c->magic_len);
  if (n > c->max) {
    snprintf(what, sizeof what, "frame of %llu bytes exceeds max %llu",
             (unsigned long long)n, (unsigned long long)c->max);
    d->offset -= c->magic_len + c->width;
    int v = violation(f, dir, what);
    d->offset += c->magic_len + c->width;
    if (v) {
      d->phase = PH_STOPPED;
      return 1;
    }
  }
  if (n == 0) {
    count_msg(f, dir, 0);
    d->phase = PH_HDR;
  } else {
    d->remaining = n;
    d->cur = n;
    d->phase = PH_BODY;
  }
  return 0;
}

static int feed_len(struct fs_hook_frame *f, int dir, const uint8_t *p, size_t len)
{
  struct frame_dir *d = &f->d[dir];
  const unsigned hlen = f->conf.magic_len + f->conf.width;
  while (len > 0) {
    switch (d->phase) {
    case PH_HDR:
      if (d->have == 0 && len >= hlen) { /* whole header in this chunk */
        p += hlen, len -= hlen, d->offset += hlen;
        if (header_done(f, dir, p - hlen))
          return 1;
      } else {
        size_t take = hlen - d->have;
        if (take > len)
          take = len;
        memcpy(d->hdr + d->have, p, take);
        d->have += (unsigned)take;
        p += take, len -= take, d->offset += take;
        if (d->have == hlen && header_done(f, dir, d->hdr))
          return 1;
      }
      break;
    case PH_BODY: {
      uint64_t take = d->remaining < len ? d->remaining : len;
      d->remaining -= take;
      p += take, len -= take, d->offset += take;
      if (d->remaining == 0) {
        d->phase = PH_HDR;
        count_msg(f, dir, d->cur);
      }
      break;
    }
    default: /* PH_STOPPED */
      d->offset += len;
      return 0;
    }
  }
  return 0;
}

static int feed_line(struct fs_hook_frame *f, int dir, const uint8_t *p, size_t len)
{
  struct frame_dir *d = &f->d[dir];
  const uint64_t max = f->conf.max;
  char what[160];
  while (len > 0) {
    if (d->phase == PH_STOPPED) {
      d->offset += len;
      return 0;
    }
    const uint8_t *nl = memchr(p, '\n', len);
    size_t seg = nl ? (size_t)(nl - p) : len;
    if (seg > 0) {
      d->line_len += seg;
      d->last = p[seg - 1];
    }
    d->offset += seg;
    if (nl == NULL) {
      /* No LF yet: too long for sure once even a final CR would not help. */
      if (!d->line_over && max != UINT64_MAX && d->line_len > max + 1) {
        snprintf(what, sizeof what, "line of at least %llu bytes exceeds max %llu",
                 (unsigned long long)d->line_len, (unsigned long long)max);
        d->line_over = 1;
        if (violation(f, dir, what)) {
          d->phase = PH_STOPPED;
          return 1;
        }
      }
      return 0;
    }
    uint64_t n = d->line_len - (d->line_len > 0 && d->last == '\r');
    if (!d->line_over && n > max) {
      snprintf(what, sizeof what, "line of %llu bytes exceeds max %llu",
               (unsigned long long)n, (unsigned long long)max);
      if (violation(f, dir, what)) {
        d->phase = PH_STOPPED;
        return 1;
      }
    }
    count_msg(f, dir, n);
    d->line_len = 0;
    d->line_over = 0;
    d->last = '\n';
    p += seg + 1, len -= seg + 1, d->offset++;
  }
  return 0;
}

int fs_hook_frame_feed(struct fs_hook_frame *f, int dir, const uint8_t *buf, size_t len)
{
  if (!fs_hook_frame_checks(f, dir))
    return 0;
  return f->conf.line ? feed_line(f, dir, buf, len) : feed_len(f, dir, buf, len);
}

size_t fs_hook_frame_wake_hint(const struct fs_hook_frame *f)
{
  const struct frame_dir *d = &f->d[FS_HOOK_RECV];
  if (f->conf.line || !fs_hook_frame_checks(f, FS_HOOK_RECV))
    return 0;
  if (d->phase == PH_BODY)
    return d->remaining > SIZE_MAX ? SIZE_MAX : (size_t)d->remaining;
  if (d->phase == PH_HDR && d->have > 0)
    return f->conf.magic_len + f->conf.width - d->have;
  return 0;
}
