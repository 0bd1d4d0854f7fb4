/* A connection's own address, which its stat row leaves out until it
 * upgrades (lport 0: the library saves a getsockname per connection that
 * never does, engine/sock.c).  The kernel has it: the fd's inode
 * (/proc/PID/fd/FD -> "socket:[INO]") in that process's /proc/PID/net/tcp
 * or tcp6.  Trusted only if the line's remote end is the row's peer: the
 * fd may have been closed and its number reused since the row was read.
 * Unreadable (another user's process, not root): the address stays out. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/stat.h"
#include "tools/fabsock.h"

/* The socket inode behind pid's fd, 0 if none or unreadable. */
static uint32_t fs_tool_fd_inode(int pid, int fd)
{
  char path[64], link[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
  ssize_t n = readlink(path, link, sizeof link - 1);
  if (n <= 0)
    return 0;
  link[n] = '\0';
  unsigned long ino;
  char end;
  if (sscanf(link, "socket:[%lu%c", &ino, &end) != 2 || end != ']' || ino > UINT32_MAX)
    return 0;
  return (uint32_t)ino;
}

/* "0100007F:1F90": words in host order as the kernel prints them (%08X of
 * each 32-bit word of the address), the port in host order.  words is 1
 * (tcp) or 4 (tcp6).  0 or -1. */
static int fs_tool_hexaddr(const char *s, int words, uint8_t out[16], uint16_t *port)
{
  memset(out, 0, 16);
  for (int w = 0; w < words; w++) {
    char word[9];
    memcpy(word, s + 8 * w, 8);
    word[8] = '\0';
    char *end;
    uint32_t v = (uint32_t)strtoul(word, &end, 16);
    if (end != word + 8)
      return -1;
    memcpy(out + 4 * w, &v, 4);
  }
  s += 8 * words;
  if (*s != ':')
    return -1;
  char *end;
  unsigned long p = strtoul(s + 1, &end, 16);
  if (end != s + 5 || p > 0xffff)
    return -1;
  *port = (uint16_t)p;
  return 0;
}

/* A row's inode and index, the rows ordered by inode: a table line finds
 * its rows by a binary search, not a pass over all of them (a proxy's
 * thousands of pending connections against a host's tens of thousands of
 * lines).  As cmd_stat.c's peer keys. */
struct fs_tool_ino {
  uint32_t ino;
  size_t row;
};

static int fs_tool_by_ino(const void *a, const void *b)
{
  uint32_t x = ((const struct fs_tool_ino *)a)->ino, y = ((const struct fs_tool_ino *)b)->ino;
  return (x > y) - (x < y);
}

/* Fill rows[i] (lport 0, connected) from the kernel's table for family;
 * keys: the rows with an inode, ordered by it (m of them). */
static void fs_tool_scan(int pid, int family, struct fs_stat_conn *const *rows, const struct fs_tool_ino *keys,
                         size_t m)
{
  char path[64], line[512];
  snprintf(path, sizeof path, "/proc/%d/net/%s", pid, family == AF_INET6 ? "tcp6" : "tcp");
  FILE *f = fopen(path, "re");
  if (f == NULL)
    return;
  int words = family == AF_INET6 ? 4 : 1;
  while (fgets(line, sizeof line, f) != NULL) {
    char la[64], ra[64];
    unsigned long inode;
    /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
    if (sscanf(line, " %*[^:]: %63s %63s %*s %*s %*s %*s %*s %*s %lu", la, ra, &inode) != 3 || inode == 0)
      continue;
    size_t lo = 0, hi = m; /* the first with an inode >= this one */
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (keys[mid].ino < inode)
        lo = mid + 1;
      else
        hi = mid;
    }
    for (; lo < m && keys[lo].ino == inode; lo++) {
      struct fs_stat_conn *c = rows[keys[lo].row];
      uint8_t l[16], r[16];
      uint16_t lp, rp;
      if (c->family != family || c->lport != 0)
        continue;
      if (fs_tool_hexaddr(la, words, l, &lp) < 0 || fs_tool_hexaddr(ra, words, r, &rp) < 0)
        continue;
      if (rp != c->pport || memcmp(r, c->paddr, family == AF_INET6 ? 16 : 4) != 0)
        continue;
      memcpy(c->laddr, l, 16);
      c->lport = lp;
    }
  }
  fclose(f);
}

size_t fs_tool_fill_local(int pid, struct fs_stat_conn *const *rows, size_t n)
{
  struct fs_tool_ino *keys = malloc((n ? n : 1) * sizeof *keys);
  if (keys == NULL)
    return 0;
  size_t m = 0;
  bool v4 = false, v6 = false;
  for (size_t i = 0; i < n; i++) {
    uint32_t ino = rows[i]->inode ? rows[i]->inode : fs_tool_fd_inode(pid, rows[i]->fd);
    if (!ino)
      continue;
    keys[m++] = (struct fs_tool_ino){ ino, i };
    v4 |= rows[i]->family == AF_INET;
    v6 |= rows[i]->family == AF_INET6;
  }
  qsort(keys, m, sizeof *keys, fs_tool_by_ino);
  if (v4)
    fs_tool_scan(pid, AF_INET, rows, keys, m);
  if (v6)
    fs_tool_scan(pid, AF_INET6, rows, keys, m);
  free(keys);
  size_t filled = 0;
  for (size_t i = 0; i < n; i++)
    filled += rows[i]->lport != 0;
  return filled;
}
