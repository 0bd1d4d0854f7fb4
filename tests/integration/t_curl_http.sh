#!/bin/bash
# t_curl_http: curl downloads a 20 MiB random file from `python3 -m
# http.server`; the sha256 of what curl wrote must equal the file's.
# In [client] and [both], one small request under strace: no more
# getpeername or getsockname than the same curl unpreloaded (a connect in
# progress that poll() reported writable needs neither: a connection that
# never upgrades learns no address beyond connect()'s).
. "$(dirname "$0")/lib.sh"
require_cmd curl python3
real_python

mkdir -p "$IT_TMP/www"
make_random "$IT_TMP/www/blob" 20
want=$(sha "$IT_TMP/www/blob")

for MODE in $(it_modes); do
  name="curl GET 20 MiB from python http.server, sha256"
  port=$(pick_port)
  start_server httpd "$IT_PYTHON" -m http.server --bind 127.0.0.1 --directory "$IT_TMP/www" "$port"
  if ! wait_port "$port" "$SERVER_PID" 30; then
    server_status; tap_not_ok "$name [$MODE]" "http.server did not start ($SRV_STATUS)" "$SERVER_LOG"; stop_server; continue
  fi
  got=$IT_TMP/blob.$MODE
  # with fabric checks, slow the download down so that `fabsock stat` sees it
  slow=()
  fabric_enabled && slow=(--limit-rate 8M)
  fabric_watch_start "$port"
  t0=$(ms_now)
  run_client curl -sS --fail --max-time 50 "${slow[@]}" -o "$got" "http://127.0.0.1:$port/blob" 2>"$got.err"
  rc=$?
  ms=$(($(ms_now) - t0))
  fabric_watch_stop; fst=$?
  if [ $rc -ne 0 ]; then detail="curl exit $rc: $(head -c 200 "$got.err")"
  elif [ "$(sha "$got")" != "$want" ]; then rc=1; detail="sha256 differs ($(stat -c %s "$got") bytes received)"
  else detail="sha256 ok in $ms ms"; fi
  server_check || { rc=1; detail="$SRV_DETAIL; $detail"; }
  tap_result $rc "$name [$MODE]" "$detail" "$got.err" "$SERVER_LOG"
  fabric_report "$name" $fst
  name="curl, one request: no getpeername or getsockname beyond plain curl's"
  if { [ "$MODE" = client ] || [ "$MODE" = both ]; } && command -v strace >/dev/null; then
    echo small >"$IT_TMP/www/small"
    pre_for client
    names() { awk '($NF == "getpeername" || $NF == "getsockname") && $4 ~ /^[0-9]+$/ { n += $4 } END { print n + 0 }' "$1"; }
    timeout 30 strace -f -c -e trace=getpeername,getsockname -o "$IT_TMP/cnames.lib" \
      "${PRE[@]}" env FABSOCK_UPGRADE_BYTES=1073741824 curl -sS -o /dev/null "http://127.0.0.1:$port/small" 2>/dev/null
    rl=$?
    timeout 30 strace -f -c -e trace=getpeername,getsockname -o "$IT_TMP/cnames.plain" \
      curl -sS -o /dev/null "http://127.0.0.1:$port/small" 2>/dev/null
    rp=$?
    nl=$(names "$IT_TMP/cnames.lib") np=$(names "$IT_TMP/cnames.plain")
    if [ $rl -ne 0 ] || [ $rp -ne 0 ]; then
      tap_not_ok "$name [$MODE]" "curl under strace failed: exit $rl preloaded, $rp plain"
    elif [ "$nl" -le "$np" ]; then
      tap_ok "$name [$MODE]" "$nl preloaded, $np plain"
    else
      tap_not_ok "$name [$MODE]" "$nl preloaded, $np plain"
    fi
  elif [ "$MODE" = client ] || [ "$MODE" = both ]; then
    tap_skip "$name [$MODE]" "no strace"
  fi
  stop_server
  rm -f "$got"
done
it_done
