#!/bin/bash
# t_closeall: the application closes every descriptor from 3 up (a close()
# loop to 65535, closefrom(3), close_range(3, ~0U, 0)) or marks them all
# close-on-exec (close_range CLOSE_RANGE_CLOEXEC) while it has a live
# connection in an epoll set; afterwards the old fd must be gone (or, for
# CLOEXEC, still work) and a new connection must do a verified round trip.
. "$(dirname "$0")/lib.sh"
require_progs echosrv closeall
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-20} # quick clients: a hang must not eat the budget
export FABSOCK_IT_POLL_MS=${FABSOCK_IT_POLL_MS:-8000} # a stalled poll() reports before the timeout

for MODE in $(it_modes); do
  if ! start_prog_server echosrv echosrv -e; then
    server_status; tap_not_ok "closeall [$MODE]" "echosrv did not start ($SRV_STATUS)" "$SERVER_LOG"
    stop_server; continue
  fi
  for how in loop closefrom close_range cloexec; do
    name="close all fds ($how), then a new connection"
    out=$IT_TMP/closeall.$how.$MODE.out
    run_client "$PROGS/closeall" -p "$SERVER_PORT" -m "$how" >"$out" 2>&1
    rc=$?
    detail=$(grep -v '^$' "$out" | tail -n 1)
    [ $rc -eq 124 ] && detail="timed out; $detail"
    tap_result $rc "$name [$MODE]" "$detail" "$out"
  done
  server_check || tap_not_ok "closeall echo server [$MODE]" "$SRV_DETAIL" "$SERVER_LOG"
  stop_server
done
it_done
