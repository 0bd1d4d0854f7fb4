/* A connection of ours on a real shm channel, for the engine's unit tests
 * (header-only): sv[0] is its fd (the TCP socket's stand-in, sv[1] the
 * peer's side of it), `a` our end, `b` the peer's (same process), `mine`
 * our wake eventfd, `theirs` the peer's. */
#ifndef TESTS_UNIT_PAIR_H
#define TESTS_UNIT_PAIR_H

#include <check.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include "engine/conn.h"
#include "engine/fdtab.h"
#include "fabric/chan.h"
#include "fabric/shm/shm.h"

struct pair {
  int sv[2], mine, theirs, memfd;
  struct fs_chan *a, *b;
  struct fs_conn *c;
};

static inline void pair_new(struct pair *p)
{
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p->sv), 0);
  p->mine = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  p->theirs = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ck_assert_int_ge(p->mine, 0);
  ck_assert_int_ge(p->theirs, 0);
  ck_assert_int_eq(fs_shm_create(fs_shm_ring_size(0), p->mine, &p->memfd, &p->a), 0);
  ck_assert_int_eq(fs_shm_set_peer(p->a, &(struct fs_shm_wake){ p->theirs, -1, 0, -1 }), 0);
  ck_assert_int_eq(fs_shm_attach(p->memfd, p->theirs, &(struct fs_shm_wake){ p->mine, -1, 0, -1 }, &p->b), 0);
  p->c = fs_conn_new(p->sv[0], AF_INET);
  ck_assert_ptr_nonnull(p->c);
  p->c->wake_fd = p->mine;
  p->c->tx_flow = p->c->rx_flow = FS_FLOW_FABRIC;
  p->c->chan = p->a;
  ck_assert_int_eq(fs_fdtab_install(p->sv[0], p->c), 0);
}

#endif
