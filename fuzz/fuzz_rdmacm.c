/* libFuzzer harness for the rdma connect-request check (fabric/rdma/rdmacm.h): the
 * private data of an rdma_cm connect request comes from anyone on the
 * network.  Whatever it is, the check returns 0 only for a well-formed v1
 * request whose fields are in range, verification under a key never passes
 * a message not sealed with it, and neither reads past the input.
 *
 *   make fuzz-rdmacm && mkdir -p fuzz/work-rdmacm &&
 *   ./fuzz/fuzz_rdmacm -max_total_time=60 fuzz/work-rdmacm
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/rdma/rdmacm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  /* a copy of exactly `size` bytes, so ASan sees any over-read */
  uint8_t *buf = malloc(size ? size : 1);
  if (!buf)
    return 0;
  memcpy(buf, data, size);
  struct fs_rdmacm_msg m;
  bool mac = false;
  if (fs_rdmacm_check_req(buf, size, &m, &mac) == 0) {
    if (size < sizeof m || m.version != FS_RDMACM_VERSION || m.ring_log2 < FS_RDMACM_RING_LOG2_MIN ||
        m.ring_log2 > FS_RDMACM_RING_LOG2_MAX || m.port == 0 || m.rkey == 0 ||
        (m.flags & ~(FS_RDMACM_F_MAC | FS_RDMACM_F_WHOLE)) != 0 || mac != ((m.flags & FS_RDMACM_F_MAC) != 0) ||
        (mac && size < sizeof(struct fs_rdmacm_wire)))
      abort();
  }
  /* A forged MAC passes only by a 2^-128 chance: treat a pass as a bug. */
  static const uint8_t key[32] = { 42 };
  static struct fs_rdmacm_seen seen;
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(1) };
  if (fs_rdmacm_verify(buf, size, key, (struct sockaddr *)&a, (struct sockaddr *)&a, NULL, 0, &seen) == 0 ||
      fs_rdmacm_verify(buf, size, key, (struct sockaddr *)&a, (struct sockaddr *)&a, buf, 0, NULL) == 0)
    abort();
  free(buf);
  return 0;
}
