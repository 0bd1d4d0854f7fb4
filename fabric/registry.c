/* The registration list: the one place that knows which fabrics this build
 * has.  A new fabric is one folder under fabric/ plus one line here (and
 * the include of its Makefile.include in fabric/Makefile.include). */
#include <stddef.h>

#include "fabric/fabric.h"
#include "fabric/shm/rdv.h"
#ifdef HAVE_RDMA
#include "fabric/rdma/rdmacm.h"
#endif

/* Order of preference in auto mode: a peer on this host takes shm; shm
 * passes any other peer on to rdma. */
const struct fs_fabric_ops *const fs_fabrics[] = {
  &fs_shm_fabric,
#ifdef HAVE_RDMA
  &fs_rdma_fabric,
#endif
  NULL,
};
