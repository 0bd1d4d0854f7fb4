#!/bin/bash
# t_fastopen: a client that connects with sendto(MSG_FASTOPEN) (TCP Fast
# Open: the send is the connect; fastopen.py), echoed 3.2 MiB checked, then
# in [both] on the expected fabric at both ends.  The library never saw the
# connect: the socket stayed "unconnected", never upgraded.
. "$(dirname "$0")/lib.sh"
require_cmd python3
for MODE in $(it_modes); do
  name="TCP Fast Open client (sendto MSG_FASTOPEN): echoed intact, upgraded"
  if held_pair_start fastopen "$IT_DIR/fastopen.py"; then
    expect_fabric "$HELD_PORT@1000000" "$(fabric_expected)" 10 || { rc=1; detail="$FABRIC_DETAIL; "; }
  fi
  held_pair_end
  grep -qx 'served 2' "$SERVER_LOG" || rc=1
  tap_result $rc "$name [$MODE]" "${detail}$(tail -n 1 "$BG_LOG" 2>/dev/null)" "$BG_LOG" "$SERVER_LOG"
done
it_done
