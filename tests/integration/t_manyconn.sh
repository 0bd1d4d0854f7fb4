#!/bin/bash
# t_manyconn: many connections.
#   200 connections open at the same time (the client threads meet at a
#   barrier after connecting) against tests/progs/echosrv edge-triggered,
#   each sending 64 KiB and verifying its echo;
#   a burst of up to 1000 (as the fd limit allows) the same way: every one
#   of them upgrades at once, past the rendezvous listener's backlog and
#   the server's cap on handshakes in flight, and must reach the fabric;
#   churn: 4 threads x 25 short sequential connections (64 KiB each,
#   shutdown, EOF, close) against echosrv level- and edge-triggered.
. "$(dirname "$0")/lib.sh"
require_progs echosrv mtclient
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-40}

# case NAME SERVER_ARGS -- CLIENT_ARGS
one_case() {
  local name=$1 trig=$2
  shift 2
  local sargs=()
  [ "$trig" = et ] && sargs=(-e)
  if ! start_prog_server "echosrv-$trig" echosrv "${sargs[@]}"; then
    server_status; tap_not_ok "$name [$MODE]" "echosrv did not start ($SRV_STATUS)" "$SERVER_LOG"
    stop_server; return
  fi
  hold_args
  local out=$IT_TMP/manyconn.$trig.$RANDOM.$MODE.out rc detail
  run_held_client manyconn "$SERVER_PORT" "$out" "$PROGS/mtclient" -p "$SERVER_PORT" "$@" "${HOLD[@]}"
  rc=$?
  detail=$(grep -v '^$' "$out" | tail -n 1)
  [ $rc -eq 124 ] && detail="client timed out; $detail"
  server_check || { rc=1; detail="$SRV_DETAIL; $detail"; }
  tap_result $rc "$name [$MODE]" "$detail" "$out" "$SERVER_LOG"
  fabric_report "$name" "$FABRIC_STATUS"
  stop_server
}

# The burst needs about 3 fds per connection and process with the library
# (2 without): raise the soft limit where the hard one allows.
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null
burst=$(($(ulimit -n) / 5))
[ "$burst" -gt 1000 ] && burst=1000

for MODE in $(it_modes); do
  one_case "$burst concurrent connections x 64 KiB (a burst of upgrades), echosrv edge-triggered" et -t "$burst" -n 64K -c 16K -B
  one_case "200 concurrent connections x 64 KiB, echosrv edge-triggered" et -t 200 -n 64K -c 16K -B
  one_case "churn 4 threads x 25 sequential connections x 64 KiB, echosrv level-triggered" lt -t 4 -r 25 -n 64K
  one_case "churn 4 threads x 25 sequential connections x 64 KiB, echosrv edge-triggered" et -t 4 -r 25 -n 64K
done
it_done
