#!/bin/bash
# t_peerfate: the connecting end alone asks for the upgrade; when it gives
# up for good, the accepted end never hears of it and its own table says
# `pending` for good.  `fabsock stat` shows such an end with its peer's
# reason (peer_reason in JSON, "peer:REASON" in the table) when the peer's
# table is on this host (tools/cmd_stat.c).  peerfate.py's client gives up
# by forking with the socket (rsync's receiver and generator) or by its own
# FABSOCK_TRANSPORT=tcp; the server listens on 127.0.0.1, then on a
# dual-stack "::" (its end's addresses IPv4-mapped, the client's plain
# IPv4).  3.2 MiB echoed each way, checked.  [both]: the accepted end reads
# pending with the peer's reason, and the connecting end(s) that reason;
# [server]: no peer table, no peer reason invented; [client]: the
# connecting end's reason.
. "$(dirname "$0")/lib.sh"
require_cmd python3
real_python
# peer_fate PORT: "DIR/REASON/PEER_REASON" for each connection on PORT, sorted.
peer_fate() {
  timeout 10 "$FABSOCK_BIN" stat --json 2>/dev/null | "$IT_PYTHON" -c '
import sys
sys.path.insert(0, sys.argv[2])
from stat_json import connections, read_doc
doc = read_doc()
for p, c in connections(doc, sys.argv[1]) if doc else []:
    print("%s/%s/%s" % (c.get("dir"), c.get("reason"), c.get("peer_reason") or "-"))
' "$1" "$IT_DIR" 2>&1 | sort | tr '\n' ' '
}
for MODE in $(it_modes); do
 for how in fork policy; do
  for v6 in 0 1; do
   [ $v6 = 1 ] && ! have_ipv6 && { tap_skip "peer fate $how v6 [$MODE]" "no IPv6 on lo"; continue; }
   name="the connecting end gives up ($how), the accepted end shows its reason"
   [ $v6 = 1 ] && name+=" (dual-stack listener)"
   case $MODE in
     both) want="accept/pending/$how connect/$how/-" ;;
     server) want="accept/pending/-" ;;
     client) want="connect/$how/-" ;;
     *) want= ;;
   esac
   [ $how = fork ] && [ $MODE != server ] && want=${want/connect\/$how\/-/connect\/$how\/- connect\/$how\/-}
   # Upgrading at connect (FABSOCK_IT_UPGRADE=0), the client's rendezvous may get its reply
   # before the fork and give the channel up just after it: the server attached and reads
   # rejected, with the same peer reason.  Never at the default threshold (the fork comes first).
   # [client]: its rendezvous may conclude before the fork that the server has no
   # libfabsock, a reason that the fork does not change.
   alt=
   [ $how = fork ] && [ $MODE = both ] && [ -n "${FABSOCK_IT_UPGRADE:-}" ] && alt=${want/accept\/pending\//accept\/rejected\/}
   [ $how = fork ] && [ $MODE = client ] && [ -n "${FABSOCK_IT_UPGRADE:-}" ] &&
     alt="connect/peer-no-fabsock/- connect/peer-no-fabsock/-"
   export PEERFATE_V6=$v6
   seen=
   if held_pair_start peerfate.$how.$v6 "$IT_DIR/peerfate.py" $how && [ -n "$want" ] && [ -x "$FABSOCK_BIN" ]; then
     for i in $(seq 50); do
       seen=$(peer_fate "$HELD_PORT")
       [ "$seen" = "$want " ] && break
       [ -n "$alt" ] && [ "$seen" = "$alt " ] && break
       sleep 0.2
     done
     [ "$seen" = "$want " ] || { [ -n "$alt" ] && [ "$seen" = "$alt " ]; } || { rc=1; detail+="stat: $seen(want $want); "; }
   fi
   held_pair_end
   grep -qx 'served 1' "$SERVER_LOG" || { rc=1; detail+="server: $(tail -n 1 "$SERVER_LOG"); "; }
   tap_result $rc "$name [$MODE]" "${detail}$(grep '^exchanged' "$BG_LOG" 2>/dev/null | tail -n 1)" "$BG_LOG" "$SERVER_LOG"
  done
 done
done
unset PEERFATE_V6
it_done
