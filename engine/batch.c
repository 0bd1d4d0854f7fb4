/* Wakes held back within an event loop's batch (engine/batch.h). */
#include <errno.h>
#include <pthread.h>

#include "base/bell.h"
#include "base/hot.h"
#include "engine/batch.h"

__thread struct fs_batch fs_batch_tls __attribute__((tls_model("initial-exec")));

static pthread_key_t fs_batch_key FS_HOT;
static pthread_once_t fs_batch_once FS_HOT = PTHREAD_ONCE_INIT;

/* A thread that exits inside a batch wakes what it held. */
static void fs_batch_exit(void *arg)
{
  (void)arg;
  fs_batch_flush();
}

static void fs_batch_key_init(void)
{
  if (pthread_key_create(&fs_batch_key, fs_batch_exit) != 0)
    fs_batch_key = (pthread_key_t)-1;
}

void fs_batch_begin(int nev)
{
  if (nev < 2)
    return;
  struct fs_batch *b = &fs_batch_tls;
  if (!b->exit_hooked) {
    /* The destructor runs only for a thread whose key is set: set it once
     * per thread, not at every batch. */
    pthread_once(&fs_batch_once, fs_batch_key_init);
    if (fs_batch_key == (pthread_key_t)-1 || pthread_setspecific(fs_batch_key, b) != 0)
      return; /* no way to be told of the thread's exit: no batch */
    b->exit_hooked = 1;
  }
  b->on = 1;
}

void fs_batch_flush_slow(void)
{
  struct fs_batch *b = &fs_batch_tls;
  int saved = errno;
  /* Closed first: a put below may release a connection, and nothing it
   * does may land in this batch again. */
  b->on = 0;
  unsigned n = b->n;
  b->n = 0;
  /* Every slot first, then the bells' writes (base/bell.h: one wake per
   * peer thread, not one per connection); the references keep the
   * channels, and so the bells' eventfds, open until then. */
  fs_bell_hold();
  for (unsigned i = 0; i < n; i++) {
    struct fs_chan *ch = __atomic_load_n(&b->conn[i]->chan, __ATOMIC_ACQUIRE);
    if (ch)
      fs_chan_kick_data(ch);
  }
  fs_bell_release();
  for (unsigned i = 0; i < n; i++)
    fs_conn_put(b->conn[i]);
  errno = saved;
}

void fs_batch_kick_slow(struct fs_conn *c, struct fs_chan *ch)
{
  struct fs_batch *b = &fs_batch_tls;
  for (unsigned i = 0; i < b->n; i++)
    if (b->conn[i] == c)
      return; /* held already: one wake covers both records */
  if (b->n == FS_BATCH_SLOTS) {
    fs_chan_kick_data(ch);
    return;
  }
  fs_conn_get(c);
  b->conn[b->n++] = c;
}
