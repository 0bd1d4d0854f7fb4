#!/bin/bash
# t_execchild: a connected socket inherited by a new program image.  The
# parent (tests/progs/execchild) does a verified round trip, then a child
# uses the same fd: fork+exec of itself, posix_spawn of itself, a shell
# pipeline run by system() and one run by popen(); then the parent resumes
# on the fd (another verified round trip, shutdown, EOF).  Each variant gets
# its own echo server, so that one failure does not hide the others.
# Then (once, preloaded): a process whose execve fails keeps its row in
# fabsock stat, and once it execs a program without libfabsock, stat no
# longer lists the old image's sockets under its pid.
. "$(dirname "$0")/lib.sh"
require_progs echosrv execchild
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-20} # quick clients: a hang must not eat the budget
export FABSOCK_IT_POLL_MS=${FABSOCK_IT_POLL_MS:-8000} # a stalled poll() reports before the timeout

for MODE in $(it_modes); do
  for how in fork spawn system popen; do
    name="socket fd inherited across exec ($how)"
    if ! start_prog_server "echosrv-$how" echosrv; then
      server_status; tap_not_ok "$name [$MODE]" "echosrv did not start ($SRV_STATUS)" "$SERVER_LOG"
      stop_server; continue
    fi
    out=$IT_TMP/execchild.$how.$MODE.out
    run_client "$PROGS/execchild" -p "$SERVER_PORT" -m "$how" >"$out" 2>&1
    rc=$?
    detail=$(grep -v '^$' "$out" | tail -n 1)
    [ $rc -eq 124 ] && detail="timed out; $detail"
    server_check || { rc=1; detail="$SRV_DETAIL; $detail"; }
    tap_result $rc "$name [$MODE]" "$detail" "$out" "$SERVER_LOG"
    stop_server
  done
done

if [ -n "$FABSOCK_LIB" ] && [ -x "$FABSOCK_BIN" ] && need_cmd python3; then
  MODE=any
  real_python
  pidf=$IT_TMP/exec-self.pid
  gate=$IT_TMP/exec-self.go
  LD_PRELOAD=$FABSOCK_LIB "$IT_PYTHON" -c '
import os, socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
try:
    os.execve("/nonexistent/fabsock-test", ["x"], {})
except OSError:
    pass
open(sys.argv[1] + ".tmp", "w").write(str(os.getpid())); os.rename(sys.argv[1] + ".tmp", sys.argv[1])
for _ in range(300):
    if os.path.exists(sys.argv[2]): break
    time.sleep(0.05)
env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
os.execve("/bin/sleep", ["sleep", "20"], env)
' "$pidf" "$gate" &
  xpid=$!
  IT_PIDS+=("$xpid")
  rows() { timeout 10 "$FABSOCK_BIN" stat "$1" | awk 'NR > 1 && NF == 0 {exit} NR > 1' | wc -l; } # the closed counts' footer is not a row
  name="exec that fails: the process keeps its row in fabsock stat"
  if wait_file "$pidf" "$xpid" 20; then
    n=$(rows "$xpid")
    if [ "$n" -ge 1 ]; then tap_ok "$name" "$n row(s)"; else tap_not_ok "$name" "no row for pid $xpid"; fi
    touch "$gate"
    name="exec of a program without libfabsock: stat no longer lists the old image"
    n=1
    for _ in $(seq 100); do
      [ "$(cat /proc/$xpid/comm 2>/dev/null)" = sleep ] && { n=$(rows "$xpid"); break; }
      sleep 0.05
    done
    if [ "$n" -eq 0 ]; then tap_ok "$name" "pid $xpid runs $(cat /proc/$xpid/comm 2>/dev/null), no rows"
    else tap_not_ok "$name" "$n row(s) left for pid $xpid ($(cat /proc/$xpid/comm 2>/dev/null))"; fi
  else
    tap_not_ok "$name" "the test process never got going"
  fi
  kill "$xpid" 2>/dev/null
fi
it_done
