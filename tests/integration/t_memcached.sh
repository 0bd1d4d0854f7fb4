#!/bin/bash
# t_memcached: memcached on a free port; a small python client (text
# protocol) stores binary values up to 500 KiB, reads them back (single and
# multi-get), incr/decr, delete, and a printf | socat client does a set/get.
. "$(dirname "$0")/lib.sh"
require_cmd memcached python3
real_python
userarg=()
[ "$(id -u)" = 0 ] && userarg=(-u root)

for MODE in $(it_modes); do
  port=$(pick_port)
  start_server memcached memcached -l 127.0.0.1 -p "$port" -U 0 -t 2 -m 64 -I 2m "${userarg[@]}"
  if ! wait_port "$port" "$SERVER_PID" 20; then
    server_status; tap_not_ok "memcached [$MODE]" "memcached did not start ($SRV_STATUS)" "$SERVER_LOG"; stop_server; continue
  fi
  name="memcached set/get/incr/delete (python client), binary values"
  out=$IT_TMP/mc.$MODE.out
  fabric_watch_start "$port"
  # Connected a second longer when fabrics are checked: over in tens of ms,
  # the client's connection was never seen (the client mode's check skipped).
  MC_HOLD_SECONDS=$(fabric_enabled && echo 1 || echo 0) \
    run_client "$IT_PYTHON" "$IT_DIR/mc_client.py" 127.0.0.1 "$port" >"$out" 2>&1
  rc=$?
  fabric_watch_stop; fst=$?
  detail=$(tail -n 1 "$out")
  server_check || { rc=1; detail="$SRV_DETAIL; $detail"; }
  tap_result $rc "$name [$MODE]" "$detail" "$out" "$SERVER_LOG"
  fabric_report "$name" $fst

  name="memcached set/get (printf | socat)"
  if need_cmd socat; then
    got=$(printf 'set k%s 0 0 5\r\nhello\r\nget k%s\r\nquit\r\n' "$MODE" "$MODE" |
      run_client socat -t 5 - "TCP:127.0.0.1:$port" 2>&1 | tr -d '\r' | tr '\n' '|')
    want="STORED|VALUE k$MODE 0 5|hello|END|"
    if [ "$got" = "$want" ]; then tap_ok "$name [$MODE]"; else tap_not_ok "$name [$MODE]" "got '$got'"; fi
  else
    tap_skip "$name [$MODE]" "socat not installed"
  fi
  stop_server
done
it_done
