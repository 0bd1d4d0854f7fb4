/* CUDA device memory through the socket engine.
 *
 * A send/recv whose buffers are device memory is staged through the gpu
 * module's pinned host buffers, chunk by chunk, and each host chunk takes
 * the normal path: the connection's fabric (or TCP), its hooks, its
 * accounting.  Plain kernel TCP would fail such a call with EFAULT.
 * The check costs one cached load per call when no CUDA driver is loaded. */
#ifndef FS_ENGINE_GPUIO_H
#define FS_ENGINE_GPUIO_H

#include <stdbool.h>

#include "engine/conn.h"
#include "engine/io.h"
#include "gpu/gpu.h"

bool fs_gpuio_device_slow(const struct fs_io *io);

/* True if any buffer of io is device memory (inline: no call while no
 * driver is in the process). */
static inline bool fs_gpuio_device(const struct fs_io *io)
{
  return !fs_gpu_surely_host() && fs_gpuio_device_slow(io);
}

/* The call, its device buffers staged chunk by chunk; each host chunk goes
 * through chunk (the engine's fs_sock_send or fs_sock_recv). */
ssize_t fs_gpuio_send(struct fs_conn *c, int fd, struct fs_io *io, fs_io_fn chunk);
ssize_t fs_gpuio_recv(struct fs_conn *c, int fd, struct fs_io *io, fs_io_fn chunk);

#endif
