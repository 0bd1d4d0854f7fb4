#!/bin/bash
# t_execchild: a connected socket inherited by a new program image.  The
# parent (tests/progs/execchild) does a verified round trip, then a child
# uses the same fd: fork+exec of itself, posix_spawn of itself, a shell
# pipeline run by system() and one run by popen(); then the parent resumes
# on the fd (another verified round trip, shutdown, EOF).  Each variant gets
# its own echo server, so that one failure does not hide the others.
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
it_done
