/* Slow paths of base/lock.h. */
#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/lock.h"

void fs_lock_wait(fs_lock_t *l, uint32_t seen)
{
  int saved = errno;
  /* Mark the lock waited for, then sleep while it stays so; whoever finds
   * it free on waking takes it as waited for (it cannot know whether other
   * waiters remain), so its unlock wakes the next one. */
  uint32_t c = seen == 2 ? 2 : __atomic_exchange_n(&l->v, 2, __ATOMIC_ACQUIRE);
  while (c != 0) {
    syscall(SYS_futex, &l->v, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
    c = __atomic_exchange_n(&l->v, 2, __ATOMIC_ACQUIRE);
  }
  errno = saved;
}

void fs_lock_wake(fs_lock_t *l)
{
  int saved = errno;
  syscall(SYS_futex, &l->v, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  errno = saved;
}
