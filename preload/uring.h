/* io_uring seen (preload/uring.c): keep this process's connections on TCP. */
#ifndef FS_PRELOAD_URING_H
#define FS_PRELOAD_URING_H

/* Leaves errno as it found it. */
void fs_preload_uring_seen(void);

#include <stddef.h>

struct io_uring;
struct io_uring_params;

/* liburing's set-up entry points, as it declares them (its header may be
 * absent from the build machine). */
int io_uring_setup(unsigned entries, struct io_uring_params *p);
int io_uring_queue_init(unsigned entries, struct io_uring *ring, unsigned flags);
int io_uring_queue_init_params(unsigned entries, struct io_uring *ring, struct io_uring_params *p);
int io_uring_queue_init_mem(unsigned entries, struct io_uring *ring, struct io_uring_params *p, void *buf,
                            size_t size);

#endif
