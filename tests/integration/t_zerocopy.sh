#!/bin/bash
# t_zerocopy: MSG_ZEROCOPY (zerocopy.py) on a connection already upgraded.
# Its completions come from the kernel's error queue; a send that went to a
# ring never got one, and the program waited for it.  Turning SO_ZEROCOPY on
# now brings the connection back to TCP, byte-exact (reason kernel-io).
# Against socat's echo (EXEC:cat,nofork); in [both] the connection is on
# the expected fabric before, and on TCP with that reason after.
. "$(dirname "$0")/lib.sh"
require_cmd socat
real_python
for MODE in $(it_modes); do
  name="MSG_ZEROCOPY after the upgrade: completions arrive, echoes intact"
  port=$(pick_port) hold=$IT_TMP/zerocopy.$MODE.hold
  rm -f "$hold"
  if ! socat_server zerocopy "$port" cat; then
    tap_not_ok "$name [$MODE]" "socat did not start ($SRV_STATUS)" "$SERVER_LOG"; stop_server; continue
  fi
  rc=0 detail=
  start_bg_client zerocopy "$IT_PYTHON" "$IT_DIR/zerocopy.py" "$port" "$hold"
  wait_log '^exchanged' "$BG_LOG" "$BG_PID"
  expect_fabric "$port" "$(fabric_expected)" 10 || { rc=1; detail="before: $FABRIC_DETAIL; "; }
  touch "$hold"
  wait "$BG_PID" || { rc=1; detail+="client failed; "; }
  it_forget "$BG_PID"; BG_PID=
  stop_server
  tap_result $rc "$name [$MODE]" "${detail}$(tail -n 1 "$BG_LOG" 2>/dev/null)" "$BG_LOG" "$SERVER_LOG"
done
it_done
