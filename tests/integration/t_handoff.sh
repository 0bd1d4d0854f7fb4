#!/bin/bash
# t_handoff: a primary that accepts each connection and hands it to a worker
# process (SCM_RIGHTS) after sitting on it 200 ms without using it
# (tests/integration/handoff.py; node cluster's primary does the same at
# once).  4 connections x 4 MiB verified echo, held open: in [both] every
# one on ${FABSOCK_EXPECT_FABRIC:-the expected fabric}.  The client asks for
# the upgrade while the primary still holds the connection: the primary
# once took the channel, went back to TCP when it handed the connection on
# (fd-passed), and the client never asked again (node's cluster test failed
# so now and then).  Now the request waits for the connection's first use
# (engine/adopt.h): handed on instead, the client finds the worker.  A
# longer set-up bound keeps that wait (a quarter of it) well above 200 ms.
. "$(dirname "$0")/lib.sh"
require_cmd python3
require_progs mtclient
real_python
PY=$(dirname "$0")/handoff.py
export FABSOCK_TIMEOUT_MS=${FABSOCK_TIMEOUT_MS:-6000}

for MODE in $(it_modes); do
  name="primary hands each connection to a worker after 200 ms, 4 x 4 MiB echo"
  port=$(pick_port)
  start_server handoff "$IT_PYTHON" "$PY" "$port" "$IT_TMP/handoff.$MODE" 200
  if ! wait_file "$IT_TMP/handoff.$MODE" "$SERVER_PID" 20; then
    server_status; tap_not_ok "$name [$MODE]" "the server did not start ($SRV_STATUS)" "$SERVER_LOG"
    stop_server; continue
  fi
  held_mtclient "$name" handoffclient "$port" "$IT_TMP/handoff.$MODE.out" -t 4 -n 4M
  fabric_report "$name" "$FABRIC_STATUS"
  stop_server
done
it_done
