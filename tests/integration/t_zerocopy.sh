#!/bin/bash
# t_zerocopy: the kernel's error queue (zerocopy.py) on a connection already
# upgraded: MSG_ZEROCOPY completions, software transmit timestamps.  A send
# that went to a ring never got its message there, and the program waited
# for it.  Turning SO_ZEROCOPY or SO_TIMESTAMPING on now brings the
# connection back to TCP, byte-exact (reason kernel-io, engine/sockopt.h).
# Against socat's echo (EXEC:cat,nofork); in [both] the connection is on
# the expected fabric before, and on TCP with that reason after.
. "$(dirname "$0")/lib.sh"
require_cmd socat
real_python
for MODE in $(it_modes); do
 for how in zerocopy txstamp; do
  name="$how after the upgrade: the error queue has each send's message, echoes intact"
  port=$(pick_port) hold=$IT_TMP/zerocopy.$MODE.$how.hold
  rm -f "$hold"
  if ! socat_server $how "$port" cat; then
    tap_not_ok "$name [$MODE]" "socat did not start ($SRV_STATUS)" "$SERVER_LOG"; stop_server; continue
  fi
  rc=0 detail=
  start_bg_client $how "$IT_PYTHON" "$IT_DIR/zerocopy.py" $how "$port" "$hold"
  wait_log '^exchanged' "$BG_LOG" "$BG_PID"
  expect_fabric "$port" "$(fabric_expected)" 10 || { rc=1; detail="before: $FABRIC_DETAIL; "; }
  release_bg "$hold" || rc=1
  stop_server
  tap_result $rc "$name [$MODE]" "${detail}$(tail -n 1 "$BG_LOG" 2>/dev/null)" "$BG_LOG" "$SERVER_LOG"
 done
done
it_done
