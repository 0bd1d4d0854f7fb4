/* The fabric interface's few shared pieces.  See fabric/fabric.h. */
#include <stddef.h>

#include "base/hot.h"
#include "fabric/fabric.h"

const struct fs_fabric_host *fs_host FS_HOT;

void fs_fabric_set_host(const struct fs_fabric_host *h)
{
  __atomic_store_n(&fs_host, h, __ATOMIC_RELEASE);
}

const struct fs_fabric_ops *fs_fabric_by_id(int id)
{
  for (const struct fs_fabric_ops *const *f = fs_fabrics; *f; f++)
    if ((*f)->id == id)
      return *f;
  return NULL;
}

void fs_fabric_nop(void)
{
}

bool fs_fabric_nop_false(void)
{
  return false;
}

bool fs_fabric_nop_true(void)
{
  return true;
}

bool fs_fabric_nop_done(uint64_t deadline_ns)
{
  (void)deadline_ns;
  return true;
}

int fs_fabric_nop_timeout(void)
{
  return -1;
}

void fs_fabric_nop_unlisten(struct fs_link *l)
{
  (void)l;
}
