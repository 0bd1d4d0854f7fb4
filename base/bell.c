/* Doorbells.  See base/bell.h. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/hot.h"
#include "base/bell.h"
#include "base/fdreg.h"
#include "base/real.h"

#define FS_BELL_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

int fs_bell_make_page(int *memfd_out, struct fs_bell_page **page_out)
{
  int fd = FS_FDREG_MAKE(memfd_create("fabsock-bell", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (fd < 0)
    return -errno;
  void *map = MAP_FAILED;
  if (ftruncate(fd, FS_BELL_BYTES) < 0 || FS_REAL(fcntl)(fd, F_ADD_SEALS, FS_BELL_SEALS) < 0 ||
      (map = mmap(NULL, FS_BELL_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
    int rc = -errno;
    fs_fdreg_close(fd);
    return rc;
  }
  struct fs_bell_page *p = map;
  p->magic = FS_BELL_MAGIC;
  p->version = FS_BELL_VERSION;
  p->nslots = FS_BELL_SLOTS;
  *memfd_out = fd;
  *page_out = p;
  return 0;
}

int fs_bell_make(int *efd_out, int *memfd_out, struct fs_bell_page **page_out)
{
  int efd = FS_FDREG_MAKE(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (efd < 0)
    return -errno;
  int rc = fs_bell_make_page(memfd_out, page_out);
  if (rc < 0) {
    fs_fdreg_close(efd);
    return rc;
  }
  *efd_out = efd;
  return 0;
}

void fs_bell_unmap(struct fs_bell_page *page)
{
  if (page)
    munmap(page, FS_BELL_BYTES);
}

unsigned fs_bell_drain(struct fs_bell_page *page, int efd, void (*fn)(void *arg, uint32_t slot), void *arg)
{
  if (efd >= 0) {
    int saved = errno;
    uint64_t v;
    (void)FS_REAL(read)(efd, &v, sizeof v);
    errno = saved;
  }
  __atomic_exchange_n(&page->rung, 0, __ATOMIC_SEQ_CST);
  unsigned n = 0;
  for (uint32_t s = 0; s < FS_BELL_SUMS; s++) {
    if (!__atomic_load_n(&page->summary[s], __ATOMIC_RELAXED))
      continue;
    uint64_t sum = __atomic_exchange_n(&page->summary[s], 0, __ATOMIC_SEQ_CST);
    while (sum) {
      uint32_t w = s * 64 + (uint32_t)__builtin_ctzll(sum);
      sum &= sum - 1;
      uint64_t bits = __atomic_exchange_n(&page->bits[w], 0, __ATOMIC_SEQ_CST);
      while (bits) {
        fn(arg, w * 64 + (uint32_t)__builtin_ctzll(bits));
        bits &= bits - 1;
        n++;
      }
    }
  }
  return n;
}

/* Add 1 to the eventfd; errno is left alone. */
static void fs_bell_efd_write(int efd)
{
  uint64_t one = 1;
  int saved = errno;
  (void)FS_REAL(write)(efd, &one, sizeof one);
  errno = saved;
}

struct fs_bell_held {
  uint8_t on, n;
  int efd[FS_BELL_HELD];
};
static __thread struct fs_bell_held fs_bell_held_tls __attribute__((tls_model("initial-exec")));

void fs_bell_hold(void)
{
  fs_bell_held_tls.on = 1;
}

void fs_bell_release(void)
{
  struct fs_bell_held *h = &fs_bell_held_tls;
  unsigned n = h->n;
  h->on = 0;
  h->n = 0;
  for (unsigned i = 0; i < n; i++)
    fs_bell_efd_write(h->efd[i]);
}

void fs_bell_ring(struct fs_bell_page *page, int efd, uint32_t slot)
{
  if (slot >= FS_BELL_SLOTS)
    return;
  uint32_t w = slot / 64;
  uint64_t bit = 1ull << (slot % 64), sbit = 1ull << (w % 64);
  /* Already set and not yet taken: the drain that takes it is owed (a
   * ringer found `rung` clear after the bit, or will). */
  if (!(__atomic_load_n(&page->bits[w], __ATOMIC_SEQ_CST) & bit))
    __atomic_fetch_or(&page->bits[w], bit, __ATOMIC_SEQ_CST);
  if (!(__atomic_load_n(&page->summary[w / 64], __ATOMIC_SEQ_CST) & sbit))
    __atomic_fetch_or(&page->summary[w / 64], sbit, __ATOMIC_SEQ_CST);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (__atomic_load_n(&page->rung, __ATOMIC_SEQ_CST) || __atomic_exchange_n(&page->rung, 1, __ATOMIC_SEQ_CST))
    return;
  struct fs_bell_held *h = &fs_bell_held_tls;
  if (h->on && h->n < FS_BELL_HELD) {
    h->efd[h->n++] = efd;
    return;
  }
  fs_bell_efd_write(efd);
}

int fs_bell_check_efd(int fd)
{
  char path[48], link[32];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  static const char want[] = "anon_inode:[eventfd]";
  ssize_t n = readlink(path, link, sizeof link);
  if (n < 0 && errno == ENOENT) {
    /* No /proc: an anonymous inode at least (no file type); a write to one
     * of another kind (timerfd, epoll) fails harmlessly. */
    struct stat st;
    if (fstat(fd, &st) < 0 || (st.st_mode & S_IFMT) != 0)
      return -EPROTO;
  } else if (n != (ssize_t)sizeof want - 1 || memcmp(link, want, sizeof want - 1) != 0) {
    return -EPROTO;
  }
  int fl = FS_REAL(fcntl)(fd, F_GETFL, 0);
  if (fl < 0 || (!(fl & O_NONBLOCK) && FS_REAL(fcntl)(fd, F_SETFL, fl | O_NONBLOCK) < 0))
    return -EPROTO;
  return 0;
}

static pthread_mutex_t fs_bell_lock FS_HOT = PTHREAD_MUTEX_INITIALIZER;
static struct fs_bell_peer *fs_bell_peers FS_HOT;

static int fs_bell_peer_check(int efd, int memfd, struct stat *st)
{
  if (fs_bell_check_efd(efd) < 0 || fstat(memfd, st) < 0 || !S_ISREG(st->st_mode) ||
      st->st_size != FS_BELL_BYTES)
    return -EPROTO;
  int seals = FS_REAL(fcntl)(memfd, F_GET_SEALS, 0);
  /* Unsealed, its owner could shrink it under our stores (SIGBUS). */
  return seals >= 0 && (seals & FS_BELL_SEALS) == FS_BELL_SEALS ? 0 : -EPROTO;
}

/* The ringer held for the bell whose memfd is st (referenced), or NULL;
 * *kept: how many the process holds. */
static struct fs_bell_peer *fs_bell_peer_find(const struct stat *st, unsigned *kept)
{
  struct fs_bell_peer *p;
  *kept = 0;
  pthread_mutex_lock(&fs_bell_lock);
  for (p = fs_bell_peers; p; p = p->next, ++*kept)
    if (p->dev == (uint64_t)st->st_dev && p->ino == (uint64_t)st->st_ino) {
      p->refs++;
      break;
    }
  pthread_mutex_unlock(&fs_bell_lock);
  return p;
}

int fs_bell_peer_get(int efd, int memfd, int budget_fd, struct fs_bell_peer **out)
{
  struct stat st;
  int rc = fs_bell_peer_check(efd, memfd, &st);
  struct fs_bell_peer *p = NULL;
  unsigned kept = 0;
  if (rc == 0)
    p = fs_bell_peer_find(&st, &kept);
  /* A server with a client process per connection keeps one eventfd per
   * client: without the budget, 100 clients under ulimit -n 128 left its
   * accept() to fail with EMFILE where plain TCP took them all. */
  if (rc == 0 && !p && budget_fd >= 0 && !fs_fdreg_share_ok(budget_fd, kept))
    rc = -EMFILE;
  if (rc == 0 && !p) {
    void *map = mmap(NULL, FS_BELL_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    p = map == MAP_FAILED ? NULL : calloc(1, sizeof *p);
    if (!p) {
      rc = map == MAP_FAILED ? -errno : -ENOMEM;
      if (map != MAP_FAILED)
        munmap(map, FS_BELL_BYTES);
    } else {
      struct fs_bell_page *pg = map;
      if (__atomic_load_n(&pg->magic, __ATOMIC_RELAXED) != FS_BELL_MAGIC ||
          __atomic_load_n(&pg->version, __ATOMIC_RELAXED) != FS_BELL_VERSION) {
        munmap(map, FS_BELL_BYTES);
        free(p);
        p = NULL;
        rc = -EPROTO;
      } else {
        p->page = pg;
        p->efd = efd;
        p->refs = 1;
        p->dev = (uint64_t)st.st_dev;
        p->ino = (uint64_t)st.st_ino;
        fs_fdreg_set(efd, true);
        efd = -1; /* kept */
        pthread_mutex_lock(&fs_bell_lock);
        /* Another thread may have made the same one meanwhile: two
         * entries for one bell only cost a descriptor. */
        p->next = fs_bell_peers;
        fs_bell_peers = p;
        pthread_mutex_unlock(&fs_bell_lock);
      }
    }
  }
  if (efd >= 0)
    fs_fdreg_close(efd);
  fs_fdreg_close(memfd);
  *out = rc == 0 ? p : NULL;
  return rc;
}

int fs_bell_peer_own(int efd, int memfd, struct fs_bell_peer **out)
{
  struct stat st;
  unsigned kept;
  if (fstat(memfd, &st) < 0)
    return -errno;
  struct fs_bell_peer *p = fs_bell_peer_find(&st, &kept);
  if (p) {
    *out = p;
    return 0;
  }
  /* New here: dups for fs_bell_peer_get to take (it keeps the eventfd's).
   * Not within the peers' share (fs_fdreg_share_ok): one per door of our
   * own, whose number is bounded where they are made (a thread per
   * connection holds 64 thread doors; counted as peers', the 65th ringer
   * failed, and 120 of a server's 200 rdma connections stayed on TCP). */
  int e = FS_FDREG_MAKE(FS_REAL(fcntl)(efd, F_DUPFD_CLOEXEC, 0));
  int m = e < 0 ? -1 : FS_FDREG_MAKE(FS_REAL(fcntl)(memfd, F_DUPFD_CLOEXEC, 0));
  if (m < 0) {
    int rc = -errno;
    if (e >= 0)
      fs_fdreg_close(e);
    return rc;
  }
  return fs_bell_peer_get(e, m, -1, out);
}

void fs_bell_peer_put(struct fs_bell_peer *p)
{
  if (!p)
    return;
  pthread_mutex_lock(&fs_bell_lock);
  bool last = --p->refs == 0;
  if (last)
    for (struct fs_bell_peer **pp = &fs_bell_peers; *pp; pp = &(*pp)->next)
      if (*pp == p) {
        *pp = p->next;
        break;
      }
  pthread_mutex_unlock(&fs_bell_lock);
  if (!last)
    return;
  munmap(p->page, FS_BELL_BYTES);
  fs_fdreg_close(p->efd);
  free(p);
}

unsigned fs_bell_peer_count(void)
{
  unsigned n = 0;
  pthread_mutex_lock(&fs_bell_lock);
  for (struct fs_bell_peer *p = fs_bell_peers; p; p = p->next)
    n++;
  pthread_mutex_unlock(&fs_bell_lock);
  return n;
}
