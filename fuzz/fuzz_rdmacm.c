/* libFuzzer harness for the rdma connect-request check (core/rdmacm.h): the
 * private data of an rdma_cm connect request comes from anyone on the
 * network.  Whatever it is, the check returns 0 only for a well-formed v1
 * request whose fields are in range, and never reads past the input.
 *
 *   make fuzz-rdmacm && mkdir -p fuzz/work-rdmacm &&
 *   ./fuzz/fuzz_rdmacm -max_total_time=60 fuzz/work-rdmacm
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/rdmacm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  /* a copy of exactly `size` bytes, so ASan sees any over-read */
  uint8_t *buf = malloc(size ? size : 1);
  if (!buf)
    return 0;
  memcpy(buf, data, size);
  struct fs_rdmacm_msg m;
  if (fs_rdmacm_check_req(buf, size, &m) == 0) {
    if (size < sizeof m || m.version != 1 || m.ring_log2 < FS_RDMACM_RING_LOG2_MIN ||
        m.ring_log2 > FS_RDMACM_RING_LOG2_MAX || m.port == 0 || m.rkey == 0 || m.flags != 0)
      abort();
  }
  free(buf);
  return 0;
}
