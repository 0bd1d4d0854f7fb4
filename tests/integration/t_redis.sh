#!/bin/bash
# t_redis: redis-server on a free port (no persistence); redis-cli SET/GET
# of a 64 KiB binary value (NULs, CR/LF) must round-trip exactly; then
# redis-benchmark -n 20000 -c 50 -t get,set must complete with no error
# (requests/s reported in the TAP comment).  With the server preloaded,
# `fabsock stat` must name it as ps does: redis-server, though on Debian
# the binary is a symlink to redis-check-rdb.
. "$(dirname "$0")/lib.sh"
require_cmd redis-server redis-cli redis-benchmark

{ head -c 32768 /dev/urandom; printf 'a\r\nb\0c\r\n\0\0*3\r\n$3\r\nSET\r\n'; head -c 32738 /dev/urandom; } >"$IT_TMP/value"
want=$(sha "$IT_TMP/value")
vlen=$(stat -c %s "$IT_TMP/value")

for MODE in $(it_modes); do
  start_redis || continue
  port=$REDIS_PORT

  if preloaded server && [ -n "$FABSOCK_LIB" ]; then
    name="fabsock stat names redis-server as ps does"
    real_python
    got=$(timeout 10 "$FABSOCK_BIN" stat --json 2>&1 | "$IT_PYTHON" -c '
import json, sys
doc = json.load(sys.stdin)
for p in doc.get("processes", []):
    if any(str(c.get("local", "")).endswith(":" + sys.argv[1]) for c in p.get("connections", [])):
        print(p["pid"], p["program"])
' "$port" 2>&1 | head -n 1)
    pid=${got%% *} prog=${got#* }
    comm=$(ps -o comm= -p "$pid" 2>/dev/null)
    if [ -n "$comm" ] && [ "$prog" = "$comm" ] && [ "$prog" = redis-server ]; then tap_ok "$name [$MODE]" "$got"
    else tap_not_ok "$name [$MODE]" "stat: '$got', ps: '$comm'"; fi
  fi

  name="redis-cli SET/GET ${vlen}-byte binary value"
  out=$IT_TMP/redis.$MODE
  key="fabsock:$MODE:$RANDOM"
  rc=0
  set_out=$(run_client redis-cli -p "$port" -x SET "$key" <"$IT_TMP/value" 2>&1) || rc=1
  strlen=$(run_client redis-cli -p "$port" STRLEN "$key" 2>&1) || rc=1
  run_client redis-cli -p "$port" --raw GET "$key" >"$out" 2>"$out.err" || rc=1
  head -c -1 "$out" >"$out.value" # redis-cli adds a newline
  if [ $rc -ne 0 ] || [ "$set_out" != OK ]; then rc=1; detail="SET said '$set_out' $(head -c 200 "$out.err")"
  elif [ "$strlen" != "$vlen" ]; then rc=1; detail="STRLEN $strlen, expected $vlen"
  elif [ "$(sha "$out.value")" != "$want" ]; then rc=1; detail="GET returned different bytes ($(stat -c %s "$out.value") bytes)"
  else detail="sha256 ok"; fi
  tap_result $rc "$name [$MODE]" "$detail" "$out.err" "$SERVER_LOG"

  name="redis-benchmark -n 20000 -c 50 -t get,set"
  fabric_watch_start "$port" 50 # its 50 clients (and short ones of its own)
  run_client redis-benchmark -p "$port" -n 20000 -c 50 -t get,set --csv >"$out.bench" 2>"$out.bench.err"
  rc=$?
  fabric_watch_stop; fst=$?
  set_rps=$(awk -F'"' '$2 == "SET" {print $4}' "$out.bench")
  get_rps=$(awk -F'"' '$2 == "GET" {print $4}' "$out.bench")
  if [ $rc -ne 0 ]; then detail="exit $rc: $(head -c 200 "$out.bench.err")"
  elif grep -qi 'error' "$out.bench" "$out.bench.err"; then rc=1; detail="errors: $(grep -hi -m1 error "$out.bench" "$out.bench.err")"
  elif [ -z "$set_rps" ] || [ -z "$get_rps" ]; then rc=1; detail="no SET/GET result in the output"
  else detail="SET ${set_rps} rps, GET ${get_rps} rps"; fi
  server_check || { rc=1; detail="$SRV_DETAIL; $detail"; }
  tap_result $rc "$name [$MODE]" "$detail" "$out.bench" "$out.bench.err" "$SERVER_LOG"
  fabric_report "$name" $fst
  stop_server
done
it_done
