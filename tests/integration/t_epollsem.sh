#!/bin/bash
# t_epollsem: epoll semantics on one connection that has moved to the fabric
# (tests/progs/epollsem: level- and edge-triggered, EPOLLONESHOT, DEL and
# re-ADD, one fd in two sets, nested epoll, EPOLLOUT, EPOLLEXCLUSIVE,
# EPOLLRDHUP, EOF; SO_RCVLOWAT in poll, select, epoll and recv,
# MSG_PEEK | MSG_WAITALL, and a sender refused early under SO_SNDBUF and the
# peer's SO_RCVBUF).  The preloaded transcript must equal the plain one (the
# kernel is the reference), and in [both] mode the connection must be on the
# fabric while the cases run: ${FABSOCK_EXPECT_FABRIC:-shm}, checked with
# `fabsock stat` at the program's pause.  One process tree (it forks its
# peer), so only the plain and both modes apply.
. "$(dirname "$0")/lib.sh"
require_progs epollsem

es_run() { # es_run OUT: one run; the transcript in OUT, "exit: N" appended
  local out=$1 ready=$IT_TMP/epollsem.ready go=$IT_TMP/epollsem.go port=$IT_TMP/epollsem.port
  rm -f "$ready" "$go" "$port"
  run_single "$PROGS/epollsem" -r "$ready" -g "$go" -P "$port" >"$out" 2>&1 &
  local pid=$! i
  for i in $(seq 150); do [ -e "$ready" ] && break; sleep 0.1; done
  FABRIC_RC=0 FABRIC_DETAIL=
  if [ "$MODE" = both ] && [ -n "$FABSOCK_LIB" ] && [ -e "$ready" ]; then
    local saved=${FABSOCK_EXPECT_FABRIC:-}
    FABSOCK_EXPECT_FABRIC=${FABSOCK_EXPECT_FABRIC:-shm}
    expect_fabric "$(cat "$port")" "$FABSOCK_EXPECT_FABRIC" 10
    FABRIC_RC=$?
    FABSOCK_EXPECT_FABRIC=$saved
  fi
  touch "$go"
  wait $pid
  echo "exit: $?" >>"$out"
}

es_run_ref() { local f=$IT_TMP/epollsem.ref.out; es_run "$f"; cat "$f"; }

for MODE in $(it_modes); do
  case $MODE in plain | both) ;; *) continue ;; esac
  out=$IT_TMP/epollsem.$MODE.out
  [ "$MODE" = plain ] || ensure_ref epollsem es_run_ref
  es_run "$out"
  rc=0
  grep -qx 'exit: 0' "$out" || rc=1
  if compare_ref epollsem "$out"; then detail="$(grep -c . "$out") lines as plain"
  else rc=1; detail="differs from plain: $DIFF"; fi
  if [ "$FABRIC_RC" != 0 ]; then rc=1; detail="$detail; not on the fabric: $FABRIC_DETAIL"
  elif [ -n "$FABRIC_DETAIL" ]; then detail="$detail; $FABRIC_DETAIL"; fi
  tap_result $rc "epoll semantics on an upgraded connection (LT, ET, ONESHOT, DEL/ADD, two sets, nested, EXCLUSIVE, RDHUP, RCVLOWAT, PEEK|WAITALL, SNDBUF) [$MODE]" "$detail" "$out"
done
it_done
