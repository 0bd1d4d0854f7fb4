#!/bin/bash
# t_cancel: threads cancelled (pthread_cancel) while they wait in recv() or
# send() (tests/progs/cancelio.c), against socat's echo (EXEC:cat,nofork).
# Each must end, and the connection go on for the others.  A thread
# cancelled asleep inside the library unwound with the connection's
# receive lock held, and the next recv on it waited for good
# (engine/cancel.h).  In [both] the connection is on the expected fabric
# when the threads are cancelled.
. "$(dirname "$0")/lib.sh"
require_cmd socat
require_progs cancelio
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-40}
for MODE in $(it_modes); do
  name="threads cancelled in recv and send; the connection goes on"
  port=$(pick_port) hold=$IT_TMP/cancel.$MODE.hold
  rm -f "$hold"
  if ! socat_server cancel "$port" cat; then
    tap_not_ok "$name [$MODE]" "socat did not start ($SRV_STATUS)" "$SERVER_LOG"; stop_server; continue
  fi
  rc=0 detail=
  start_bg_client cancel "$PROGS/cancelio" -p "$port" -h "$hold"
  wait_log 'ready' "$BG_LOG" "$BG_PID"
  expect_fabric "$port" "$(fabric_expected)" 10 || { rc=1; detail="$FABRIC_DETAIL; "; }
  touch "$hold"
  wait "$BG_PID" || { rc=1; detail+="client failed; "; }
  it_forget "$BG_PID"; BG_PID=
  stop_server
  tap_result $rc "$name [$MODE]" "${detail}$(tail -n 1 "$BG_LOG" 2>/dev/null)" "$BG_LOG" "$SERVER_LOG"
done
it_done
