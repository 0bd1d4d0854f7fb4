#include <stdio.h>

#include "engine/fdtab.h"
#include "engine/stdio.h"

bool fs_stdio_used_slow(const struct fs_conn *c)
{
  FILE *std[3] = { stdin, stdout, stderr };
  for (int i = 0; i < 3; i++) {
    /* glibc's FILE (bits/types/struct_FILE.h): a stream gets its buffer at
     * its first read or write, and keeps it.  A stream first used after
     * the upgrade is not seen. */
    int fd = std[i] != NULL ? std[i]->_fileno : -1;
    if (fd >= 0 && std[i]->_IO_buf_base != NULL && fs_fdtab_names(fd, c))
      return true;
  }
  return false;
}
