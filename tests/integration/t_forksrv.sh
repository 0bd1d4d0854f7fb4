#!/bin/bash
# t_forksrv: tests/progs/forksrv accepts, forks, the child echoes and the
# parent closes its copy.  Clients: 20 sequential connections of 1 MiB,
# then 4 threads x 5 sequential connections of 256 KiB, then 4 threads x 25
# short connections of 16 KiB written 1 KiB at a time, so that the 4 KiB
# upgrade threshold is crossed (and the rendezvous runs) right around the
# server's fork; every byte verified.  The last shape is the one that caught
# a channel attached by the parent's agent during fork() (the client read
# EOF before any echo) in every run.
. "$(dirname "$0")/lib.sh"
require_progs forksrv mtclient
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-40} # quick clients: a hang must not eat the budget

for MODE in $(it_modes); do
  if ! start_prog_server forksrv forksrv; then
    server_status; tap_not_ok "forksrv [$MODE]" "forksrv did not start ($SRV_STATUS)" "$SERVER_LOG"
    stop_server; continue
  fi
  for shape in "1 20 1M 64K" "4 5 256K 64K" "4 25 16K 1K"; do
    set -- $shape
    name="forksrv, $1 client thread(s) x $2 sequential connections x $3"
    [ "$4" = 64K ] || name="$name in $4 writes"
    out=$IT_TMP/forksrv.$1.$2.$MODE.out
    run_client "$PROGS/mtclient" -p "$SERVER_PORT" -t "$1" -r "$2" -n "$3" -c "$4" >"$out" 2>&1
    rc=$?
    detail=$(grep -v '^$' "$out" | tail -n 1)
    server_check || { rc=1; detail="$SRV_DETAIL; $detail"; }
    [ $rc -eq 124 ] && detail="client timed out; $detail"
    tap_result $rc "$name [$MODE]" "$detail" "$out" "$SERVER_LOG"
  done
  stop_server
done
it_done
