#!/bin/bash
# t_aiohttp: Debian's aiohttp (python3-aiohttp: asyncio, one event loop,
# non-blocking sends that buffer in Python what the socket does not take)
# answers 1 MiB replies from memory.  One curl fetches it 8 times over one
# keep-alive connection: every copy intact, and in [both] the connection
# went over ${FABSOCK_EXPECT_FABRIC:-the expected fabric}.  Then wrk -c4
# for 2 s on keep-alive connections: no socket error, no non-2xx reply.
# (Its replies through rings sized by wrk's 8 KiB reads alone ran at 0.35x
# of kernel TCP: fabric/shm/shm.h, fs_shm_ring_for.)
. "$(dirname "$0")/lib.sh"
require_cmd curl wrk
PY=/usr/bin/python3 # Debian's, which has the package (not a pyenv shim)
[ -x "$PY" ] && "$PY" -c 'import aiohttp' 2>/dev/null || skip_all "python3-aiohttp not installed"
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-30}

mkdir -p "$IT_TMP/aio"
make_random "$IT_TMP/aio/blob" 1
want=$(sha "$IT_TMP/aio/blob")

for MODE in $(it_modes); do
  name="aiohttp: 8 replies of 1 MiB on one keep-alive connection, sha256"
  port=$(pick_port)
  start_server aiohttp "$PY" "$IT_DIR/aioblob.py" "$IT_TMP/aio/blob" "$port"
  if ! wait_port "$port" "$SERVER_PID" 30; then
    server_status; tap_not_ok "$name [$MODE]" "aiohttp did not start ($SRV_STATUS)" "$SERVER_LOG"; stop_server; continue
  fi
  out=$IT_TMP/aio/got.$MODE
  args=()
  for i in 1 2 3 4 5 6 7 8; do args+=(-o "$out.$i" "http://127.0.0.1:$port/blob"); done
  slow=()
  fabric_enabled && slow=(--limit-rate 8M) # long enough for `fabsock stat` to see it
  fabric_watch_start "$port"
  run_client curl -sS --fail --max-time 25 "${slow[@]}" "${args[@]}" 2>"$out.err"
  rc=$?
  fabric_watch_stop; fst=$?
  detail="8 x sha256 ok"
  if [ $rc -ne 0 ]; then
    detail="curl exit $rc: $(head -c 200 "$out.err")"
  else
    for i in 1 2 3 4 5 6 7 8; do
      [ "$(sha "$out.$i")" = "$want" ] && continue
      rc=1; detail="reply $i: sha256 differs ($(stat -c %s "$out.$i" 2>/dev/null) bytes)"; break
    done
  fi
  server_check || { rc=1; detail="$SRV_DETAIL; $detail"; }
  tap_result $rc "$name [$MODE]" "$detail" "$out.err" "$SERVER_LOG"
  fabric_report "$name" $fst
  rm -f "$out".*

  name="aiohttp: wrk -t1 -c4 2 s of 1 MiB replies, keep-alive"
  run_client wrk -t1 -c4 -d2s "http://127.0.0.1:$port/blob" >"$out.wrk" 2>&1
  rc=$?
  n=$(awk '/requests in/ {print $1}' "$out.wrk")
  detail="${n:-no} requests; $(grep -E 'Socket errors|Non-2xx' "$out.wrk" | tr '\n' ' ')"
  { [ $rc -eq 0 ] && [ "${n:-0}" -gt 0 ] && ! grep -qE 'Socket errors|Non-2xx' "$out.wrk"; } || rc=1
  server_check || { rc=1; detail="$SRV_DETAIL; $detail"; }
  tap_result $rc "$name [$MODE]" "$detail" "$out.wrk" "$SERVER_LOG"
  stop_server
done
it_done
