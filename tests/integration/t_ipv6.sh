#!/bin/bash
# t_ipv6: the same over [::1]: echosrv -6 with 2 threads x 2 MiB verified
# echo (mtclient -6), non-blocking connect transcript (nbconnect -6) equal
# to plain, and curl fetching a file from python http.server bound to ::1.
. "$(dirname "$0")/lib.sh"
require_progs echosrv mtclient nbconnect
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-30} # quick clients: a hang must not eat the budget
have_ipv6 || skip_all "no IPv6 loopback (::1) on this host"

for MODE in $(it_modes); do
  if ! start_prog_server echosrv6 echosrv -6; then
    server_status; tap_not_ok "ipv6 echosrv [$MODE]" "echosrv -6 did not start ($SRV_STATUS)" "$SERVER_LOG"
    stop_server; continue
  fi
  name="IPv6 [::1] echo, 2 threads x 2 MiB"
  hold_args
  out=$IT_TMP/ipv6-mt.$MODE.out
  run_held_client mtclient6 "$SERVER_PORT" "$out" "$PROGS/mtclient" -6 -p "$SERVER_PORT" -t 2 -n 2M "${HOLD[@]}"
  rc=$?
  detail=$(grep -v '^$' "$out" | tail -n 1)
  server_check || { rc=1; detail="$SRV_DETAIL; $detail"; }
  tap_result $rc "$name [$MODE]" "$detail" "$out" "$SERVER_LOG"
  fabric_report "$name" "$FABRIC_STATUS"

  name="IPv6 [::1] non-blocking connect, same as plain"
  out=$IT_TMP/ipv6-nb.$MODE.out
  nb6() { run_client "$PROGS/nbconnect" -6 -p "$SERVER_PORT" 2>&1; echo "exit: $?"; }
  ensure_ref nbconnect6 nb6
  nb6 >"$out"
  rc=0
  grep -qx 'exit: 0' "$out" || rc=1
  if compare_ref nbconnect6 "$out"; then detail=$(grep '^echo:' "$out"); else rc=1; detail="differs from plain: $DIFF"; fi
  tap_result $rc "$name [$MODE]" "$detail" "$out"
  stop_server

  name="IPv6 [::1] curl from python http.server, 4 MiB sha256"
  if ! need_cmd curl python3; then tap_skip "$name [$MODE]" "$IT_MISSING not installed"; continue; fi
  if [ ! -f "$IT_TMP/www6/blob" ]; then mkdir -p "$IT_TMP/www6"; make_random "$IT_TMP/www6/blob" 4; fi
  port=$(pick_port)
  real_python
  start_server httpd6 "$IT_PYTHON" -m http.server --bind ::1 --directory "$IT_TMP/www6" "$port"
  if ! wait_port "$port" "$SERVER_PID" 20; then
    server_status; tap_not_ok "$name [$MODE]" "http.server did not start ($SRV_STATUS)" "$SERVER_LOG"; stop_server; continue
  fi
  got=$IT_TMP/www6.$MODE.got
  run_client curl -sS --fail -g -o "$got" "http://[::1]:$port/blob" 2>"$got.err"
  rc=$?
  if [ $rc -eq 0 ] && [ "$(sha "$got")" = "$(sha "$IT_TMP/www6/blob")" ]; then detail="sha256 ok"
  else rc=1; detail="curl exit $rc, sha256 $(sha "$got" 2>/dev/null | cut -c1-12)"; fi
  tap_result $rc "$name [$MODE]" "$detail" "$got.err" "$SERVER_LOG"
  stop_server
done
it_done
