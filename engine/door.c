/* Doors: an epoll set's doorbell, owner side.  See engine/door.h. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/epoll.h>

#include "base/fdreg.h"
#include "base/hot.h"
#include "base/lock.h"
#include "base/proc.h"
#include "base/real.h"
#include "engine/door.h"

static pthread_mutex_t fs_door_all_lock FS_HOT = PTHREAD_MUTEX_INITIALIZER;
static struct fs_door *fs_door_all FS_HOT; /* atomic reads (fs_door_live) */

bool fs_door_live(void)
{
  return __atomic_load_n(&fs_door_all, __ATOMIC_RELAXED) != NULL;
}

int fs_door_new_on(int efd, struct fs_door **out)
{
  struct fs_door *d = calloc(1, sizeof *d);
  if (!d)
    return -ENOMEM;
  d->efd = efd;
  int rc = efd >= 0 ? fs_bell_make_page(&d->memfd, &d->page) : fs_bell_make(&d->efd, &d->memfd, &d->page);
  if (rc < 0) {
    free(d);
    return rc;
  }
  d->refs = 1;
  d->pid = fs_proc_self();
  fs_lock_init_mutex(&d->lock);
  pthread_mutex_lock(&fs_door_all_lock);
  d->gnext = fs_door_all;
  __atomic_store_n(&fs_door_all, d, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&fs_door_all_lock);
  *out = d;
  return 0;
}

void fs_door_get(struct fs_door *d)
{
  __atomic_fetch_add(&d->refs, 1, __ATOMIC_RELAXED);
}

void fs_door_put(struct fs_door *d)
{
  if (!d || __atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) != 0)
    return;
  pthread_mutex_lock(&fs_door_all_lock);
  for (struct fs_door **pp = &fs_door_all; *pp; pp = &(*pp)->gnext)
    if (*pp == d) {
      __atomic_store_n(pp, d->gnext, __ATOMIC_RELEASE);
      break;
    }
  pthread_mutex_unlock(&fs_door_all_lock);
  /* A thread of ours still in a drain holds a reference; a peer that still
   * rings writes a page and an eventfd that live on in its process. */
  fs_bell_unmap(d->page);
  fs_fdreg_close(d->efd);
  fs_fdreg_close(d->memfd);
  for (uint32_t i = 0; i < FS_DOOR_CHUNKS; i++)
    free(d->chunk[i]);
  free(d->free);
  pthread_mutex_destroy(&d->lock);
  free(d);
}

int fs_door_slot_get(struct fs_door *d, struct fs_conn *c, uint32_t *slot)
{
  int rc = 0;
  uint32_t s = 0;
  pthread_mutex_lock(&d->lock);
  if (d->nfree) {
    s = d->free[--d->nfree];
  } else if (d->next < FS_BELL_SLOTS) {
    s = d->next;
    if (!d->chunk[s / FS_DOOR_CHUNK]) {
      struct fs_conn **ch = calloc(FS_DOOR_CHUNK, sizeof *ch);
      if (ch)
        __atomic_store_n(&d->chunk[s / FS_DOOR_CHUNK], ch, __ATOMIC_RELEASE);
      else
        rc = -ENOMEM;
    }
    if (rc == 0)
      d->next++;
  } else {
    rc = -ENOSPC;
  }
  if (rc == 0)
    __atomic_store_n(&d->chunk[s / FS_DOOR_CHUNK][s % FS_DOOR_CHUNK], c, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&d->lock);
  *slot = s;
  return rc;
}

void fs_door_slot_put(struct fs_door *d, uint32_t s)
{
  pthread_mutex_lock(&d->lock);
  __atomic_store_n(&d->chunk[s / FS_DOOR_CHUNK][s % FS_DOOR_CHUNK], NULL, __ATOMIC_RELEASE);
  if (d->nfree == d->free_cap) {
    uint32_t cap = d->free_cap ? 2 * d->free_cap : 64;
    uint32_t *f = realloc(d->free, cap * sizeof *f);
    if (f) {
      d->free = f;
      d->free_cap = cap;
    }
  }
  if (d->nfree < d->free_cap) /* else the slot is lost: never reused */
    d->free[d->nfree++] = s;
  pthread_mutex_unlock(&d->lock);
}

struct fs_door_drain_arg {
  struct fs_door *d;
  void (*fn)(void *arg, struct fs_conn *c);
  void *arg;
};

static void fs_door_slot_rang(void *arg, uint32_t s)
{
  struct fs_door_drain_arg *a = arg;
  struct fs_conn **ch = __atomic_load_n(&a->d->chunk[s / FS_DOOR_CHUNK], __ATOMIC_ACQUIRE);
  struct fs_conn *c = ch ? __atomic_load_n(&ch[s % FS_DOOR_CHUNK], __ATOMIC_ACQUIRE) : NULL;
  /* Connections are type-stable: a reference taken on one that died
   * meanwhile (and maybe lives again as another) is checked below. */
  if (!c || !fs_conn_tryget(c))
    return;
  if (__atomic_load_n(&c->door, __ATOMIC_ACQUIRE) == a->d && c->door_slot == s)
    a->fn(a->arg, c);
  fs_conn_put(c);
}

unsigned fs_door_drain(struct fs_door *d, bool edge, void (*fn)(void *arg, struct fs_conn *c), void *arg)
{
  struct fs_door_drain_arg a = { d, fn, arg };
  return fs_bell_drain(d->page, edge ? -1 : d->efd, fs_door_slot_rang, &a);
}

static void (*fs_door_deliver_fn)(void *arg, struct fs_conn *c);

void fs_door_on_deliver(void (*fn)(void *arg, struct fs_conn *c))
{
  __atomic_store_n(&fs_door_deliver_fn, fn, __ATOMIC_RELEASE);
}

void fs_door_woken(struct fs_door *d)
{
  void (*fn)(void *, struct fs_conn *) = __atomic_load_n(&fs_door_deliver_fn, __ATOMIC_ACQUIRE);
  if (fn && fs_door_mine(d))
    (void)fs_door_drain(d, false, fn, NULL);
}

struct fs_door *fs_door_by_efd(int efd)
{
  pthread_mutex_lock(&fs_door_all_lock);
  struct fs_door *d = fs_door_all;
  while (d && d->efd != efd)
    d = d->gnext;
  if (d)
    fs_door_get(d);
  pthread_mutex_unlock(&fs_door_all_lock);
  return d;
}

/* ---- watching another process's doors (door.h, fs_door_watch) ---------- */

#define FS_DOOR_WATCH_MAX 8 /* doors a thread watches; more sleep in slices */

struct fs_door_watch {
  int epfd;
  pid_t pid; /* whose (a fork copies the forking thread's) */
  uint32_t n;
  struct fs_door *doors[FS_DOOR_WATCH_MAX]; /* referenced */
};

static __thread struct fs_door_watch *fs_door_watch_tls __attribute__((tls_model("initial-exec")));
static pthread_key_t fs_door_watch_key FS_HOT;
static pthread_once_t fs_door_watch_once FS_HOT = PTHREAD_ONCE_INIT;
static bool fs_door_watch_keyed FS_HOT;

static void fs_door_watch_free(void *arg)
{
  struct fs_door_watch *w = arg;
  if (!w)
    return;
  if (fs_door_watch_tls == w)
    fs_door_watch_tls = NULL;
  int saved = errno;
  fs_fdreg_close(w->epfd);
  for (uint32_t i = 0; i < w->n; i++)
    fs_door_put(w->doors[i]);
  free(w);
  errno = saved;
}

static void fs_door_watch_key_make(void)
{
  fs_door_watch_keyed = pthread_key_create(&fs_door_watch_key, fs_door_watch_free) == 0;
}

/* This thread's watch, made on first need; NULL if none can be had. */
static struct fs_door_watch *fs_door_watch_mine(void)
{
  struct fs_door_watch *w = fs_door_watch_tls;
  if (w && w->pid == fs_proc_self())
    return w;
  pthread_once(&fs_door_watch_once, fs_door_watch_key_make);
  if (w) { /* the parent's, copied by fork: its set is the parent's too */
    if (fs_door_watch_keyed)
      (void)pthread_setspecific(fs_door_watch_key, NULL);
    fs_door_watch_free(w);
  }
  if (!fs_door_watch_keyed || !fs_fdreg_budget_ok(0, 1) || !(w = calloc(1, sizeof *w)))
    return NULL;
  int saved = errno;
  w->epfd = FS_FDREG_MAKE(FS_REAL(epoll_create1)(EPOLL_CLOEXEC));
  errno = saved;
  if (w->epfd < 0) {
    free(w);
    return NULL;
  }
  w->pid = fs_proc_self();
  fs_door_watch_tls = w;
  (void)pthread_setspecific(fs_door_watch_key, w);
  return w;
}

int fs_door_watch(struct fs_door *d)
{
  struct fs_door_watch *w = fs_door_watch_mine();
  if (!w)
    return -1;
  for (uint32_t i = 0; i < w->n; i++)
    if (w->doors[i] == d)
      return w->epfd;
  if (w->n == FS_DOOR_WATCH_MAX)
    return -1;
  struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.ptr = d };
  int saved = errno;
  int rc = FS_REAL(epoll_ctl)(w->epfd, EPOLL_CTL_ADD, d->efd, &ev);
  errno = saved;
  if (rc < 0)
    return -1;
  fs_door_get(d);
  w->doors[w->n++] = d;
  return w->epfd;
}

bool fs_door_watch_is(int fd)
{
  struct fs_door_watch *w = fs_door_watch_tls;
  return w && fd >= 0 && w->epfd == fd && w->pid == fs_proc_self();
}

void fs_door_fd_woken(struct fs_door *d, int fd)
{
  if (!fs_door_watch_is(fd)) {
    fs_door_woken(d);
    return;
  }
  struct epoll_event ev[FS_DOOR_WATCH_MAX];
  int saved = errno;
  int n = FS_REAL(epoll_wait)(fd, ev, FS_DOOR_WATCH_MAX, 0);
  errno = saved;
  /* The ringer writes the eventfd only while `rung` is clear, and the
   * door's own process may not be draining it: clear it, then the caller
   * looks at its connection (a ring after this edges again). */
  for (int i = 0; i < n; i++)
    __atomic_store_n(&((struct fs_door *)ev[i].data.ptr)->page->rung, 0, __ATOMIC_SEQ_CST);
}

/* ---- the process's door (door.h) ----------------------------------------- */

static struct fs_door *fs_door_proc FS_HOT; /* atomic; its own reference */

struct fs_door *fs_door_proc_get(void)
{
  struct fs_door *d = __atomic_load_n(&fs_door_proc, __ATOMIC_ACQUIRE);
  while (!d || !fs_door_mine(d)) {
    struct fs_door *n;
    if (fs_door_new(&n) < 0)
      return NULL;
    if (__atomic_compare_exchange_n(&fs_door_proc, &d, n, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      /* The parent's, in a fork child: its connections keep their
       * references. */
      fs_door_put(d);
      d = n;
    } else {
      fs_door_put(n); /* another thread's won; d is it */
    }
  }
  fs_door_get(d);
  return d;
}

/* A door for a thread's home (referenced, `homed`).  The process's first
 * thread (main: its tid is the pid) shares the process's door, so that a
 * single-threaded process holds one door, whichever came first: the
 * process's if no home holds it, else a new one, which becomes the
 * process's too if the process has none yet.  Any other thread's door is
 * its own: connections that upgraded before a thread marked them ring the
 * process's door, and a thread whose door it were would wake at each of
 * their replies, though they are for other threads.  0 or -errno. */
static int fs_door_home_new(bool main, struct fs_door **out)
{
  /* Ours for as long as it is ours (never closed, never replaced but in
   * a fork child, where it is not ours). */
  struct fs_door *p = __atomic_load_n(&fs_door_proc, __ATOMIC_ACQUIRE);
  bool none = false; /* no home holds it */
  if (main && p && fs_door_mine(p) &&
      __atomic_compare_exchange_n(&p->homed, &none, true, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    fs_door_get(p);
    *out = p;
    return 0;
  }
  int rc = fs_door_new(out);
  if (rc < 0)
    return rc;
  (*out)->homed = true; /* not shared yet */
  if (main && (!p || !fs_door_mine(p))) {
    fs_door_get(*out); /* the process's reference */
    if (__atomic_compare_exchange_n(&fs_door_proc, &p, *out, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      fs_door_put(p); /* the parent's, in a fork child */
    else
      fs_door_put(*out); /* another thread made the process's meanwhile */
  }
  return 0;
}

/* ---- thread doors (door.h) ---------------------------------------------- */

/* No lock of its own: a fork child may inherit one held by a thread it
 * does not have.  Its door is replaced by compare-and-swap, as the
 * process's (a fork child's is its parent's: not mine). */
struct fs_door_home {
  uint32_t refs;        /* atomic: the thread's, and each connection's marked */
  pid_t pid;            /* the process the flag below was learnt in */
  bool main;            /* its thread is the process's first (tid == pid) */
  struct fs_door *door; /* atomic; made at its first connection's rendezvous */
};

static __thread struct fs_door_home *fs_door_home_tls __attribute__((tls_model("initial-exec")));
static pthread_key_t fs_door_home_key FS_HOT;
static pthread_once_t fs_door_home_once FS_HOT = PTHREAD_ONCE_INIT;
static bool fs_door_home_keyed FS_HOT;
static uint32_t fs_door_homes FS_HOT; /* homes holding a door (atomic): at most FS_DOOR_HOMES */

static void fs_door_home_put(struct fs_door_home *h)
{
  if (!h || __atomic_sub_fetch(&h->refs, 1, __ATOMIC_ACQ_REL) != 0)
    return;
  if (h->door) {
    __atomic_sub_fetch(&fs_door_homes, 1, __ATOMIC_RELAXED);
    /* Were it the process's, the next home that needs a door takes it. */
    __atomic_store_n(&h->door->homed, false, __ATOMIC_RELEASE);
    int saved = errno;
    fs_door_put(h->door); /* its connections hold their own references */
    errno = saved;
  }
  free(h);
}

static void fs_door_home_exit(void *arg)
{
  if (fs_door_home_tls == arg)
    fs_door_home_tls = NULL;
  fs_door_home_put(arg);
}

static void fs_door_home_key_make(void)
{
  fs_door_home_keyed = pthread_key_create(&fs_door_home_key, fs_door_home_exit) == 0;
}

/* fs_door_home_mark; locked: the caller holds c->lock. */
static void fs_door_home_mark_as(struct fs_conn *c, bool locked)
{
  struct fs_door_home *h = fs_door_home_tls;
  if (h && __atomic_load_n(&c->door_home, __ATOMIC_RELAXED) == h)
    return; /* the common case: one load each */
  if (!h) {
    pthread_once(&fs_door_home_once, fs_door_home_key_make);
    if (!fs_door_home_keyed || !(h = calloc(1, sizeof *h)))
      return; /* the process's door serves it */
    h->refs = 1;
    fs_door_home_tls = h;
    (void)pthread_setspecific(fs_door_home_key, h);
  }
  /* Learnt anew in a fork child, whose first thread is the one that forked.
   * Light at a home's first mark: a one-shot client's first blocking
   * receive marks, and never needs the pid page (fs_door_home_main makes
   * it).  From its second on, the page: light asked getpid(), a system
   * call per connection in a server that marks each one (nginx's
   * recv, a thread per connection's first read). */
  pid_t self = (pid_t)(h->pid ? fs_proc_self() : fs_proc_self_light());
  if (h->pid != self) {
    h->main = gettid() == self;
    __atomic_store_n(&h->pid, self, __ATOMIC_RELEASE);
  }
  __atomic_add_fetch(&h->refs, 1, __ATOMIC_RELAXED);
  if (!locked)
    fs_lock(&c->lock);
  struct fs_door_home *old = c->door_home;
  __atomic_store_n(&c->door_home, h, __ATOMIC_RELAXED);
  if (!locked)
    fs_unlock(&c->lock);
  fs_door_home_put(old);
}

void fs_door_home_mark(struct fs_conn *c)
{
  fs_door_home_mark_as(c, false);
}

/* Whether h's thread is its process's first (a home copied by fork is
 * not known to be until its thread marks a connection in the child). */
static bool fs_door_home_main(struct fs_door_home *h)
{
  return __atomic_load_n(&h->pid, __ATOMIC_ACQUIRE) == (pid_t)fs_proc_self() && h->main;
}

void fs_door_home_claim(struct fs_conn *c, bool locked)
{
  if (!__atomic_load_n(&c->door_home, __ATOMIC_RELAXED))
    fs_door_home_mark_as(c, locked);
}

struct fs_door *fs_door_home_door(struct fs_conn *c, int fd)
{
  fs_lock(&c->lock);
  struct fs_door_home *h = c->door_home;
  if (h)
    __atomic_add_fetch(&h->refs, 1, __ATOMIC_RELAXED);
  fs_unlock(&c->lock);
  if (!h)
    return NULL;
  struct fs_door *d = __atomic_load_n(&h->door, __ATOMIC_ACQUIRE);
  while (!d || !fs_door_mine(d)) {
    struct fs_door *n = NULL;
    /* A fork child's home replaces its parent's door without counting it
     * again: the parent's counted it. */
    bool counted = d != NULL;
    if (!counted && __atomic_add_fetch(&fs_door_homes, 1, __ATOMIC_RELAXED) > FS_DOOR_HOMES) {
      __atomic_sub_fetch(&fs_door_homes, 1, __ATOMIC_RELAXED);
      break;
    }
    if (!fs_fdreg_budget_ok(fd, 2) || fs_door_home_new(fs_door_home_main(h), &n) < 0) {
      if (!counted)
        __atomic_sub_fetch(&fs_door_homes, 1, __ATOMIC_RELAXED);
      break;
    }
    if (__atomic_compare_exchange_n(&h->door, &d, n, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      fs_door_put(d);
      d = n;
    } else {
      if (!counted)
        __atomic_sub_fetch(&fs_door_homes, 1, __ATOMIC_RELAXED);
      __atomic_store_n(&n->homed, false, __ATOMIC_RELEASE);
      fs_door_put(n); /* another thread's won; d is it */
    }
  }
  if (d && fs_door_mine(d))
    fs_door_get(d);
  else
    d = NULL;
  fs_door_home_put(h);
  return d;
}

void fs_door_home_forget(struct fs_conn *c)
{
  struct fs_door_home *h = c->door_home;
  c->door_home = NULL;
  fs_door_home_put(h);
}

unsigned fs_door_home_count(void)
{
  return __atomic_load_n(&fs_door_homes, __ATOMIC_RELAXED);
}
