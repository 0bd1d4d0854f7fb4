/* Where the policy comes from: the config file (FABSOCK_CONFIG, else
 * SYSCONFDIR/fabsock.conf if it exists), then the FABSOCK_* variables. */
#ifndef FS_POLICY_CONFFILE_H
#define FS_POLICY_CONFFILE_H

#include <stddef.h>

#include "policy/policy.h"

#define FS_CONFFILE_MAX (1u << 20) /* bytes; a bigger file is an error */

/* Build a policy from the file and variables that get() names (getenv-like).
 * FABSOCK_CONFIG unset: the sysconfdir file, or nothing if it does not exist;
 * set: that file, which must exist; set but empty: no file.  Returns 0, or
 * -errno with *out NULL and a one-line message in err ("file:line: ...",
 * "file: No such file or directory", "FABSOCK_X: ..."). */
int fs_conffile_load(const char *(*get)(const char *name), struct fs_policy **out, char *err,
                     size_t errlen);

#endif
