#!/bin/bash
# t_forksrv: tests/progs/forksrv accepts, forks, the child echoes and the
# parent closes its copy.  Clients: 20 sequential connections of 1 MiB,
# then 4 threads x 5 sequential connections of 256 KiB; every byte verified.
. "$(dirname "$0")/lib.sh"
require_progs forksrv mtclient
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-40} # quick clients: a hang must not eat the budget

for MODE in $(it_modes); do
  if ! start_prog_server forksrv forksrv; then
    server_status; tap_not_ok "forksrv [$MODE]" "forksrv did not start ($SRV_STATUS)" "$SERVER_LOG"
    stop_server; continue
  fi
  for shape in "1 20 1M" "4 5 256K"; do
    set -- $shape
    name="forksrv, $1 client thread(s) x $2 sequential connections x $3"
    out=$IT_TMP/forksrv.$1.$MODE.out
    run_client "$PROGS/mtclient" -p "$SERVER_PORT" -t "$1" -r "$2" -n "$3" >"$out" 2>&1
    rc=$?
    detail=$(grep -v '^$' "$out" | tail -n 1)
    server_check || { rc=1; detail="$SRV_DETAIL; $detail"; }
    [ $rc -eq 124 ] && detail="client timed out; $detail"
    if [ $rc -ne 0 ] && [ "$MODE" = both ] && [[ $detail == *"of 20 connections"* ]]; then
      # Known open bug: accept-then-fork with both ends preloaded loses about
      # one connection in twenty (the client sees EOF before any echo).
      tap_todo "$name [$MODE]" "open bug: accept-then-fork with both ends accelerated" "$detail"
    else
      tap_result $rc "$name [$MODE]" "$detail" "$out" "$SERVER_LOG"
    fi
  done
  stop_server
done
it_done
