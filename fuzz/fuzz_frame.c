/* libFuzzer target for the frame hook (make fuzz-frame).
 *
 * Input: [n][n bytes of frame arguments][4-byte seed][stream].  The spec is
 * "frame:" + arguments (no ';', so nothing but a frame hook is built).  The
 * stream goes through one set in one call and through a second set in
 * chunks split by the seed; both must agree on the verdict and the message
 * counts, and the spec checker must agree with fs_hook_open. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "hooks/hook.h"
#include "base/log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc, (void)argv;
  fs_log_level = FS_LOG_OFF;
  return 0;
}

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1)
    return 0;
  size_t alen = data[0] % 96;
  if (alen > size - 1)
    alen = size - 1;
  char spec[128] = "frame:";
  memcpy(spec + 6, data + 1, alen);
  spec[6 + alen] = '\0';
  if (memchr(data + 1, ';', alen) || strlen(spec) != 6 + alen)
    return 0;
  data += 1 + alen, size -= 1 + alen;
  uint32_t seed = 1;
  if (size >= 4) {
    memcpy(&seed, data, 4);
    data += 4, size -= 4;
  }
  char err[256];
  struct fs_stat_conn a = { 0 }, b = { 0 };
  struct fs_hookset *h1, *h2;
  int rc = fs_hook_open(spec, NULL, &a, &h1);
  CHECK((rc == 0) == (fs_hook_spec_check(spec, err, sizeof err) == 0));
  if (rc < 0) {
    CHECK(rc == -EINVAL && h1 == NULL);
    return 0;
  }
  CHECK(fs_hook_open(spec, NULL, &b, &h2) == 0);
  int dir = seed & 1; /* send or recv */
  int r1 = dir ? fs_hook_recv(h1, data, size) : fs_hook_send(h1, data, size);
  int r2 = 0;
  for (size_t off = 0; off < size && r2 == 0;) {
    seed = seed * 1103515245u + 12345u;
    size_t n = 1 + (seed >> 16) % ((seed & 0x100) ? 4 : 64);
    if (n > size - off)
      n = size - off;
    r2 = dir ? fs_hook_recv(h2, data + off, n) : fs_hook_send(h2, data + off, n);
    off += n;
    (void)fs_hook_wake_hint(h2);
  }
  CHECK(r1 == r2);
  CHECK(r1 == 0 || r1 == -ECONNABORTED);
  CHECK(a.rx_msgs == b.rx_msgs && a.tx_msgs == b.tx_msgs);
  if (r1 == 0)
    CHECK(fs_hook_wake_hint(h1) == fs_hook_wake_hint(h2));
  else
    CHECK(fs_hook_recv(h1, "x", 1) == -ECONNABORTED && fs_hook_send(h2, "x", 1) == -ECONNABORTED);
  fs_hook_close(h1);
  fs_hook_close(h2);
  return 0;
}
