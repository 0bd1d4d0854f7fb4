/* Values shared by fabsock.conf(5) keys and FABSOCK_* variables.
 *
 * Each parser takes a NUL-terminated value; on success it stores the result
 * and returns 0, else returns -EINVAL, leaves the outputs alone and writes
 * a short reason ("expected auto, rdma, shm or tcp") into why. */
#ifndef FS_POLICY_VALUE_H
#define FS_POLICY_VALUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/policy.h"

/* auto|rdma|shm|tcp */
int fs_value_fabric(const char *v, enum fs_fabric *out, char *why, size_t whylen);
/* N[K|M|G] (binary multiples) or never (FS_POLICY_UPGRADE_NEVER) */
int fs_value_bytes(const char *v, uint64_t *out, char *why, size_t whylen);
/* adaptive | busy | microseconds (sets both outputs) */
int fs_value_spin(const char *v, int32_t *spin_us, bool *busy, char *why, size_t whylen);
/* milliseconds, 1 to 4294967295 */
int fs_value_timeout(const char *v, uint32_t *out, char *why, size_t whylen);
/* 0|1 */
int fs_value_bool(const char *v, bool *out, char *why, size_t whylen);
/* A hook spec v[0..n): at most FS_POLICY_HOOKS_MAX - 1 bytes, copied into
 * dst (FS_POLICY_HOOKS_MAX bytes, NUL-terminated) unless dst is NULL. */
int fs_value_hooks(const char *v, size_t n, char *dst, char *why, size_t whylen);

/* v[0..n) made safe to quote in a message: bytes outside printable ASCII
 * become '?', long text is cut with "...".  Returns buf. */
const char *fs_value_show(const char *v, size_t n, char *buf, size_t size);

/* snprintf into why; returns -EINVAL. */
int fs_value_failf(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
