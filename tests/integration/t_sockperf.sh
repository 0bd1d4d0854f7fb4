#!/bin/bash
# t_sockperf: sockperf server --tcp and sockperf ping-pong --tcp for 2 s:
# must complete and report a latency summary.  --mps: sockperf sizes its
# table of send times for 600K messages/s unless told a rate, and a round
# trip on shm (~0.5 us when both CPUs share a core) outruns that: it then
# stops with "_seqN > m_maxSequenceNo".  4M/s is far above any rate here
# (it is a cap, not a target) and costs it ~130 MB.
. "$(dirname "$0")/lib.sh"
require_cmd sockperf

for MODE in $(it_modes); do
  name="sockperf ping-pong --tcp 2 s"
  port=$(pick_port)
  start_server sockperf sockperf server --tcp -i 127.0.0.1 -p "$port"
  if ! wait_port "$port" "$SERVER_PID" 20; then
    server_status; tap_not_ok "$name [$MODE]" "sockperf server did not start ($SRV_STATUS)" "$SERVER_LOG"; stop_server; continue
  fi
  out=$IT_TMP/sockperf.$MODE.out
  fabric_watch_start "$port"
  run_client sockperf ping-pong --tcp -i 127.0.0.1 -p "$port" -t 2 --mps 4000000 >"$out" 2>&1
  rc=$?
  fabric_watch_stop; fst=$?
  lat=$(sed -n 's/.*Summary: Latency is \([0-9.]* usec\).*/\1/p' "$out" | head -n 1)
  if [ $rc -ne 0 ]; then detail="sockperf exit $rc"
  elif [ -z "$lat" ]; then rc=1; detail="no latency summary"
  elif grep -qi 'error' "$out"; then rc=1; detail="$(grep -i -m1 error "$out")"
  else detail="latency $lat"; fi
  server_check || { rc=1; detail="$SRV_DETAIL; $detail"; }
  tap_result $rc "$name [$MODE]" "$detail" "$out" "$SERVER_LOG"
  fabric_report "$name" $fst
  stop_server
done
it_done
