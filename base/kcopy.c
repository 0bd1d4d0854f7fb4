/* Kernel copies within this process (base/kcopy.h). */
#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#include "base/kcopy.h"
#include "base/proc.h"

enum { FS_KCOPY_UNTRIED = 0, FS_KCOPY_ON, FS_KCOPY_OFF };
static int fs_kcopy_state; /* atomic */

/* No seccomp filter on us?  "Seccomp:\t0" in /proc/self/status; a status
 * we cannot read, or a line we do not find, says no. */
static bool fs_kcopy_unfiltered(void)
{
  char buf[4096];
  if (fs_proc_read("/proc/self/status", buf, sizeof buf) == 0)
    return false;
  const char *s = strstr(buf, "\nSeccomp:");
  if (s == NULL)
    return false;
  s += sizeof "\nSeccomp:" - 1;
  while (*s == ' ' || *s == '\t')
    s++;
  return s[0] == '0' && (s[1] == '\n' || s[1] == '\0');
}

bool fs_kcopy_usable(void)
{
  int st = __atomic_load_n(&fs_kcopy_state, __ATOMIC_RELAXED);
  if (__builtin_expect(st == FS_KCOPY_UNTRIED, 0)) {
    st = fs_kcopy_unfiltered() ? FS_KCOPY_ON : FS_KCOPY_OFF;
    __atomic_store_n(&fs_kcopy_state, st, __ATOMIC_RELAXED);
  }
  return st == FS_KCOPY_ON;
}

void fs_kcopy_forbid(void)
{
  __atomic_store_n(&fs_kcopy_state, FS_KCOPY_OFF, __ATOMIC_RELAXED);
}

static size_t fs_kcopy(void *local, void *map, size_t n, bool to_map)
{
  if (n == 0 || !fs_kcopy_usable())
    return 0;
  int saved = errno;
  struct iovec l = { local, n }, r = { map, n };
  /* Our own pid: the kernel allows a process this on itself whatever the
   * ptrace policy (same thread group); after fork fs_proc_self asks again. */
  ssize_t k = to_map ? process_vm_writev(fs_proc_self(), &l, 1, &r, 1, 0)
                     : process_vm_readv(fs_proc_self(), &l, 1, &r, 1, 0);
  if (k < 0 && (errno == EPERM || errno == ENOSYS || errno == ESRCH))
    __atomic_store_n(&fs_kcopy_state, FS_KCOPY_OFF, __ATOMIC_RELAXED);
  errno = saved;
  return k > 0 ? (size_t)k : 0;
}

size_t fs_kcopy_to_map(void *map, const void *src, size_t n)
{
  return fs_kcopy((void *)src, map, n, true);
}

size_t fs_kcopy_from_map(void *dst, const void *map, size_t n)
{
  return fs_kcopy(dst, (void *)map, n, false);
}
