#!/bin/bash
# t_execpoll: a client polls while its peer's socket passes to an exec'd
# child (tests/integration/execpoll.py), every connection upgraded at once
# (FABSOCK_UPGRADE_BYTES=0: on the fabric before the exec, which brings it
# back to TCP).  Each POLLIN must find bytes or EOF: ssh, told readable by
# the peer's REVERT alone, read EAGAIN and gave up (sshd re-execs per
# connection).  Six connections per mode.
. "$(dirname "$0")/lib.sh"
require_cmd python3 sh
real_python
export FABSOCK_UPGRADE_BYTES=${FABSOCK_UPGRADE_BYTES:-0}
PY=$(dirname "$0")/execpoll.py

for MODE in $(it_modes); do
  name="poll across the peer's exec: readable only with bytes, 6 connections"
  rc=0 detail=
  for i in $(seq 6); do
    how=quiet; [ $((i % 2)) = 0 ] && how=reply # the server sends nothing / a reply before its exec
    pf=$IT_TMP/execpoll.$MODE.$i.port
    start_server "execpoll-$i" "$IT_PYTHON" "$PY" server "$pf" $how
    if ! wait_file "$pf" "$SERVER_PID" 20; then
      server_status; rc=1; detail="server did not start ($SRV_STATUS)"; stop_server; break
    fi
    out=$IT_TMP/execpoll.$MODE.$i.out
    run_client "$IT_PYTHON" "$PY" client "$(cat "$pf")" $how >"$out" 2>&1
    crc=$?
    detail="$(grep -v '^fabsock\[' "$out" | tail -n 1)"
    [ $crc -eq 124 ] && detail="client timed out; $detail"
    { wait "$SERVER_PID"; } 2>/dev/null
    it_forget "$SERVER_PID"
    if [ $crc -ne 0 ]; then rc=1; detail="connection $i ($how): $detail"; break; fi
  done
  tap_result $rc "$name [$MODE]" "$detail" "$out" "$SERVER_LOG"
done
it_done
