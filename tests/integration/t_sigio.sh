#!/bin/bash
# t_sigio: signal-driven I/O (sigio.py).  A server that asks for SIGIO on its
# connection (O_ASYNC through fcntl, or ioctl FIOASYNC) waits for the signal
# before it reads; the kernel raises it when its socket has bytes, and a
# ring's never do: the server waited for good once its peer's bytes went to
# a ring.  Such a connection now stays on TCP (reason kernel-io,
# preload/socket.c).  200 round trips of 64 KiB, every echo checked; in
# [both] the connection must have stayed on TCP with that reason.
. "$(dirname "$0")/lib.sh"
require_cmd python3
real_python
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-40}
for MODE in $(it_modes); do
 for how in fcntl ioctl; do
  name="a server waiting for SIGIO ($how) gets every byte"
  pf=$IT_TMP/sigio.$MODE.$how.port
  rm -f "$pf" "$pf.hold"
  start_server sigio-$how "$IT_PYTHON" "$IT_DIR/sigio.py" server "$pf" $how
  rc=0 detail=
  if ! wait_file "$pf" "$SERVER_PID" 20; then
    server_status; rc=1; detail="server did not start ($SRV_STATUS); "
  else
    hold=$pf.hold
    start_bg_client sigio-$how "$IT_PYTHON" "$IT_DIR/sigio.py" client "$(cat "$pf")" 200 "$hold"
    wait_log '^exchanged' "$BG_LOG" "$BG_PID"
    if fabric_enabled && [ "$MODE" = both ] && [ -x "$FABSOCK_BIN" ]; then
      rows=$(conn_reasons "$(cat "$pf")")
      detail+="stat: $rows; "
      case "$rows" in *"python3 tcp/kernel-io python3 tcp/kernel-io"*) ;; *) rc=1 ;; esac
    fi
    release_bg "$hold" || rc=1
  fi
  wait "$SERVER_PID"; src=$?; it_forget "$SERVER_PID"
  [ "$src" -eq 0 ] || { rc=1; detail+="server exit $src; "; }
  grep -q "^echoed $((200 * 65536)) bytes" "$SERVER_LOG" || rc=1
  tap_result $rc "$name [$MODE]" "${detail}$(tail -n 1 "$SERVER_LOG" 2>/dev/null)" "$SERVER_LOG" "$BG_LOG"
 done
done
it_done
