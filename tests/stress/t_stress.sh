#!/usr/bin/env bash
# TAP: the stress program plain and with both ends preloaded; the preloaded
# run must really use shm (checked with `fabsock stat --json` mid-run).
# STRESS_CONNS / STRESS_MIB (per connection) size it; defaults keep CI short.
set -u
b=${top_builddir:-.}
prog=$b/tests/stress/stress
lib=${FABSOCK_LIB:-$b/.libs/libfabsock.so}
bin=${FABSOCK_BIN:-$b/fabsock}
conns=${STRESS_CONNS:-1000}
mib=${STRESS_MIB:-1}
n=0 fail=0
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
echo "1..3"
for mode in plain both; do
  p=$(port)
  pre=; [ $mode = both ] && pre=$lib
  statdir=$(mktemp -d)
  LD_PRELOAD=$pre FABSOCK_STATDIR=$statdir timeout 300 "$prog" server "$p" 2>/dev/null &
  srv=$!
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && break; sleep 0.1; done
  LD_PRELOAD=$pre FABSOCK_STATDIR=$statdir timeout 300 "$prog" client "$p" "$conns" "$mib" $RANDOM > "$statdir/out" 2>&1 &
  cli=$!
  if [ $mode = both ]; then
    sleep 2
    FABSOCK_STATDIR=$statdir "$bin" stat --json > "$statdir/stat.json" 2>/dev/null
  fi
  wait $cli; rc=$?
  kill $srv 2>/dev/null; wait $srv 2>/dev/null
  n=$((n+1))
  if [ $rc -eq 0 ] && grep -q "^stress: ok" "$statdir/out"; then
    echo "ok $n - stress $mode: $(cat "$statdir/out" | tail -1)"
  else
    echo "not ok $n - stress $mode (rc $rc): $(tail -3 "$statdir/out" | tr '\n' ' ')"; fail=1
  fi
  if [ $mode = both ]; then
    n=$((n+1))
    shm=$(python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
print(sum(1 for p in d["processes"] for c in p["connections"] if c.get("fabric")=="shm"))' "$statdir/stat.json" 2>/dev/null || echo 0)
    if [ "${shm:-0}" -gt 0 ]; then echo "ok $n - stress both: $shm connection ends on shm mid-run"
    else echo "not ok $n - stress both: no connection on shm mid-run"; fail=1; fi
  fi
  rm -rf "$statdir"
done
exit $fail
