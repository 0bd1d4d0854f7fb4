#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <sys/types.h>

#include "base/kcopy.h"
#include "base/real.h"
#include "fabric/ring.h"

#define FS_ALIGN8(x) (((x) + 7u) & ~(uint64_t)7u)

static inline uint32_t fs_ring_off(const struct fs_ring *r, uint64_t pos)
{
  return (uint32_t)(pos & (r->size - 1));
}

/* n bytes between the ring at `at` and buf (to_ring: into the ring): by
 * the kernel while this end's budget lasts and the copy is a page or more
 * (struct fs_ring's kcopy), else, or for what the kernel did not copy, by
 * memcpy. */
static void fs_ring_copy(struct fs_ring *r, uint8_t *at, void *buf, size_t n, bool to_ring)
{
  size_t k = 0;
  uint32_t b = __atomic_load_n(&r->kcopy, __ATOMIC_RELAXED);
  if (__builtin_expect(b != 0, 0) && n >= FS_RING_KC_MIN) {
    size_t charge = n > FS_RING_KC_CHARGE ? n : FS_RING_KC_CHARGE;
    __atomic_store_n(&r->kcopy, b > charge ? b - (uint32_t)charge : 0, __ATOMIC_RELAXED);
    k = to_ring ? fs_kcopy_to_map(at, buf, n) : fs_kcopy_from_map(buf, at, n);
    if (k == 0 && !fs_kcopy_usable())
      __atomic_store_n(&r->kcopy, 0, __ATOMIC_RELAXED);
  }
  if (k < n) {
    if (to_ring)
      memcpy(at + k, (const uint8_t *)buf + k, n - k);
    else
      memcpy((uint8_t *)buf + k, at + k, n - k);
  }
}

/* n bytes between the ring at position pos and buf, wrapping. */
static void fs_ring_copy_at(struct fs_ring *r, uint64_t pos, void *buf, size_t n, bool to_ring)
{
  uint32_t off = fs_ring_off(r, pos);
  size_t first = r->size - off;
  if (first > n)
    first = n;
  fs_ring_copy(r, r->data + off, buf, first, to_ring);
  if (n > first)
    fs_ring_copy(r, r->data, (uint8_t *)buf + first, n - first, to_ring);
}

static inline void fs_ring_write_at(struct fs_ring *r, uint64_t pos, const void *src, size_t n)
{
  fs_ring_copy_at(r, pos, (void *)src, n, true);
}

static inline void fs_ring_read_at(struct fs_ring *r, uint64_t pos, void *dst, size_t n)
{
  fs_ring_copy_at(r, pos, dst, n, false);
}

/* Positions in use (tail - head), from the cached head if that leaves at
 * least `room` below lim (the ring's size, or its cap). */
static uint64_t fs_ring_used(struct fs_ring *r, uint64_t tail, uint64_t room, uint64_t lim)
{
  uint64_t used = tail - __atomic_load_n(&r->head_seen, __ATOMIC_RELAXED);
  if (used > lim || lim - used < room) {
    uint64_t head = fs_ring_load(&r->ctl->head);
    __atomic_store_n(&r->head_seen, head, __ATOMIC_RELAXED);
    used = tail - head;
  }
  return used;
}

/* Positions left below lim with `used` in use. */
static inline uint64_t fs_ring_left(uint64_t used, uint64_t lim)
{
  return used >= lim ? 0 : lim - used;
}

static size_t fs_ring_free(struct fs_ring *r, size_t want)
{
  uint64_t used = fs_ring_used(r, __atomic_load_n(&r->ctl->tail, __ATOMIC_RELAXED), want, r->size);
  return (size_t)fs_ring_left(used, r->size);
}

/* The producer's window now, 0 if none. */
static uint32_t fs_ring_win(const struct fs_ring *r)
{
  uint32_t win = __atomic_load_n(&r->win, __ATOMIC_RELAXED);
  return win < r->size ? win : 0;
}

size_t fs_ring_limit(const struct fs_ring *r)
{
  uint32_t cap = __atomic_load_n(&r->cap, __ATOMIC_RELAXED), win = fs_ring_win(r);
  uint32_t lim = win ? win : r->size;
  return cap && cap < lim ? cap : lim;
}

/* Is a look for `rest` due for a record of `want` bytes at tail (offset
 * o)?  A small record, at or past `rest`, no sooner than rest_next (a look
 * that found data waits a quarter of `rest`; the put path sets it). */
static bool fs_ring_rest_look(const struct fs_ring *r, size_t want, uint64_t tail, uint32_t o)
{
  uint32_t rest = __atomic_load_n(&r->rest, __ATOMIC_RELAXED);
  return rest && want <= rest / FS_RING_REST_REC && o >= rest &&
         tail >= __atomic_load_n(&r->rest_next, __ATOMIC_RELAXED);
}

/* A look due (fs_ring_rest_look): is the ring empty, so that fs_ring_place
 * goes back to the start?  The head is read afresh only where the one seen
 * last is not tail. */
static bool fs_ring_rest_due(struct fs_ring *r, size_t want, uint64_t tail, uint32_t o)
{
  if (!fs_ring_rest_look(r, want, tail, o))
    return false;
  if (__atomic_load_n(&r->head_seen, __ATOMIC_RELAXED) == tail)
    return true;
  uint64_t head = fs_ring_load(&r->ctl->head);
  __atomic_store_n(&r->head_seen, head, __ATOMIC_RELAXED);
  return head == tail;
}

/* The DATA payload one record may carry with `free` positions free (its
 * header and the reserve kept), at most `most`: a multiple of 8. */
static size_t fs_ring_payload(uint64_t free, uint64_t most)
{
  const uint64_t over = FS_RING_RESERVE + FS_RING_HDR;
  uint64_t n = free < over + 8 ? 0 : (free - over) & ~7ull;
  return (size_t)(n < (most & ~7ull) ? n : most & ~7ull);
}

/* Where the next DATA record goes and the payload it may carry (for one
 * wanting `want`): at tail, or behind a SKIP (*skip: its span, 0 if none)
 * at the start of the next lap, whichever holds more.  Free positions are
 * the hard bound (a SKIP in flight counts: nothing overwrites what the
 * consumer has not passed); the window and the cap are the producer's own
 * policy (the cap does not count the SKIP it would write). */
static size_t fs_ring_place(struct fs_ring *r, size_t want, uint64_t *skip)
{
  const uint64_t need = FS_RING_RESERVE + FS_RING_HDR + 8; /* a record of 8 bytes */
  uint64_t tail = __atomic_load_n(&r->ctl->tail, __ATOMIC_RELAXED);
  uint32_t cap = __atomic_load_n(&r->cap, __ATOMIC_RELAXED), win = fs_ring_win(r), o = fs_ring_off(r, tail);
  uint64_t lim = cap && cap < r->size ? cap : r->size;
  size_t here = 0;
  *skip = 0;
  if (fs_ring_rest_due(r, want, tail, o)) {
    /* Empty: behind a SKIP over the rest of this lap, the record may take
     * the o positions up to the consumer's head (and the cap, the window).
     * Only where all of it fits: a write is never cut short for this. */
    size_t there = fs_ring_payload(o < lim ? o : lim, win ? win - FS_RING_HDR : UINT64_MAX);
    if (there >= want) {
      *skip = r->size - o;
      return there;
    }
  }
  if (!win || o + FS_RING_HDR + 8 <= win) {
    uint64_t used = fs_ring_used(r, tail, want + need, lim);
    here = fs_ring_payload(fs_ring_left(used, lim), win ? win - o - FS_RING_HDR : UINT64_MAX);
    if (!win || o == 0 || here >= want)
      return here;
  }
  uint64_t s = r->size - o; /* o > 0 here */
  uint64_t used = fs_ring_used(r, tail, s + want + need, r->size);
  uint64_t free = fs_ring_left(used, r->size), cfree = fs_ring_left(used, lim);
  if (free < s)
    return here;
  free -= s;
  size_t there = fs_ring_payload(cfree < free ? cfree : free, win - FS_RING_HDR);
  if (there <= here)
    return here;
  *skip = s;
  return there;
}

size_t fs_ring_space_for(struct fs_ring *r, size_t want)
{
  uint64_t skip;
  return fs_ring_place(r, want, &skip);
}

/* The head at which fs_ring_place finds room for `want` (a lower bound
 * where the window leaves a choice), at most tail: at tail (the ring
 * empty) whatever fits in it has room. */
static uint64_t fs_ring_room_head(const struct fs_ring *r, size_t want)
{
  const uint64_t ovh = FS_RING_RESERVE + FS_RING_HDR;
  uint64_t w = FS_ALIGN8(want ? want : 1), tail = __atomic_load_n(&r->ctl->tail, __ATOMIC_RELAXED);
  uint32_t cap = __atomic_load_n(&r->cap, __ATOMIC_RELAXED), win = fs_ring_win(r), o = fs_ring_off(r, tail);
  uint64_t lim = cap && cap < r->size ? cap : r->size, at = tail;
  /* Below the cap: lim - (tail - head) >= w + ovh, as fs_ring_place. */
  uint64_t capped = tail + w + ovh > lim ? tail + w + ovh - lim : 0;
  if (!win || o + FS_RING_HDR + w <= win) /* at tail */
    at = capped;
  /* Behind a SKIP at the next lap: the SKIP's span s as well. */
  if (win && o != 0 && w + FS_RING_HDR <= win) {
    uint64_t s = r->size - o, b = tail + s + w + ovh > r->size ? tail + s + w + ovh - r->size : 0;
    if (b < capped)
      b = capped;
    if (b < at)
      at = b;
  }
  return at < tail ? at : tail;
}

void fs_ring_want_space(struct fs_ring *r, size_t want)
{
  uint64_t at = fs_ring_room_head(r, want), head = fs_ring_load(&r->ctl->head);
  if (at <= head) { /* room now, by the numbers (a look raced a read): any */
    __atomic_store_n(&r->ctl->want_space, FS_RING_WANT_ANY, __ATOMIC_RELAXED);
    return;
  }
  __atomic_store_n(&r->ctl->space_at, (uint32_t)at, __ATOMIC_RELAXED);
  __atomic_store_n(&r->ctl->want_space, FS_RING_WANT_AT, __ATOMIC_RELEASE);
}

bool fs_ring_room_reached(struct fs_ring *r)
{
  uint32_t w = __atomic_load_n(&r->ctl->want_space, __ATOMIC_ACQUIRE);
  if (!w)
    return false;
  if (w == FS_RING_WANT_AT) {
    uint32_t head = (uint32_t)__atomic_load_n(&r->ctl->head, __ATOMIC_RELAXED);
    if ((int32_t)(head - __atomic_load_n(&r->ctl->space_at, __ATOMIC_RELAXED)) < 0)
      return false;
  }
  return __atomic_exchange_n(&r->ctl->want_space, 0, __ATOMIC_ACQ_REL) != 0;
}

/* The producer asks the fabric to lift its window's limit (once). */
static inline void fs_ring_ask(struct fs_ring *r)
{
  if (!__atomic_load_n(&r->win_ask, __ATOMIC_RELAXED))
    __atomic_store_n(&r->win_ask, 1, __ATOMIC_RELEASE);
}

bool fs_ring_win_short(const struct fs_ring *r, size_t want)
{
  uint32_t win = fs_ring_win(r);
  return win && __atomic_load_n(&r->win_lim, __ATOMIC_RELAXED) && want + FS_RING_HDR > win;
}

/* The bytes of the DATA record a producer may append now: len, cut to the
 * room there is and to what a record's length field holds; *at: where its
 * header goes (behind a SKIP written here, if one is due). */
static size_t fs_ring_data_room(struct fs_ring *r, size_t len, uint64_t *at)
{
  uint64_t skip;
  size_t room = fs_ring_place(r, len, &skip), asked = len;
  if (len > room) {
    len = room;
    /* Cut short with the window at the fabric's limit: the stream wants
     * more room than the window has, whatever went through so far. */
    if (__builtin_expect(__atomic_load_n(&r->win_lim, __ATOMIC_RELAXED) != 0, 0) && fs_ring_win(r))
      fs_ring_ask(r);
  }
  if (len > 0xffffffu - 8)
    len = 0xffffffu - 8;
  *at = __atomic_load_n(&r->ctl->tail, __ATOMIC_RELAXED);
  /* A look for `rest` that found data (no SKIP back to the start): the
   * next comes a quarter of `rest` on (the record after a reply's
   * headers finds them unread: a look `rest` on would often come past the
   * ring's end). */
  if (!skip && fs_ring_rest_look(r, asked, *at, fs_ring_off(r, *at)))
    __atomic_store_n(&r->rest_next, *at + __atomic_load_n(&r->rest, __ATOMIC_RELAXED) / FS_RING_REST_REC,
                     __ATOMIC_RELAXED);
  if (len && skip) { /* published with the record, by the same store of tail */
    uint32_t hdr[2] = { FS_REC_SKIP, 0 };
    fs_ring_write_at(r, *at, hdr, sizeof hdr);
    __atomic_store_n(&r->skip_at, *at, __ATOMIC_RELAXED); /* published by the tail's release */
    *at += skip;
  }
  return len;
}

/* The window doubles, within the fabric's limit: one asked to widen past it
 * waits (win_ask, moved bytes kept), then opens to the whole ring. */
static void fs_ring_widen(struct fs_ring *r, uint32_t win)
{
  uint32_t next = win * 2 < r->size ? win * 2 : 0;
  uint32_t lim = __atomic_load_n(&r->win_lim, __ATOMIC_ACQUIRE);
  if (lim && (next == 0 || next > lim)) {
    fs_ring_ask(r);
    return;
  }
  if (__atomic_load_n(&r->win_ask, __ATOMIC_RELAXED))
    next = 0; /* the limit lifted: the fabric made the whole ring ready */
  __atomic_store_n(&r->win, next, __ATOMIC_RELAXED);
  r->win_moved = 0;
}

/* The record's header, then the tail (release): its n bytes are written.
 * The window widens once FS_RING_WIN_GROW times its size went through it. */
static void fs_ring_publish_data(struct fs_ring *r, uint64_t tail, size_t n)
{
  uint32_t hdr[2] = { FS_REC_DATA, (uint32_t)n };
  fs_ring_write_at(r, tail, hdr, sizeof hdr);
  __atomic_store_n(&r->ctl->tail, tail + FS_RING_HDR + FS_ALIGN8(n), __ATOMIC_RELEASE);
  uint32_t win = fs_ring_win(r);
  if (win && ((r->win_moved += n) >= (uint64_t)FS_RING_WIN_GROW * win ||
              (__atomic_load_n(&r->win_ask, __ATOMIC_RELAXED) && !__atomic_load_n(&r->win_lim, __ATOMIC_RELAXED))))
    fs_ring_widen(r, win);
}

size_t fs_ring_put_data(struct fs_ring *r, const struct iovec *iov, int iovcnt, size_t skip, size_t len)
{
  uint64_t tail;
  len = fs_ring_data_room(r, len, &tail);
  if (len == 0)
    return 0;
  uint64_t pos = tail + FS_RING_HDR;
  size_t left = len;
  for (int i = 0; i < iovcnt && left > 0; i++) {
    size_t l = iov[i].iov_len;
    if (skip >= l) {
      skip -= l;
      continue;
    }
    size_t n = l - skip;
    if (n > left)
      n = left;
    fs_ring_write_at(r, pos, (const uint8_t *)iov[i].iov_base + skip, n);
    pos += n;
    left -= n;
    skip = 0;
  }
  len -= left; /* iov shorter than len: record what was really gathered */
  if (len == 0)
    return 0;
  fs_ring_publish_data(r, tail, len);
  return len;
}

/* Read up to n bytes of fd into the ring at dst: pread at off, or read at
 * its position (off -1).  Short only at the file's end; -errno if nothing
 * came.  While the kernel copies for this end, through a buffer of ours
 * (a pread straight into a page of the ring is a first touch of it too). */
static ssize_t fs_ring_read_file(struct fs_ring *r, int fd, off_t off, uint8_t *dst, size_t n)
{
  size_t got = 0, blen = 0;
  int saved = errno; /* the application's, unless this fails */
  uint8_t *bounce = NULL;
  if (__atomic_load_n(&r->kcopy, __ATOMIC_RELAXED) && n >= FS_RING_KC_MIN && fs_kcopy_usable()) {
    blen = n < FS_RING_KC_CHARGE ? n : FS_RING_KC_CHARGE;
    bounce = malloc(blen); /* NULL: straight into the ring */
  }
  while (got < n) {
    size_t want = n - got;
    uint8_t *to = dst + got;
    if (bounce) {
      want = want < blen ? want : blen;
      to = bounce;
    }
    ssize_t k = off < 0 ? FS_REAL(read)(fd, to, want) : pread(fd, to, want, off + (off_t)got);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0 && !got) {
      int err = errno;
      free(bounce);
      return -err;
    }
    if (k <= 0)
      break;
    if (bounce)
      fs_ring_copy(r, dst + got, bounce, (size_t)k, true);
    got += (size_t)k;
  }
  free(bounce);
  errno = saved;
  return (ssize_t)got;
}

ssize_t fs_ring_put_file(struct fs_ring *r, int fd, off_t off, size_t len, bool *end)
{
  uint64_t tail;
  len = fs_ring_data_room(r, len, &tail);
  if (len == 0)
    return 0;
  uint32_t at = fs_ring_off(r, tail + FS_RING_HDR);
  size_t first = r->size - at < len ? r->size - at : len;
  ssize_t n = fs_ring_read_file(r, fd, off, r->data + at, first);
  if (n == (ssize_t)first && first < len) { /* wrapped: the rest at the ring's start */
    ssize_t m = fs_ring_read_file(r, fd, off < 0 ? off : off + n, r->data, len - first);
    if (m > 0)
      n += m;
  }
  if (n <= 0) {
    *end = n == 0;
    return n;
  }
  *end = (size_t)n < len;
  fs_ring_publish_data(r, tail, (size_t)n);
  return n;
}

int fs_ring_put_ctl(struct fs_ring *r, uint32_t type, uint64_t val)
{
  size_t need = FS_RING_HDR + (type == FS_REC_EOF ? 0 : 8);
  if (fs_ring_free(r, need) < need)
    return -ENOSPC;
  uint64_t tail = __atomic_load_n(&r->ctl->tail, __ATOMIC_RELAXED);
  uint32_t hdr[2] = { type, type == FS_REC_EOF ? 0 : 8 };
  fs_ring_write_at(r, tail, hdr, sizeof hdr);
  if (type != FS_REC_EOF)
    fs_ring_write_at(r, tail + FS_RING_HDR, &val, 8);
  __atomic_store_n(&r->ctl->tail, tail + need, __ATOMIC_RELEASE);
  return 0;
}

/* Validate the record at head: 1 ok (*total: the positions it spans), 0
 * empty, -EPROTO corrupt. */
static int fs_ring_hdr(const struct fs_ring *r, uint64_t head, uint64_t tail, uint32_t hdr[2], uint64_t *total)
{
  uint64_t used = tail - head;
  if (used == 0)
    return 0;
  if (used > r->size || used < FS_RING_HDR || (head & 7))
    return -EPROTO;
  /* 8-aligned in a power-of-two area: the header never wraps (one load, where
   * the wrap-aware copy cost two calls to memcpy). */
  memcpy(hdr, r->data + fs_ring_off(r, head), FS_RING_HDR);
  uint32_t type = hdr[0] & 0xff, done = hdr[0] >> 8, len = hdr[1];
  *total = FS_RING_HDR + FS_ALIGN8((uint64_t)done + len);
  if (*total > used)
    return -EPROTO;
  switch (type) {
  case FS_REC_DATA:
    if (len == 0)
      return -EPROTO;
    break;
  case FS_REC_SWITCH:
  case FS_REC_REVERT:
    if (len != 8 || done)
      return -EPROTO;
    break;
  case FS_REC_EOF:
    if (len != 0 || done)
      return -EPROTO;
    break;
  case FS_REC_SKIP:
    *total = r->size - fs_ring_off(r, head);
    if (len != 0 || done || *total == r->size || *total > used)
      return -EPROTO;
    break;
  default:
    return -EPROTO;
  }
  return 1;
}

/* The record at *head, stepping over a SKIP (*head moves past it): as
 * fs_ring_hdr.  A SKIP with nothing behind it is corrupt: ours publish the
 * next record with it, and an empty ring must read as tail == head. */
static int fs_ring_rec(const struct fs_ring *r, uint64_t *head, uint64_t tail, uint32_t hdr[2], uint64_t *total)
{
  int rc = fs_ring_hdr(r, *head, tail, hdr, total);
  if (rc <= 0 || (hdr[0] & 0xff) != FS_REC_SKIP)
    return rc;
  *head += *total;
  rc = fs_ring_hdr(r, *head, tail, hdr, total); /* at offset 0: never a SKIP */
  return rc == 0 ? -EPROTO : rc;
}

int fs_ring_peek(const struct fs_ring *r, uint32_t *type, uint32_t *len, uint64_t *val)
{
  uint64_t head = __atomic_load_n(&r->ctl->head, __ATOMIC_RELAXED);
  uint64_t tail = fs_ring_load(&r->ctl->tail);
  uint32_t hdr[2];
  uint64_t total;
  int rc = fs_ring_rec(r, &head, tail, hdr, &total);
  if (rc <= 0)
    return rc;
  *type = hdr[0] & 0xff;
  *len = hdr[1];
  *val = 0;
  if (*type == FS_REC_SWITCH || *type == FS_REC_REVERT) /* 8-aligned: never wraps */
    memcpy(val, r->data + fs_ring_off(r, head + FS_RING_HDR), 8);
  return 1;
}

void fs_ring_pop(struct fs_ring *r)
{
  uint64_t head = __atomic_load_n(&r->ctl->head, __ATOMIC_RELAXED);
  uint32_t hdr[2];
  uint64_t total;
  if (fs_ring_rec(r, &head, fs_ring_load(&r->ctl->tail), hdr, &total) > 0)
    __atomic_store_n(&r->ctl->head, head + total, __ATOMIC_RELEASE);
}

ssize_t fs_ring_get_data(struct fs_ring *r, const struct iovec *iov, int iovcnt, size_t skip, size_t max, bool peek)
{
  uint64_t head = __atomic_load_n(&r->ctl->head, __ATOMIC_RELAXED);
  uint64_t tail = fs_ring_load(&r->ctl->tail);
  size_t copied = 0;
  int vi = 0;
  size_t voff = skip;
  while (vi < iovcnt && voff >= iov[vi].iov_len) {
    voff -= iov[vi].iov_len;
    vi++;
  }
  while (copied < max && vi < iovcnt) {
    uint32_t hdr[2];
    uint64_t total, at = head;
    int rc = fs_ring_rec(r, &head, tail, hdr, &total);
    if (rc < 0)
      return copied ? (ssize_t)copied : rc;
    if (rc == 0 || (hdr[0] & 0xff) != FS_REC_DATA) {
      head = at; /* a SKIP before a control record is the next reader's to step over */
      break;
    }
    uint32_t done = hdr[0] >> 8, len = hdr[1];
    uint32_t took = 0;
    while (took < len && copied < max && vi < iovcnt) {
      size_t n = iov[vi].iov_len - voff;
      if (n > len - took)
        n = len - took;
      if (n > max - copied)
        n = max - copied;
      fs_ring_read_at(r, head + FS_RING_HDR + done + took, (uint8_t *)iov[vi].iov_base + voff, n);
      took += (uint32_t)n;
      copied += n;
      voff += n;
      if (voff == iov[vi].iov_len) {
        vi++;
        voff = 0;
      }
    }
    if (peek) {
      if (took < len)
        break;
      head += total;
      continue;
    }
    if (took == len) {
      head += total;
      __atomic_store_n(&r->ctl->head, head, __ATOMIC_RELEASE);
    } else {
      uint32_t nh[2] = { FS_REC_DATA | ((done + took) << 8), len - took };
      fs_ring_write_at(r, head, nh, sizeof nh);
      if (head != at) /* stepped over a SKIP: it is consumed */
        __atomic_store_n(&r->ctl->head, head, __ATOMIC_RELEASE);
      break;
    }
  }
  return (ssize_t)copied;
}

static size_t fs_ring_readable_from(const struct fs_ring *r, bool past_head)
{
  uint64_t head = __atomic_load_n(&r->ctl->head, __ATOMIC_RELAXED);
  uint64_t tail = fs_ring_load(&r->ctl->tail);
  size_t n = 0;
  for (;;) {
    uint32_t hdr[2];
    uint64_t total;
    if (fs_ring_rec(r, &head, tail, hdr, &total) <= 0 || ((hdr[0] & 0xff) != FS_REC_DATA && !past_head))
      return n;
    if (past_head)
      past_head = false;
    else
      n += hdr[1];
    head += total;
  }
}

size_t fs_ring_readable(const struct fs_ring *r)
{
  return fs_ring_readable_from(r, false);
}

size_t fs_ring_readable_past_head(const struct fs_ring *r)
{
  return fs_ring_readable_from(r, true);
}

bool fs_ring_data_ahead(const struct fs_ring *r, size_t need)
{
  if (need <= 1)
    return !fs_ring_empty(r);
  uint64_t head = __atomic_load_n(&r->ctl->head, __ATOMIC_RELAXED);
  uint64_t tail = fs_ring_load(&r->ctl->tail);
  size_t n = 0;
  while (n < need) {
    uint32_t hdr[2];
    uint64_t total;
    int h = fs_ring_rec(r, &head, tail, hdr, &total);
    if (h < 0)
      return true; /* corrupt: let the reader find out */
    if (h == 0)
      return false;
    if ((hdr[0] & 0xff) != FS_REC_DATA)
      return true;
    n += hdr[1];
    head += total;
  }
  return true;
}

/* The type of the first record from the head that is not in skip (a
 * mask of 1 << type), within FS_RING_EOF_SCAN records; -1 if none. */
static int fs_ring_first(const struct fs_ring *r, unsigned skip)
{
  uint64_t head = __atomic_load_n(&r->ctl->head, __ATOMIC_RELAXED);
  uint64_t tail = fs_ring_load(&r->ctl->tail);
  for (int i = 0; i < FS_RING_EOF_SCAN; i++) {
    uint32_t hdr[2];
    uint64_t total;
    if (fs_ring_rec(r, &head, tail, hdr, &total) <= 0)
      return -1;
    uint32_t type = hdr[0] & 0xff;
    if (!(skip & (1u << type)))
      return (int)type;
    head += total;
  }
  return -1;
}

bool fs_ring_eof_queued(const struct fs_ring *r)
{
  /* past data only: after a SWITCH or REVERT the stream goes on elsewhere */
  return fs_ring_first(r, 1u << FS_REC_DATA) == FS_REC_EOF;
}

bool fs_ring_data_queued(const struct fs_ring *r)
{
  return fs_ring_first(r, 1u << FS_REC_SWITCH | 1u << FS_REC_REVERT) == FS_REC_DATA;
}

ssize_t fs_ring_trim(struct fs_ring *r, bool *empty)
{
  static uint64_t pg;
  if (!pg)
    pg = (uint64_t)sysconf(_SC_PAGESIZE);
  *empty = true;
  if ((uintptr_t)r->data % pg || r->size % pg)
    return 0;
  uint64_t tail = __atomic_load_n(&r->ctl->tail, __ATOMIC_RELAXED); /* ours */
  uint64_t head = fs_ring_load(&r->ctl->head);                       /* only grows: a bound */
  *empty = head == tail;
  /* A slow reader: what it had not read at the last trim is given back
   * once it has, at a later one; while head stays, nothing is new. */
  if (!*empty && r->trim_held && head == r->trim_head)
    return 0;
  r->trim_held = !*empty;
  r->trim_head = head;
  /* Empty, the page holding tail goes too: the next write takes a fault
   * there (a zeroed page, once per idle spell), where keeping it cost an
   * idle connection a page in each direction for good. */
  uint64_t pos = head == tail ? tail / pg * pg : (tail + pg - 1) / pg * pg;
  uint64_t end = (head + r->size) / pg * pg;
  ssize_t done = 0;
  while (pos < end) { /* at most twice: the span is shorter than the ring */
    uint64_t off = pos & (r->size - 1), n = end - pos;
    if (n > r->size - off)
      n = r->size - off;
    if (madvise(r->data + off, (size_t)n, MADV_REMOVE) < 0)
      return done ? done : -errno;
    done += (ssize_t)n;
    pos += n;
  }
  if (done)
    fs_ring_kcopy_renew(r);
  return done;
}
