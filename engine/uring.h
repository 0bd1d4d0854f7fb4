/* A liburing ring's submissions and registered files, looked at before the
 * kernel takes them (preload/uring.c follows rings that liburing made
 * without a kernel poller).  Each tracked socket one names goes back to TCP
 * for good, byte-exact (kernel-io), as for splice; one an IORING_OP_CLOSE
 * names is forgotten as close() forgets it.  The rest of the process keeps
 * its fabrics: MariaDB's InnoDB reads and writes its files through a ring,
 * and the blanket rule (engine/sock.h, fs_sock_kernel_only: io-uring) kept
 * every one of its connections on TCP. */
#ifndef FS_ENGINE_URING_H
#define FS_ENGINE_URING_H

#include <linux/io_uring.h>

/* The SQEs at ring positions [from, to) (at most mask + 1 of them) of an
 * array of 64-byte SQEs (shift 1: 128-byte ones). */
void fs_uring_sqes(const struct io_uring_sqe *sqes, unsigned shift, unsigned mask, unsigned from, unsigned to);

/* Descriptors about to be registered with a ring (-1: an empty slot). */
void fs_uring_files(const int *fds, unsigned n);

/* io_uring_register(2) as liburing passes it on: the file registrations. */
void fs_uring_register(unsigned opcode, const void *arg, unsigned nr);

#endif
