#!/bin/bash
# t_cancel: threads cancelled (pthread_cancel) while they wait in recv() or
# send() (tests/progs/cancelio.c), against socat's echo (EXEC:cat,nofork).
# Each must end, and the connection go on for the others.  A thread
# cancelled asleep inside the library unwound with the connection's
# receive lock held, and the next recv on it waited for good
# (engine/cancel.h).  In [both] the connection is on the expected fabric
# when the threads are cancelled.  Again with a dpi hook configured, whose
# calls on TCP hold the direction's lock across the kernel's recv and send
# (a cleanup handler unlocks on the way out: fs_sockio_tcp_locked).
. "$(dirname "$0")/lib.sh"
require_cmd socat
require_progs cancelio
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-40}
echo "a pattern never sent" >"$IT_TMP/cancel.patterns"
for MODE in $(it_modes); do
 for how in plain hooks; do
  name="threads cancelled in recv and send; the connection goes on"
  hooks=
  [ $how = hooks ] && { name="$name (a dpi hook)"; hooks="dpi:patterns=$IT_TMP/cancel.patterns,action=close"; }
  port=$(pick_port) hold=$IT_TMP/cancel.$MODE.$how.hold
  rm -f "$hold"
  if ! FABSOCK_HOOKS=$hooks socat_server cancel-$how "$port" cat; then
    tap_not_ok "$name [$MODE]" "socat did not start ($SRV_STATUS)" "$SERVER_LOG"; stop_server; continue
  fi
  rc=0 detail=
  FABSOCK_HOOKS=$hooks start_bg_client cancel-$how "$PROGS/cancelio" -p "$port" -h "$hold"
  wait_log 'ready' "$BG_LOG" "$BG_PID"
  expect_fabric "$port" "$(fabric_expected)" 10 || { rc=1; detail="$FABRIC_DETAIL; "; }
  release_bg "$hold" || rc=1
  stop_server
  tap_result $rc "$name [$MODE]" "${detail}$(tail -n 1 "$BG_LOG" 2>/dev/null)" "$BG_LOG" "$SERVER_LOG"
 done
done
it_done
