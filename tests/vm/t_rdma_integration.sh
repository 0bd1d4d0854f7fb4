#!/bin/bash
# Guest test: the integration tests built on tests/progs, run over the rdma fabric.  TAP.
#
# tests/integration/run.sh with IT_HOST=10.0.2.15 (the programs listen and connect there, where
# rxe0 is), FABSOCK_TRANSPORT=rdma and FABSOCK_EXPECT_FABRIC=rdma, in all four modes:
#   - plain: the reference result;
#   - client / server (one end preloaded): the same result, and the connection stays tcp (the
#     rdma connect finds no listener, or nobody asks) with a reason;
#   - both: the same result, and the connection went rdma (fabsock stat, checked by lib.sh).
# What that covers on rdma: threads sharing connections (mtclient), accept-then-fork
# (forksrv: rdma connections are downgraded with REVERT before the fork), exec with an inherited
# connection (execchild), a peer killed with SIGKILL mid-transfer (killpeer), half-close and
# full duplex with checksums (duplex), closing everything at once (closeall), and the inline
# hooks (t_hooks with FABSOCK_IT_HOOKS_BOTH=rdma: dpi close, clean streams, frame counts and
# oversized frames, every byte seen once and in order, on rdma).  (nbconnect and
# errnos compare against 127.0.0.1 transcripts; t_rdma_fabsock covers non-blocking connect), and
# epoll semantics on an rdma connection (epollsem: its completion channel in the epoll set).
# Emulated rdma is slow (tens of MB/s): the per-program timeout is raised, not the work cut.
#
# Environment: FABSOCK_LIB, FABSOCK_BIN (make check-vm); FABSOCK_VM_IT_TESTS (default above).
# vm-timeout: 1500
. "$(dirname "$0")/lib.sh"

if ! have_fabsock; then
  t_skip "integration tests over rdma" "FABSOCK_LIB / FABSOCK_BIN not set or not built (make check-vm sets them)"
  t_done
  exit 0
fi
build=$(cd "$(dirname "$FABSOCK_BIN")" && pwd)
if [ ! -x "$build/tests/progs/duplex" ]; then
  t_skip "integration tests over rdma" "tests/progs not built in $build (make check-vm builds them)"
  t_done
  exit 0
fi
here=$(cd "$(dirname "$0")" && pwd)
export IT_HOST=$VM_IP FABSOCK_TRANSPORT=rdma FABSOCK_EXPECT_FABRIC=rdma \
  FABSOCK_IT_PROGS=$build/tests/progs top_builddir=$build FABSOCK_IT_SCRIPT_TIMEOUT=900 \
  FABSOCK_IT_TIMEOUT=${FABSOCK_IT_TIMEOUT:-240} FABSOCK_IT_HOOKS_BOTH=rdma \
  FABSOCK_IT_DUPLEX_LOST_KNOWN="open bug: over rdma a sender or receiver thread still rarely (about once per CI run of 256 MiB each way) sleeps into the 20 ms safety bound with its wait already over; on shm none"
exec bash "$here/../integration/run.sh" ${FABSOCK_VM_IT_TESTS:-duplex mtclient forksrv execchild killpeer closeall epollsem hooks}
