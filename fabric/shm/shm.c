
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bell.h"
#include "base/fdreg.h"
#include "base/proc.h"
#include "fabric/diag.h"
#include "fabric/shm/rdv.h"
#include "fabric/shm/shm.h"
#include "policy/policy.h"
#include "base/real.h"

_Static_assert(sizeof(struct fs_shm_hdr) <= FS_SHM_HDR_SIZE, "shm header fits its page");

/* The shm channel: the generic one plus its mapping and the peer's wake. */
struct fs_shm_chan {
  struct fs_chan ch;
  int peer_efd;              /* the peer's wake eventfd (ours to close), or -1 */
  struct fs_bell_peer *peer_bell; /* or the peer's doorbell (referenced) */
  uint32_t peer_slot;        /* and its slot there */
  void *map;
  size_t map_len;
};

static struct fs_shm_chan *fs_shm_of(struct fs_chan *ch)
{
  return (struct fs_shm_chan *)ch;
}

static void fs_shm_release(struct fs_chan *ch)
{
  struct fs_shm_chan *s = fs_shm_of(ch);
  munmap(s->map, s->map_len);
  /* my_efd belongs to the connection; the peer's is ours to close. */
  if (s->peer_efd >= 0)
    fs_fdreg_close(s->peer_efd);
  fs_bell_peer_put(s->peer_bell);
  free(s);
}

static void fs_shm_wake_peer(struct fs_chan *ch)
{
  struct fs_shm_chan *s = fs_shm_of(ch);
  if (s->peer_bell)
    fs_bell_peer_ring(s->peer_bell, s->peer_slot);
  else
    fs_chan_efd_write(s->peer_efd);
}

/* Same host: the kernel knows whether any process still holds the peer's
 * socket (sock_diag: an orphan has inode 0, a gone one is not found, or
 * found as its listener: the lookup falls through to one). */
static bool fs_shm_peer_gone(struct fs_chan *ch, const struct sockaddr *local, const struct sockaddr *peer)
{
  (void)ch;
  uint32_t uid, inode = 1;
  uint8_t st = 0;
  int rc = fs_diag_lookup(peer, local, &uid, &inode, &st);
  return fs_diag_ended(rc, inode, st, true) || (rc == 0 && inode == 0);
}

static size_t fs_shm_trim(struct fs_chan *ch, bool *all)
{
  ssize_t n = fs_ring_trim(&ch->tx, all);
  return n > 0 ? (size_t)n : 0;
}

static const struct fs_chan_ops fs_shm_ops = {
  .name = "shm",
  .fabric = FS_FABRIC_SHM,
  .polled = false,
  .wake_peer = fs_shm_wake_peer,
  .release = fs_shm_release,
  .progress = fs_chan_nop,          /* the peer writes our control blocks itself */
  .publish = fs_chan_shared_publish,
  .settle = fs_chan_nop,            /* the peer reads the very memory we wrote */
  .credit = fs_chan_shared_credit,
  .arm = fs_chan_nop,               /* the want flags are all it takes */
  .drain = fs_chan_nop,             /* no event fd of its own */
  .fork_shares = fs_chan_yes,       /* the child maps the same memory */
  .forget = fs_chan_nop,
  .lingering = fs_chan_no,          /* stores land at once */
  .peer_gone = fs_shm_peer_gone,
  .trim = fs_shm_trim,
};

static bool fs_shm_pow2(uint32_t v)
{
  return v && !(v & (v - 1));
}

uint32_t fs_shm_ring_size(uint32_t asked)
{
  if (asked >= FS_SHM_RING_MIN && asked <= FS_SHM_RING_MAX && fs_shm_pow2(asked))
    return asked;
  return FS_SHM_RING_DEFAULT;
}

uint32_t fs_shm_ring_for(uint32_t asked, uint32_t io_max, uint32_t rx_burst)
{
  uint32_t ring = fs_shm_ring_size(asked);
  uint64_t want = (uint64_t)io_max * FS_SHM_RING_CALLS;
  while (ring < want && ring < FS_SHM_RING_BIG)
    ring <<= 1;
  while (ring < rx_burst && ring < FS_SHM_RING_BURST)
    ring <<= 1;
  return ring;
}

static struct fs_chan *fs_shm_view(void *map, size_t len, uint32_t ring, int side, int my_efd, int peer_efd)
{
  struct fs_shm_chan *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  struct fs_chan *ch = &s->ch;
  struct fs_shm_hdr *h = map;
  uint8_t *data = (uint8_t *)map + FS_SHM_HDR_SIZE;
  ch->ops = &fs_shm_ops;
  ch->side = side;
  s->map = map;
  s->map_len = len;
  ch->my_efd = my_efd;
  s->peer_efd = peer_efd;
  ch->wait_fd = -1;
  ch->me = &h->ep[side];
  ch->peer = &h->ep[!side];
  /* A large ring is written in its first part until the stream proves long
   * (fabric/ring.h, SKIP): its pages cost a fault each when first written. */
  /* Its first pages are written and read by the kernel (fabric/ring.h,
   * kcopy) until FS_RING_WIN_GROW windows went through. */
  uint32_t kc = fs_policy_kcopy() ? FS_RING_WIN_GROW * (fs_ring_win0(ring) ? fs_ring_win0(ring) : ring) : 0;
  ch->tx = (struct fs_ring){ .ctl = &h->ctl[side], .data = data + (size_t)side * ring, .size = ring,
                             .win = fs_ring_win0(ring), .rest = FS_RING_REST, .kcopy = kc, .kcopy0 = kc };
  ch->rx = (struct fs_ring){ .ctl = &h->ctl[!side], .data = data + (size_t)!side * ring, .size = ring,
                             .kcopy = kc, .kcopy0 = kc };
  return ch;
}

int fs_shm_create(uint32_t ring, int my_efd, int *memfd_out, struct fs_chan **out)
{
  size_t len = FS_SHM_HDR_SIZE + 2 * (size_t)ring;
  if (fs_proc_as_room(len) < 0)
    return -ENOMEM; /* the application's address space, not ours to take */
  /* High at once: the agent makes it while the application may be closing
   * every descriptor (base/fdreg.h). */
  int fd = FS_FDREG_MAKE_HIGH(memfd_create("fabsock-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (fd < 0)
    return -errno;
  int rc;
  if (ftruncate(fd, (off_t)len) < 0 ||
      FS_REAL(fcntl)(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
    rc = -errno;
    FS_REAL(close)(fd);
    return rc;
  }
  void *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    rc = -errno;
    FS_REAL(close)(fd);
    return rc;
  }
  struct fs_shm_hdr *h = map;
  h->magic = FS_SHM_MAGIC;
  h->version = FS_SHM_VERSION;
  h->ring_size = ring;
  h->hdr_size = FS_SHM_HDR_SIZE;
  h->ep[0].refs = 1;
  h->ep[0].pid = (uint32_t)getpid();
  h->ctl[0].size = h->ctl[1].size = ring;
  struct fs_chan *ch = fs_shm_view(map, len, ring, 0, my_efd, -1);
  if (!ch) {
    munmap(map, len);
    FS_REAL(close)(fd);
    return -ENOMEM;
  }
  *memfd_out = fd;
  *out = ch;
  return 0;
}

/* The peer's wake fd must be an eventfd, non-blocking: our data path
 * writes to it, and a peer of another user could pass a pipe it never
 * drains (we would block) or a file (we would write into it).  A doorbell
 * is checked the same way, and its page's memfd must be sealed at its
 * size (base/bell.h). */
int fs_shm_set_peer(struct fs_chan *ch, struct fs_shm_wake *w)
{
  struct fs_shm_chan *s = fs_shm_of(ch);
  if (w->bell_memfd >= 0) {
    if (w->slot >= FS_BELL_SLOTS)
      return -EPROTO;
    struct fs_bell_peer *p;
    int rc = fs_bell_peer_get(w->efd, w->bell_memfd, w->budget_fd, &p);
    w->efd = w->bell_memfd = -1; /* taken: kept or closed */
    if (rc < 0)
      return rc == -EMFILE ? rc : -EPROTO;
    s->peer_bell = p;
    s->peer_slot = w->slot;
    return 0;
  }
  if (fs_bell_check_efd(w->efd) < 0)
    return -EPROTO;
  fs_fdreg_set(w->efd, true);
  s->peer_efd = w->efd;
  w->efd = -1;
  return 0;
}

int fs_shm_attach(int memfd, int my_efd, struct fs_shm_wake *peer, struct fs_chan **out)
{
  struct stat st;
  if (peer->bell_memfd < 0 && fs_bell_check_efd(peer->efd) < 0)
    return -EPROTO;
  if (fstat(memfd, &st) < 0)
    return -errno;
  int seals = FS_REAL(fcntl)(memfd, F_GET_SEALS, 0);
  int need = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
  if (!S_ISREG(st.st_mode) || seals < 0 || (seals & need) != need)
    return -EPROTO;
  if (st.st_size < FS_SHM_HDR_SIZE + 2 * FS_SHM_RING_MIN ||
      st.st_size > FS_SHM_HDR_SIZE + 2 * (off_t)FS_SHM_RING_MAX)
    return -EPROTO;
  size_t len = (size_t)st.st_size;
  if (fs_proc_as_room(len) < 0)
    return -ENOMEM;
  void *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (map == MAP_FAILED)
    return -errno;
  struct fs_shm_hdr *h = map;
  uint32_t ring = __atomic_load_n(&h->ring_size, __ATOMIC_RELAXED);
  if (h->magic != FS_SHM_MAGIC || h->version != FS_SHM_VERSION || h->hdr_size != FS_SHM_HDR_SIZE ||
      !fs_shm_pow2(ring) || ring < FS_SHM_RING_MIN || ring > FS_SHM_RING_MAX ||
      len != FS_SHM_HDR_SIZE + 2 * (size_t)ring ||
      h->ctl[0].tail != 0 || h->ctl[0].head != 0 || h->ctl[1].tail != 0 || h->ctl[1].head != 0) {
    munmap(map, len);
    return -EPROTO;
  }
  /* Only one accepting end, ever: a replayed request finds refs taken. */
  uint32_t zero = 0;
  if (!__atomic_compare_exchange_n(&h->ep[1].refs, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
    munmap(map, len);
    return -EPROTO;
  }
  h->ep[1].pid = (uint32_t)getpid();
  struct fs_chan *ch = fs_shm_view(map, len, ring, 1, my_efd, -1);
  if (!ch) {
    munmap(map, len);
    return -ENOMEM;
  }
  int rc = fs_shm_set_peer(ch, peer);
  if (rc < 0) {
    ch->ops->release(ch);
    return rc;
  }
  *out = ch;
  return 0;
}
