/* Copies into and out of one of our own shared mappings made by the kernel
 * (process_vm_writev/readv on this process), for a ring's pages this
 * process has not touched yet.
 *
 * Why: where a guest's page tables are shadowed (this project's VMs), the
 * first user access to each page of a mapping traps to the hypervisor,
 * however the page was made: a fresh 1 MiB written with memcpy took 2.5
 * ms, read through the peer's mapping 1.1 ms, against 0.24 and 0.07 ms for
 * the same copies made by the kernel, which reaches the pages through its
 * own mapping (bench/ring-touch; docs/design.md "Kernel copies for cold
 * rings").  The kernel's copy costs a system call (1.6 us here) and runs at
 * 4-15 GB/s where a warm memcpy runs at 20-70, so it pays only while the
 * pages are cold: fabric/ring.c budgets it.
 *
 * Refused, so that nothing is ever tried: under a seccomp filter (a
 * service's SystemCallFilter may kill the process at a system call it
 * does not list; one installed later goes through preload/proc.c, which
 * calls fs_kcopy_forbid).  Failing calls (EPERM, ENOSYS) turn it off for
 * the process.  errno is kept.  (FABSOCK_KCOPY=0, policy/, keeps rings
 * from asking.) */
#ifndef FS_BASE_KCOPY_H
#define FS_BASE_KCOPY_H

#include <stdbool.h>
#include <stddef.h>

/* May the kernel copy for us?  Decided once per process (a read of
 * /proc/self/status), then one load. */
bool fs_kcopy_usable(void);

/* Never again in this process (it confined itself with seccomp). */
void fs_kcopy_forbid(void);

/* Copy n bytes from src into our mapping at map: the bytes copied (n, or
 * fewer, or 0 when refused or failed: the caller copies the rest). */
size_t fs_kcopy_to_map(void *map, const void *src, size_t n);

/* Copy n bytes out of our mapping at map into dst: as fs_kcopy_to_map. */
size_t fs_kcopy_from_map(void *dst, const void *map, size_t n);

#endif
