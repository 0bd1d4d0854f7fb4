/* Reading fabsock.conf.  The file is read with stdio, never read(): read is
 * interposed (HACKING.md), and stdio, unlike mmap, cannot SIGBUS when the
 * file is truncated under us. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "policy/conffile.h"
#include "base/real.h"

#ifndef SYSCONFDIR
#define SYSCONFDIR "/etc"
#endif

/* Open path as a regular file of at most max bytes, for stdio.  NULL on
 * failure, with -errno in *rc and why ("not a regular file", too_big, "out
 * of memory"; "" when open failed: strerror's text costs a process without
 * a config file four page faults, ~100 us in a VM, for nothing). */
static FILE *fs_conffile_open(const char *path, off_t max, const char *too_big, struct stat *st, int *rc, char *why,
                              size_t whylen)
{
  /* O_NONBLOCK: a FIFO must not hang the application in open. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    *rc = -errno;
    why[0] = '\0';
    return NULL;
  }
  if (fstat(fd, st) < 0)
    st->st_mode = 0;
  FILE *f = NULL;
  if (!S_ISREG(st->st_mode) || st->st_size > max) {
    snprintf(why, whylen, "%s", !S_ISREG(st->st_mode) ? "not a regular file" : too_big);
    *rc = -EINVAL;
  } else if ((f = fdopen(fd, "r")) == NULL) {
    snprintf(why, whylen, "out of memory");
    *rc = -ENOMEM;
  }
  if (f == NULL)
    FS_REAL(close)(fd);
  return f;
}

/* Parse the file at path into *out.  A missing file is an empty config
 * unless must_exist. */
static int fs_conffile_read(const char *path, bool must_exist, struct fs_policy **out, char *err,
                            size_t errlen)
{
  struct stat st;
  char why[128];
  int rc;
  FILE *f = fs_conffile_open(path, (off_t)FS_CONFFILE_MAX, "larger than 1 MiB", &st, &rc, why, sizeof why);
  if (f == NULL) {
    if (rc == -ENOENT && !must_exist)
      return fs_policy_parse("", 0, path, out, err, errlen);
    snprintf(err, errlen, "%s: %s", path, why[0] ? why : strerror(-rc));
    return rc;
  }
  size_t cap = (size_t)st.st_size + 1; /* one more to see the file growing past its size */
  char *buf = malloc(cap);
  if (buf == NULL) {
    fclose(f);
    snprintf(err, errlen, "%s: out of memory", path);
    return -ENOMEM;
  }
  size_t n = fread(buf, 1, cap, f);
  if (ferror(f)) {
    snprintf(err, errlen, "%s: read error", path);
    rc = -EIO;
  } else if (n > FS_CONFFILE_MAX) {
    snprintf(err, errlen, "%s: larger than 1 MiB", path);
    rc = -EINVAL;
  } else {
    rc = fs_policy_parse(buf, n, path, out, err, errlen);
  }
  fclose(f);
  free(buf);
  return rc;
}

int fs_conffile_key(const char *value, bool *has_key, uint8_t key[FS_HMAC_LEN], char *why, size_t whylen)
{
  if (strcmp(value, "none") == 0) {
    *has_key = false;
    memset(key, 0, FS_HMAC_LEN);
    return 0;
  }
  if (value[0] != '/') {
    snprintf(why, whylen, "expected none or an absolute path");
    return -EINVAL;
  }
  struct stat st;
  int rc;
  FILE *f = fs_conffile_open(value, FS_CONFFILE_KEY_MAX, "larger than 4096 bytes", &st, &rc, why, whylen);
  if (f == NULL) {
    if (!why[0])
      snprintf(why, whylen, "%s", strerror(-rc));
    return rc;
  }
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    fclose(f);
    snprintf(why, whylen, "group or others may read or write it (chmod 600)");
    return -EINVAL;
  }
  uint8_t buf[FS_CONFFILE_KEY_MAX + 1];
  size_t n = fread(buf, 1, sizeof buf, f);
  bool err = ferror(f) != 0;
  fclose(f);
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
    n--;
  if (err || n < FS_CONFFILE_KEY_MIN || n > FS_CONFFILE_KEY_MAX) {
    memset(buf, 0, sizeof buf);
    snprintf(why, whylen, "%s", err ? "read error" : n < FS_CONFFILE_KEY_MIN ? "a key needs at least 16 bytes" : "larger than 4096 bytes");
    return -EINVAL;
  }
  struct fs_hmac_sha s;
  fs_hmac_sha_init(&s);
  fs_hmac_sha_update(&s, buf, n);
  fs_hmac_sha_final(&s, key);
  memset(buf, 0, sizeof buf);
  *has_key = true;
  return 0;
}

int fs_conffile_load(const char *(*get)(const char *name), struct fs_policy **out, char *err,
                     size_t errlen)
{
  const char *path = get("FABSOCK_CONFIG");
  int rc;

  *out = NULL;
  if (path == NULL)
    rc = fs_conffile_read(SYSCONFDIR "/fabsock.conf", false, out, err, errlen);
  else if (path[0] == '\0') /* set but empty: no file at all */
    rc = fs_policy_parse("", 0, "(none)", out, err, errlen);
  else
    rc = fs_conffile_read(path, true, out, err, errlen);
  if (rc == 0) {
    rc = fs_policy_apply_env(*out, get, err, errlen);
    if (rc < 0) {
      fs_policy_free(*out);
      *out = NULL;
    }
  }
  return rc;
}
