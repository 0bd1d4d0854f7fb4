#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/hot.h"
#include "base/proc.h"
#include "engine/conn.h"

void (*fs_conn_release_hook)(struct fs_conn *c) FS_HOT;
void (*fs_conn_last_fd_hook)(struct fs_conn *c) FS_HOT;

static fs_lock_t fs_conn_pool_lock FS_HOT; /* base/lock.h: inline, two a connection */
static struct fs_conn *fs_conn_free_list FS_HOT;
/* The batch being handed out, never touched past fs_conn_next: threading
 * all of it onto the free list wrote every page of it, and each first
 * write is a page fault (~25 us in a VM): 19 of the 42 a process's first
 * socket() took, half a millisecond of a one-shot client (curl). */
static struct fs_conn *fs_conn_next FS_HOT, *fs_conn_end FS_HOT;

const char *fs_conn_state_name(int state)
{
  static const char *const names[] = {
    "passthrough", "tcp", "upgrading", "fabric", "downgrading", "listen", "unconnected", "closed",
  };
  if (state < 0 || state > FS_STATE_CLOSED)
    return "unknown";
  return names[state];
}

/* A connection's memory: a freed one, else the next of the batch, else a new
 * page-aligned batch straight from mmap, so the memory is never handed back
 * (type stability) and never comes from the application's malloc.  The
 * caller holds the pool lock. */
static struct fs_conn *fs_conn_take(void)
{
  struct fs_conn *c = fs_conn_free_list;
  if (c) {
    fs_conn_free_list = c->free_next;
    return c;
  }
  if (fs_conn_next == fs_conn_end) {
    size_t batch = 64;
    void *mem = mmap(NULL, batch * sizeof(struct fs_conn), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
      return NULL;
    fs_conn_next = mem;
    fs_conn_end = fs_conn_next + batch;
  }
  return fs_conn_next++;
}

struct fs_conn *fs_conn_new(int fd, int family)
{
  /* Every connection, and so every tracked socket and wake lease, comes
   * from here: a process with any has this bit (and its fork handlers). */
  fs_proc_fork_work_add(FS_FORK_CONN);
  fs_lock(&fs_conn_pool_lock);
  struct fs_conn *c = fs_conn_take();
  fs_unlock(&fs_conn_pool_lock);
  if (!c)
    return NULL;

  /* refs stays 0 (dead to racing readers) until everything else is set. */
  memset((char *)c + sizeof c->refs, 0, sizeof *c - sizeof c->refs);
  fs_lock_init(&c->lock);
  fs_lock_init(&c->txlock);
  fs_lock_init(&c->rxlock);
  c->fd = fd;
  c->wake_fd = -1;
  c->family = family;
  c->state = FS_STATE_UNCONNECTED;
  c->stat = fs_stat_slot_alloc();
  if (c->stat) {
    c->stat->fd = fd;
    c->stat->family = (uint8_t)family;
    c->stat->state = FS_STATE_UNCONNECTED;
    c->stat->fabric = FS_FABRIC_TCP;
    __atomic_store_n(&c->stat->used, 1, __ATOMIC_RELEASE);
  }
  __atomic_store_n(&c->refs, 1, __ATOMIC_RELEASE);
  return c;
}

FS_FORK_TEXT void fs_conn_pool_fork_child(void)
{
  /* Never taken: not even read (its page was never the parent's). */
  if (fs_proc_fork_work_has(FS_FORK_CONN))
    fs_lock_fork_reset(&fs_conn_pool_lock);
}

void fs_conn_set_state(struct fs_conn *c, int state, int reason)
{
  __atomic_store_n(&c->state, (uint32_t)state, __ATOMIC_RELEASE);
  c->reason = (uint8_t)reason;
  if (c->stat) {
    c->stat->state = (uint8_t)state;
    c->stat->reason = (uint8_t)reason;
    /* A listener, or a connection with something to say (on a fabric, or
     * kept on TCP for a reason): the table goes where it can be read.
     * Not for an exec's downgrade, whose table leaves with the image, nor
     * at a close, whose row goes (a fork child closing the listeners it
     * inherited made its file for nothing: engine/sockfork.c). */
    if (state != FS_STATE_CLOSED &&
        ((reason != FS_REASON_PENDING && reason != FS_REASON_EXEC) || state == FS_STATE_LISTEN))
      fs_stat_publish();
  }
}

void fs_conn_put(struct fs_conn *c)
{
  if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0)
    return;
  if (fs_conn_release_hook)
    fs_conn_release_hook(c);
  if (c->stat)
    fs_stat_slot_free(c->stat);
  c->stat = NULL;
  /* Bytes kept for a reader that is gone (engine/overhang.h).  No call
   * without them: free(NULL) bound free lazily in every PostgreSQL backend
   * closing the postmaster's listeners, a lookup through every library. */
  if (c->ovh) {
    free(c->ovh);
    c->ovh = NULL;
  }
  fs_lock(&fs_conn_pool_lock);
  c->free_next = fs_conn_free_list;
  fs_conn_free_list = c;
  fs_unlock(&fs_conn_pool_lock);
}
