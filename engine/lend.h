/* What the engine lends the fabrics (fabric/fabric.h): its connections,
 * seen as links, and its agent thread.  sock.c installs it. */
#ifndef FS_ENGINE_LEND_H
#define FS_ENGINE_LEND_H

#include "fabric/fabric.h"

extern const struct fs_fabric_host fs_lend_host;

#endif
