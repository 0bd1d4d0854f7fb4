#!/bin/bash
# t_stdio: C stdio on a socket.  stdio reads and writes its stream's fd
# inside libc, past the read() and write() the library interposes
# (preload/socket.c, fdopen and fclose; engine/adopt.h, fs_adopt_stdio_used).
#   sed    socat TCP-LISTEN,fork EXEC:'sed -u ...',nofork: an inetd-style
#          program with the connection on stdin/stdout that talks through
#          stdio.  Once its peer's bytes went to a ring, sed read EOF (the
#          client's lines went unanswered).  2000 lines must come back
#          right, and in [both] the connection stays on TCP, reason
#          kernel-io (cat in the same place upgrades: t_socat_echo).
#   fdopen a client upgraded first (on the expected fabric, checked), then
#          fdopen(3)s its socket (a dup for writing), 200 lines with
#          fputs/fgets against an echo, fclose(3)s both: the connection must
#          come back to TCP byte-exact at fdopen, and the fd number fclose
#          freed must read as the file opened there next (it read -1: the
#          socket's entry outlived the fclose libc did inside).
. "$(dirname "$0")/lib.sh"
require_cmd socat
real_python

for MODE in $(it_modes); do
 for how in sed fdopen; do
  port=$(pick_port) hold=$IT_TMP/stdio.$MODE.$how.hold
  rm -f "$hold"
  prog=cat
  [ $how = sed ] && prog='sed -u s/a/b/'
  rc=0 detail=
  if ! socat_server stdio-$how "$port" "$prog"; then
    tap_not_ok "stdio $how [$MODE]" "socat did not start ($SRV_STATUS)" "$SERVER_LOG"; stop_server; continue
  fi
  if [ $how = sed ]; then
    name="an inetd-style program talking through stdio stays on TCP and answers every line"
    start_bg_client stdio-$how "$IT_PYTHON" "$IT_DIR/stdio.py" lines "$port" 2000 "$hold"
  else
    name="fdopen(3) on an upgraded socket: back to TCP byte-exact; fclose(3) frees its number"
    start_bg_client stdio-$how "$IT_PYTHON" "$IT_DIR/stdio.py" fdopen "$port" "$hold"
  fi
  wait_log '^exchanged' "$BG_LOG" "$BG_PID"
  if [ $how = fdopen ]; then
    expect_fabric "$port" "$(fabric_expected)" 10 || { rc=1; detail="before fdopen: $FABRIC_DETAIL; "; }
  elif fabric_enabled && [ "$MODE" = both ] && [ -x "$FABSOCK_BIN" ]; then
    sleep 0.3 # the client's upgrade is asked 2 ms after its threshold, and refused
    rows=$(conn_reasons "$port")
    detail="stat: $rows; "
    case "$rows" in *"python3 tcp/kernel-io"*) ;; *) rc=1 ;; esac
  fi
  release_bg "$hold" || rc=1
  stop_server
  tap_result $rc "$name [$MODE]" "${detail}$(tail -n 1 "$BG_LOG" 2>/dev/null)" "$BG_LOG" "$SERVER_LOG"
 done
done
it_done
