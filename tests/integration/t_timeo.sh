#!/bin/bash
# t_timeo: SO_RCVTIMEO on an accelerated connection ends a blocking recv()
# with EAGAIN after its time, as on TCP (tests/integration/timeo.py): the
# listener's value inherited by the accepted socket, one set through the
# library, one set by a fork child that the parent's copy never saw (the
# library keeps the timeouts where the process knows them and asks the
# kernel after a fork: engine/wait.h), and cleared again.  Each case's
# peer sends a byte 1.5 s after it (4.5 s after the 3 s one): a wait that ignores the timeout returns
# that byte instead of EAGAIN.  The bound checked is the kernel's own (the
# wait lasts at least the timeout), not the machine's speed.
. "$(dirname "$0")/lib.sh"
require_cmd python3
real_python
for MODE in $(it_modes); do
  name="SO_RCVTIMEO: inherited, set, set by a fork child, cleared"
  pf=$IT_TMP/timeo.$MODE.port hold=$IT_TMP/timeo.$MODE.hold
  rm -f "$pf" "$hold"
  start_server timeo "$IT_PYTHON" "$IT_DIR/timeo.py" server "$pf" "$hold"
  rc=0 detail=
  if ! wait_file "$pf" "$SERVER_PID" 20; then
    server_status; rc=1; detail="server did not start ($SRV_STATUS); "
  else
    port=$(cat "$pf")
    start_bg_client timeo "$IT_PYTHON" "$IT_DIR/timeo.py" client "$port"
    it_exchanged_fabric "$port"
  fi
  it_release_reap "$hold"
  for c in inherited set forked cleared; do
    line=$(grep -m1 "^$c ok" "$SERVER_LOG") || { rc=1; line="$c: not ok"; }
    detail+="${line#* ok }; "
  done
  tap_result $rc "$name [$MODE]" "${detail%; } (server exit $SRC)" "$SERVER_LOG" "$BG_LOG"
done
it_done
