/* The shm fabric: a channel in a sealed memfd shared by two processes.
 *
 * Memory format v4 (FS_SHM_VERSION; v2: ring control blocks of ring format v2;
 * v3: fs_chan_ep grew rcvbuf, so ctl[] moved; v4: rings of format v3, whose
 * SKIP records an older consumer would take for corruption), host byte order:
 *
 *   offset 0            struct fs_shm_hdr (FS_SHM_HDR_SIZE bytes):
 *                         u32 magic "FSHM", u32 version, u32 ring_size,
 *                         u32 hdr_size, fs_chan_ep ep[2], fs_ring_ctl ctl[2]
 *   hdr_size            ring 0 data: connecting end -> accepting end
 *   hdr_size+ring_size  ring 1 data: accepting end -> connecting end
 *
 * The connecting end creates, sizes and seals the memfd (no grow, no shrink,
 * no further seals) and sends it with the rendezvous request; the accepting
 * end maps it only after checking seals, size and header, and never trusts
 * the header again afterwards (ring sizes are copied, records re-checked). */
#ifndef FS_FABRIC_SHM_SHM_H
#define FS_FABRIC_SHM_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "fabric/chan.h"

#define FS_SHM_MAGIC 0x4d485346u /* "FSHM" */
#define FS_SHM_VERSION 4
#define FS_SHM_HDR_SIZE 4096
#define FS_SHM_RING_MIN (64u << 10)
#define FS_SHM_RING_MAX (16u << 20)
#define FS_SHM_RING_DEFAULT (256u << 10)

struct fs_shm_hdr {
  uint32_t magic;
  uint32_t version;
  uint32_t ring_size;
  uint32_t hdr_size;
  struct fs_chan_ep ep[2];
  struct fs_ring_ctl ctl[2];
};

/* Connecting end: create the memfd and the channel.  my_efd is kept by the
 * channel (the caller still owns it: it is the connection's wake fd). */
int fs_shm_create(uint32_t ring_size, int my_efd, int *memfd_out, struct fs_chan **out);

/* How we wake the peer, as it sent it: its eventfd (bell_memfd -1), or
 * its epoll set's doorbell (efd and bell_memfd) and its slot there
 * (base/bell.h).  The calls below take the fds they keep or close
 * (setting them to -1 here); any left are the caller's to close.
 * budget_fd: the connection's fd, the application's count as the budget
 * reads it (base/fdreg.h), against which a doorbell new to this process
 * is kept (fs_bell_peer_get); -1: none. */
struct fs_shm_wake {
  int efd, bell_memfd;
  uint32_t slot;
  int budget_fd;
};

/* Connecting end: the accepting end's wake arrived; the channel is whole.
 * 0, -EMFILE (a new doorbell past the fd budget), or -EPROTO: not an
 * eventfd, not a doorbell. */
int fs_shm_set_peer(struct fs_chan *ch, struct fs_shm_wake *peer);

/* Accepting end: validate and map a received memfd. -EPROTO on anything
 * odd, -EMFILE or -ENOMEM for want of resources. */
int fs_shm_attach(int memfd, int my_efd, struct fs_shm_wake *peer, struct fs_chan **out);

/* The ring size to use: asked (policy's ring size: bytes, a power of two
 * within the bounds above) or else the default. */
uint32_t fs_shm_ring_size(uint32_t asked);

/* The ring size for a connection whose largest call so far moved io_max
 * bytes: at least fs_shm_ring_size(asked), and FS_SHM_RING_CALLS such calls
 * where that is more, up to FS_SHM_RING_BIG.  With one large write filling
 * the ring, writer and reader take turns instead of overlapping, and a 1 MiB
 * write through the 256 KiB default ran below kernel TCP (iperf3 -l 1M:
 * 0.79x).  A stream of 64 KiB writes ran 4x faster through 2 MiB than
 * through 256 KiB (33 vs 8.6 GB/s, same run; README): a ring that fits in a
 * core's L2 makes the reader fetch every line from the writer's cache, one
 * larger sends them by way of L3.  Pages are touched only as the traffic
 * needs them (a ring over 1 MiB is written in a window that grows with the
 * stream, fabric/ring.h: a page's first write costs a fault), and an idle
 * ring gives them back.
 * And where the peer's replies came in bursts (rx_burst: the most bytes
 * received between two of our sends, read in however many calls), a ring
 * that holds the largest, up to FS_SHM_RING_BURST.  Its sender then writes
 * a reply in one call: an aiohttp server sending 1 MiB replies to wrk (8
 * KiB reads, so a 256 KiB ring) wrote a quarter per call and buffered the
 * rest in Python, and ran at 0.35x of kernel TCP (1.5-2x with 1 MiB
 * rings).  No more than that: bigger rings cost nginx's 1 MiB replies
 * (sendfile) a quarter of their rate here (2 MiB rings 0.75x of 256 KiB
 * ones, 1 MiB ones the same), and mapping more than the rings use cost
 * more (README, "Rings sized by replies"). */
uint32_t fs_shm_ring_for(uint32_t asked, uint32_t io_max, uint32_t rx_burst);
#define FS_SHM_RING_CALLS 32
#define FS_SHM_RING_BIG (4u << 20)
#define FS_SHM_RING_BURST (1u << 20)

#endif
