#!/bin/bash
# t_mtclient: 8 threads, each on its own connection, send 4 MiB of a
# checksummed stream to tests/progs/echosrv and verify the echo byte for
# byte; echosrv level-triggered (default) and edge-triggered (-e).
. "$(dirname "$0")/lib.sh"
require_progs echosrv mtclient
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-40} # quick clients: a hang must not eat the budget

for MODE in $(it_modes); do
  for trig in lt et; do
    name="mtclient 8 threads x 4 MiB, echosrv $trig"
    args=()
    [ "$trig" = et ] && args=(-e)
    if ! start_prog_server "echosrv-$trig" echosrv "${args[@]}"; then
      server_status; tap_not_ok "$name [$MODE]" "echosrv did not start ($SRV_STATUS)" "$SERVER_LOG"
      stop_server; continue
    fi
    held_mtclient "$name" mtclient "$SERVER_PORT" "$IT_TMP/mtclient-$trig.$MODE.out" -t 8 -n 4M
    fabric_report "$name" "$FABRIC_STATUS"
    stop_server
  done
done
it_done
