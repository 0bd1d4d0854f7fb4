#!/bin/bash
# t_libcfork: servers that fork inside the C library (libcfork.py).
# daemon(3) and forkpty(3) call libc's own fork, never the fork() the
# library interposes; it handles them from atfork handlers (preload/proc.c).
# Without them a daemon(3) server's child carried on with its parent's
# state (an agent thread it does not have, no stat table of its own): the
# client's upgrade stayed pending for good, on TCP.  Each server listens,
# forks the libc way, and its child echoes one connection: 200 round trips
# of 64 KiB, every echo checked, on the expected fabric while held (at both
# ends: the child's row must be in `fabsock stat`), then EOF both ways.
. "$(dirname "$0")/lib.sh"
require_cmd python3
real_python
N=200
for MODE in $(it_modes); do
 for how in daemon forkpty; do
  name="a server that forks with $how(3) serves its connection"
  pf=$IT_TMP/libcfork.$MODE.$how.port pidf=$IT_TMP/libcfork.$MODE.$how.pid hold=$IT_TMP/libcfork.$MODE.$how.hold
  rm -f "$pf" "$pidf" "$pidf.done" "$hold"
  start_server libcfork-$how "$IT_PYTHON" "$IT_DIR/libcfork.py" server "$pf" "$pidf" $how
  rc=0 detail= child=
  if ! wait_file "$pf" "" 20 || ! wait_file "$pidf" "" 20; then
    rc=1; detail="server did not start"
  else
    child=$(cat "$pidf")
    IT_PIDS+=("$child") # a daemon is out of timeout's reach: cleanup kills it
    start_bg_client libcfork-$how "$IT_PYTHON" "$IT_DIR/libcfork.py" client "$(cat "$pf")" "$hold" $N
    wait_log '^exchanged' "$BG_LOG" "$BG_PID"
    expect_fabric "$(cat "$pf")" "$(fabric_expected)" 10 || { rc=1; detail="$FABRIC_DETAIL; "; }
    if fabric_enabled && preloaded server && [ -x "$FABSOCK_BIN" ] &&
      ! timeout 10 "$FABSOCK_BIN" stat "$child" 2>/dev/null | grep -q ":$(cat "$pf") "; then
      rc=1; detail+="the child ($child) has no row in fabsock stat; "
    fi
  fi
  release_bg "$hold" || rc=1
  wait "$SERVER_PID"; src=$?; it_forget "$SERVER_PID"
  [ "$src" -eq 0 ] || { rc=1; detail+="server exit $src; "; }
  for _ in $(seq 200); do [ -s "$pidf.done" ] && break; sleep 0.05; done
  served=$(cat "$pidf.done" 2>/dev/null)
  [ "$served" = "served $((N * 65536))" ] || { rc=1; detail+="child: '${served:-nothing}'; "; }
  if [ -n "$child" ]; then # gone, or a zombie (a daemon's reaper may be slow, or none)
    for _ in $(seq 100); do
      kill -0 "$child" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$child/stat" 2>/dev/null)" != Z ] || break
      sleep 0.05
    done
    kill -0 "$child" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$child/stat" 2>/dev/null)" != Z ] &&
      { kill -9 "$child"; rc=1; detail+="child still running; "; }
    it_forget "$child"
  fi
  tap_result $rc "$name [$MODE]" "${detail}$(tail -n 1 "$BG_LOG" 2>/dev/null)" "$SERVER_LOG" "$BG_LOG"
 done
done
it_done
