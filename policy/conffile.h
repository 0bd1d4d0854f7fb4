/* Where the policy comes from: the config file (FABSOCK_CONFIG, else
 * SYSCONFDIR/fabsock.conf if it exists), then the FABSOCK_* variables. */
#ifndef FS_POLICY_CONFFILE_H
#define FS_POLICY_CONFFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/policy.h"

#define FS_CONFFILE_MAX (1u << 20) /* bytes; a bigger file is an error */
#define FS_CONFFILE_KEY_MIN 16     /* bytes of key file, trailing white space aside */
#define FS_CONFFILE_KEY_MAX 4096

/* The value of rdma_key= / FABSOCK_RDMA_KEY_FILE: "none" (no key), or the
 * path of a regular file that only its owner may read or write, holding
 * FS_CONFFILE_KEY_MIN..FS_CONFFILE_KEY_MAX bytes; trailing white space
 * (a newline an editor adds) is not part of the key.  The key is the
 * SHA-256 of the rest.  0, or -errno with a short reason in why. */
int fs_conffile_key(const char *value, bool *has_key, uint8_t key[FS_HMAC_LEN], char *why, size_t whylen);

/* Build a policy from the file and variables that get() names (getenv-like).
 * FABSOCK_CONFIG unset: the sysconfdir file, or nothing if it does not exist;
 * set: that file, which must exist; set but empty: no file.  Returns 0, or
 * -errno with *out NULL and a one-line message in err ("file:line: ...",
 * "file: No such file or directory", "FABSOCK_X: ..."). */
int fs_conffile_load(const char *(*get)(const char *name), struct fs_policy **out, char *err,
                     size_t errlen);

#endif
