#!/bin/bash
# t_oob: urgent data (oob.py) on a connection already upgraded.  A fabric
# has no urgent byte: send(MSG_OOB) failed with EOPNOTSUPP where TCP sends
# one.  It now brings the connection back to TCP first, byte-exact, and the
# byte goes as TCP sends it (reason kernel-io); the server sees it through
# select's exceptional condition and recv(MSG_OOB), and answers.  Then with
# a client thread already asleep in recv for the answer: the send must not
# wait for it (bounded: it sends, or fails with EOPNOTSUPP and the stream
# goes on), never a hang.
. "$(dirname "$0")/lib.sh"
require_cmd python3
real_python
for MODE in $(it_modes); do
 for how in alone reader; do
  name="an urgent byte after the upgrade reaches the server as on TCP"
  [ $how = reader ] && name="an urgent byte while a thread waits in recv: no hang"
  pf=$IT_TMP/oob.$MODE.$how.port hold=$IT_TMP/oob.$MODE.$how.hold
  rm -f "$pf" "$hold"
  start_server oob-$how "$IT_PYTHON" "$IT_DIR/oob.py" server "$pf"
  rc=0 detail=
  if ! wait_file "$pf" "$SERVER_PID" 20; then
    server_status; rc=1; detail="server did not start ($SRV_STATUS); "
  else
    args=(); [ $how = reader ] && args=(reader)
    start_bg_client oob-$how "$IT_PYTHON" "$IT_DIR/oob.py" client "$(cat "$pf")" "$hold" "${args[@]}"
    wait_log '^exchanged' "$BG_LOG" "$BG_PID"
    expect_fabric "$(cat "$pf")" "$(fabric_expected)" 10 || { rc=1; detail="before: $FABRIC_DETAIL; "; }
    release_bg "$hold" || rc=1
  fi
  wait "$SERVER_PID"; src=$?; it_forget "$SERVER_PID"
  [ "$src" -eq 0 ] || { rc=1; detail+="server exit $src; "; }
  if [ $how = alone ] || ! grep -q 'refused' "$BG_LOG"; then
    grep -q '^urgent bytes: 1$' "$SERVER_LOG" || rc=1
  fi
  tap_result $rc "$name [$MODE]" "${detail}$(tail -n 1 "$BG_LOG" 2>/dev/null)" "$BG_LOG" "$SERVER_LOG"
 done
done
it_done
