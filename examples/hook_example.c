/* Example libfabsock hook: a per-connection byte quota.
 *
 *   FABSOCK_HOOKS='/path/to/hook_example.so:max_recv=1000000,max_send=0'
 *
 * max_recv / max_send: close the connection once more than that many bytes
 * went that way (0 or absent: no limit).  Build it outside the tree with
 *
 *   cc -shared -fPIC $(pkg-config --cflags fabsock) -o hook_example.so hook_example.c
 *
 * It shows the whole ABI: argument parsing in open, per-connection state, a
 * verdict with a reason, and close.  Only fabsock_hook_entry is exported. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fabsock/hook.h>

struct quota {
  unsigned long long max[2], seen[2]; /* [0] send, [1] recv */
  char reason[96];
};

static int parse_args(const char *args, struct quota *q)
{
  while (args && *args) {
    size_t n = strcspn(args, ",");
    unsigned long long v;
    char key[16];
    int used = 0;
    if (sscanf(args, "%15[a-z_]=%llu%n", key, &v, &used) != 2 || (size_t)used != n)
      return -EINVAL;
    if (strcmp(key, "max_send") == 0)
      q->max[0] = v;
    else if (strcmp(key, "max_recv") == 0)
      q->max[1] = v;
    else
      return -EINVAL;
    args += n + (args[n] == ',');
  }
  return 0;
}

static int quota_open(const char *args, const struct fabsock_conn_info *ci, void **state)
{
  struct quota *q = calloc(1, sizeof *q);
  if (q == NULL)
    return -ENOMEM;
  (void)ci; /* ci->size tells which members this library filled in */
  if (parse_args(args, q) < 0) {
    free(q);
    return -EINVAL;
  }
  *state = q;
  return 0;
}

static int account(struct quota *q, int dir, size_t len)
{
  q->seen[dir] += len;
  if (q->max[dir] && q->seen[dir] > q->max[dir]) {
    snprintf(q->reason, sizeof q->reason, "%s quota of %llu bytes exceeded",
             dir ? "recv" : "send", q->max[dir]);
    return FABSOCK_HOOK_CLOSE;
  }
  return FABSOCK_HOOK_PASS;
}

static int quota_send(void *state, const void *buf, size_t len)
{
  (void)buf;
  return account(state, 0, len);
}

static int quota_recv(void *state, const void *buf, size_t len)
{
  (void)buf;
  return account(state, 1, len);
}

static const char *quota_reason(void *state)
{
  return ((struct quota *)state)->reason;
}

static void quota_close(void *state)
{
  free(state);
}

static const struct fabsock_hook_ops quota_ops = {
  .abi_version = FABSOCK_HOOK_ABI_VERSION,
  .name = "quota",
  .open = quota_open,
  .on_send = quota_send,
  .on_recv = quota_recv,
  .close = quota_close,
  .reason = quota_reason,
};

__attribute__((visibility("default")))
const struct fabsock_hook_ops *fabsock_hook_entry(void)
{
  return &quota_ops;
}
