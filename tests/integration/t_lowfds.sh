#!/bin/bash
# t_lowfds: the library's own descriptors stay out of the application's
# numbers (tests/integration/lowfds.py): a listening server serving 8
# connections from an epoll set and a blocking client, 256 KiB each way on
# each, then every descriptor below half of RLIMIT_NOFILE that a process
# holds is one it inherited or made.  The rendezvous socket of a listener
# and an epoll set's bell took the lowest free numbers: the application's
# next socket() got another number than without the library, for good.
. "$(dirname "$0")/lib.sh"
real_python
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-40}

for MODE in $(it_modes); do
  pf=$IT_TMP/port.$MODE
  start_server lowfds "$IT_PYTHON" "$IT_DIR/lowfds.py" server "$pf" 8
  if ! wait_file "$pf" "$SERVER_PID" 20; then
    tap_not_ok "lowfds server [$MODE]" "no port file" "$SERVER_LOG"; stop_server; continue
  fi
  out=$IT_TMP/client.$MODE
  run_client "$IT_PYTHON" "$IT_DIR/lowfds.py" client "$(cat "$pf")" 8 >"$out" 2>&1
  rc=$?
  it_reap "$SERVER_PID"; it_forget "$SERVER_PID"
  for side in server client; do
    log=$out; [ $side = server ] && log=$SERVER_LOG
    line=$(grep -m1 '^stray: ' "$log")
    if [ -z "$line" ]; then r=1; detail="no report (client exit $rc): $(tail -n 1 "$log" | head -c 200)"
    elif [ "$line" != "stray: none" ]; then r=1; detail="${line#stray: }"
    else r=0; detail="none below half of RLIMIT_NOFILE"; fi
    tap_result $r "the $side's descriptors below the library's are its own [$MODE]" "$detail" "$log"
  done
done
it_done
