#!/bin/bash
# t_nbconnect: non-blocking connect (EINPROGRESS), epoll for EPOLLOUT,
# SO_ERROR, a second connect, getpeername, an idle epoll_wait/recv, then a
# verified echo round trip; and the same against a closed port, which must
# give ECONNREFUSED through SO_ERROR.  The transcript (events, errno names)
# of every preloaded mode must equal the plain one.
. "$(dirname "$0")/lib.sh"
require_progs echosrv nbconnect
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-20} # quick clients: a hang must not eat the budget
export FABSOCK_IT_POLL_MS=${FABSOCK_IT_POLL_MS:-8000} # a stalled poll() reports before the timeout

# nb_run KIND: print the transcript of one run (KIND: open or refused).
nb_run() {
  if [ "$1" = refused ]; then
    local p
    p=$(pick_port) || return 1
    run_client "$PROGS/nbconnect" -r -p "$p" 2>&1
    echo "exit: $?"
  else
    run_client "$PROGS/nbconnect" -p "$SERVER_PORT" 2>&1
    echo "exit: $?"
  fi
}

for MODE in $(it_modes); do
  if ! start_prog_server echosrv echosrv; then
    server_status; tap_not_ok "nbconnect [$MODE]" "echosrv did not start ($SRV_STATUS)" "$SERVER_LOG"
    stop_server; continue
  fi
  for kind in open refused; do
    name="non-blocking connect + epoll + SO_ERROR ($kind port), same as plain"
    out=$IT_TMP/nbconnect.$kind.$MODE.out
    ensure_ref "nbconnect.$kind" nb_run "$kind"
    nb_run "$kind" >"$out"
    rc=0
    grep -qx 'exit: 0' "$out" || rc=1
    if compare_ref "nbconnect.$kind" "$out"; then detail=$(grep -E '^(SO_ERROR|echo):' "$out" | head -n 2 | tr '\n' ' ')
    else rc=1; detail="differs from plain: $DIFF"; fi
    tap_result $rc "$name [$MODE]" "$detail" "$out"
  done
  stop_server
done
it_done
