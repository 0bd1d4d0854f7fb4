#!/bin/bash
# t_namegone: the process serving a listener's rendezvous name closes a
# request without answering and goes away (namegone.py), as a socket
# activator does when it execs its service (t_sockact, upgraded at 0
# bytes: every connection of the first moment went to `protocol`).  The
# real server (tests/progs/echosrv) cannot serve the name meanwhile and is
# found by its own.  The client asks again: 4 connections x 1 MiB verified
# echo, held open halfway, on the expected fabric at both ends in [both].
. "$(dirname "$0")/lib.sh"
require_cmd python3
require_progs echosrv mtclient
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-30}

for MODE in $(it_modes); do
  name="rendezvous name closed unanswered, then gone: asked again, 4 x 1 MiB echo"
  port=$(pick_port) ready=$IT_TMP/namegone.$MODE.ready
  rm -f "$ready"
  real_python
  "$IT_PYTHON" "$IT_DIR/namegone.py" 127.0.0.1 "$port" "$ready" >"$IT_TMP/namegone.$MODE.log" 2>&1 &
  gpid=$!
  IT_PIDS+=("$gpid")
  if ! wait_file "$ready" "$gpid" 20; then
    tap_not_ok "$name [$MODE]" "namegone.py did not bind the name" "$IT_TMP/namegone.$MODE.log"
    it_reap "$gpid"; it_forget "$gpid"; continue
  fi
  start_server namegone "$PROGS/echosrv" -H 127.0.0.1 -p "$port"
  if ! wait_port "$port" "$SERVER_PID" 20; then
    server_status; tap_not_ok "$name [$MODE]" "echosrv did not start ($SRV_STATUS)" "$SERVER_LOG"
    stop_server; kill "$gpid" 2>/dev/null; it_reap "$gpid"; it_forget "$gpid"; continue
  fi
  held_mtclient "$name" namegone "$port" "$IT_TMP/namegone.$MODE.out" -t 4 -n 1M
  fabric_report "$name" "$FABRIC_STATUS"
  kill "$gpid" 2>/dev/null
  it_reap "$gpid"; it_forget "$gpid"
  stop_server
done
it_done
