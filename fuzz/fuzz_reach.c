/* libFuzzer target for `fabsock run`'s look into a program file
 * (tools/reach.c): the input is the file, in a memfd.  Every offset and
 * count in it is hostile; the answer must be one of enum fs_reach with a
 * terminated sentence, and nothing may be read outside a buffer (ASan). */
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tools/reach.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static int fd = -1;
  if (fd < 0 && (fd = memfd_create("fuzz-reach", MFD_CLOEXEC)) < 0)
    return 0;
  if (ftruncate(fd, 0) < 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
    return 0;
  char why[512];
  memset(why, 'x', sizeof why);
  enum fs_reach r = fs_tool_reach_fd(fd, 1000, 1000, why, sizeof why);
  if (r < FS_REACH_OK || r > FS_REACH_SECURE || !memchr(why, '\0', sizeof why))
    __builtin_trap();
  return 0;
}
