#!/bin/bash
# t_reuseport: two echo servers in one SO_REUSEPORT group (two processes,
# tests/integration/reuseport.py), 16 connections x 1 MiB verified echo,
# held open: in [both] every connection on ${FABSOCK_EXPECT_FABRIC:-the
# expected fabric}, those the kernel gave the second process too (its
# listener cannot serve the port's rendezvous name, the first one's: its
# connections stayed on TCP, their clients not-owner; a node cluster worker
# that listen()s again on a handed listener did the same).
. "$(dirname "$0")/lib.sh"
require_cmd python3
require_progs mtclient
real_python
PY=$(dirname "$0")/reuseport.py

for MODE in $(it_modes); do
  name="SO_REUSEPORT group of 2 processes, 16 x 1 MiB echo"
  port=$(pick_port)
  start_server reuseport-a "$IT_PYTHON" "$PY" "$port" "$IT_TMP/rp-a.$MODE"
  first=$SERVER_PID
  wait_file "$IT_TMP/rp-a.$MODE" "$first" 20
  start_server reuseport-b "$IT_PYTHON" "$PY" "$port" "$IT_TMP/rp-b.$MODE"
  if ! wait_file "$IT_TMP/rp-b.$MODE" "$SERVER_PID" 20; then
    server_status; tap_not_ok "$name [$MODE]" "the second server did not start ($SRV_STATUS)" "$SERVER_LOG"
    stop_server; kill "$first" 2>/dev/null; continue
  fi
  held_mtclient "$name" rpclient "$port" "$IT_TMP/rp.$MODE.out" -t 16 -B -n 1M
  fabric_report "$name" "$FABRIC_STATUS"
  stop_server
  kill "$first" 2>/dev/null
  { wait "$first"; } 2>/dev/null
  it_forget "$first"
done
it_done
