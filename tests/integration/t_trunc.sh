#!/bin/bash
# t_trunc: discarding receives (trunc.py) on a connection already upgraded.
# Linux's TCP drops the bytes a recv with MSG_TRUNC asks for without copying
# them (HAProxy drains a connection it closes with recv(fd, NULL, INT_MAX,
# MSG_TRUNC | MSG_DONTWAIT)); on a fabric the call failed with EFAULT and
# dropped nothing.  Blocking, peeking, non-blocking and recvmsg variants
# must count and drop exactly what TCP does, and the stream go on exact.
# Again with a dpi hook at both ends, which must see the dropped bytes too
# (its pattern is in them, action log): it read them from the caller's
# buffer, NULL here, even on TCP.
. "$(dirname "$0")/lib.sh"
require_cmd python3
echo "bbbbbbbbbb" >"$IT_TMP/trunc.patterns"
for MODE in $(it_modes); do
 for how in plain hooks; do
  name="recv MSG_TRUNC discards as on TCP (NULL buffer, peek, HAProxy's drain, recvmsg)"
  hooks=
  [ $how = hooks ] && { name="$name (a dpi hook)"; hooks="dpi:patterns=$IT_TMP/trunc.patterns,action=log"; }
  if FABSOCK_HOOKS=$hooks held_pair_start trunc-$how "$IT_DIR/trunc.py"; then
    expect_fabric "$HELD_PORT" "$(fabric_expected)" 10 || { rc=1; detail="before: $FABRIC_DETAIL; "; }
  fi
  held_pair_end
  grep -qx 'discarded 5000 300/300 7000 2000' "$SERVER_LOG" || rc=1
  grep -qx 'last round trip exact' "$BG_LOG" || rc=1
  # 50 x 64 KiB echoed, 5000 dropped and 300 read: the drained b's start there
  if [ $how = hooks ] && [ "$MODE" != plain ] && [ "$MODE" != client ] &&
    ! grep -q "pattern 'bbbbbbbbbb' .* matched at recv offset 3282100;" "$SERVER_LOG"; then
    rc=1; detail+="the server's hook did not see the drained bytes; "
  fi
  tap_result $rc "$name [$MODE]" "${detail}$(grep -v fabsock "$SERVER_LOG" 2>/dev/null | tail -n 1)" "$BG_LOG" "$SERVER_LOG"
 done
done
it_done
