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
for MODE in $(it_modes); do
 for how in alone reader; do
  name="an urgent byte after the upgrade reaches the server as on TCP"
  [ $how = reader ] && name="an urgent byte while a thread waits in recv: no hang"
  args=(); [ $how = reader ] && args=(reader)
  if held_pair_start oob-$how "$IT_DIR/oob.py" "${args[@]}"; then
    expect_fabric "$HELD_PORT" "$(fabric_expected)" 10 || { rc=1; detail="before: $FABRIC_DETAIL; "; }
  fi
  held_pair_end
  if [ $how = alone ] || ! grep -q 'refused' "$BG_LOG"; then
    grep -q '^urgent bytes: 1$' "$SERVER_LOG" || rc=1
  fi
  tap_result $rc "$name [$MODE]" "${detail}$(tail -n 1 "$BG_LOG" 2>/dev/null)" "$BG_LOG" "$SERVER_LOG"
 done
done
it_done
