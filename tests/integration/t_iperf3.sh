#!/bin/bash
# t_iperf3: iperf3 -s (one test, then exit) and iperf3 -c -t 3 -J; the JSON
# report must have no error and a non-zero received bandwidth.
. "$(dirname "$0")/lib.sh"
require_cmd iperf3 python3
real_python

for MODE in $(it_modes); do
  name="iperf3 3 s, non-zero bandwidth"
  port=$(pick_port)
  start_server iperf3 iperf3 -s -1 -p "$port" -B 127.0.0.1
  if ! wait_port "$port" "$SERVER_PID" 20; then
    server_status; tap_not_ok "$name [$MODE]" "iperf3 -s did not start ($SRV_STATUS)" "$SERVER_LOG"; stop_server; continue
  fi
  out=$IT_TMP/iperf3.$MODE.json
  fabric_watch_start "$port@1048576" # the data connection; the control one stays small
  run_client iperf3 -c 127.0.0.1 -p "$port" -t 3 -J >"$out" 2>"$out.err"
  rc=$?
  fabric_watch_stop; fst=$?
  res=$("$IT_PYTHON" - "$out" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("bad JSON: %s" % e); sys.exit(1)
if d.get("error"):
    print("iperf3 error: %s" % d["error"]); sys.exit(1)
try:
    rx = d["end"]["sum_received"]["bits_per_second"]
    tx = d["end"]["sum_sent"]["bits_per_second"]
except KeyError as e:
    print("no end.sum_received/sum_sent: %s" % e); sys.exit(1)
print("received %.2f Gbit/s, sent %.2f Gbit/s" % (rx / 1e9, tx / 1e9))
sys.exit(0 if rx > 0 and tx > 0 else 1)
PY
)
  prc=$?
  if [ $rc -ne 0 ]; then detail="iperf3 -c exit $rc; $res"; elif [ $prc -ne 0 ]; then rc=1; detail=$res; else detail=$res; fi
  tap_result $rc "$name [$MODE]" "$detail" "$out.err" "$SERVER_LOG"
  fabric_report "$name" $fst
  stop_server
done
it_done
