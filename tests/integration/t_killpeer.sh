#!/bin/bash
# t_killpeer: the server is killed with SIGKILL in the middle of a transfer.
#   send: the client is blocked writing to a server that never reads
#   recv: the client is reading a server that writes without end
# The client must see the end (EOF, or ECONNRESET/EPIPE) within 20 s, never
# hang, and the class of outcome must be the same as plain's.
. "$(dirname "$0")/lib.sh"
require_progs killpeer

# kp_run DIR: one run, prints the client's "outcome:" line.
kp_run() {
  local dir=$1 srv=sink pf pidf ready
  [ "$dir" = recv ] && srv=source
  pidf=$IT_TMP/killpeer.$dir.$MODE.pid
  ready=$IT_TMP/killpeer.$dir.$MODE.ready
  rm -f "$pidf" "$ready"
  if ! start_prog_server "killpeer-$srv" killpeer -l "$srv" -I "$pidf"; then
    echo "outcome: setup (server did not start)"; stop_server; return
  fi
  start_bg_client "killpeer-$dir" "$PROGS/killpeer" -c "$dir" -p "$SERVER_PORT" -R "$ready" -T 20
  local cpid=$BG_PID clog=$BG_LOG
  if wait_file "$ready" "$cpid" 20 && wait_file "$pidf" "" 5; then
    sleep 0.2
    kill -KILL "$(cat "$pidf")"
    # reap the server's `timeout` now, quietly (it re-raises SIGKILL)
    { wait "$SERVER_PID"; } 2>/dev/null
    it_forget "$SERVER_PID"
  else
    echo "# client never got going"
  fi
  local t0
  t0=$(ms_now)
  { wait "$cpid"; } 2>/dev/null
  local rc=$?
  it_forget "$cpid"
  KP_MS=$(($(ms_now) - t0))
  grep -m1 '^outcome:' "$clog" || { echo "outcome: none (client exit $rc)"; tail -n 3 "$clog" | sed 's/^/# /'; }
  stop_server
}

for MODE in $(it_modes); do
  for dir in send recv; do
    name="server SIGKILLed while the client ${dir}s: same outcome class as plain"
    out=$IT_TMP/killpeer.$dir.$MODE.out
    cls=$IT_TMP/killpeer.$dir.$MODE.class
    ensure_ref "killpeer.$dir" eval 'kp_run '"$dir"' | sed -n "s/^outcome: \([a-z]*\).*/\1/p"'
    KP_MS=0
    kp_run "$dir" >"$out"
    sed -n 's/^outcome: \([a-z]*\).*/\1/p' "$out" >"$cls"
    detail="$(grep -m1 '^outcome:' "$out") in ${KP_MS} ms"
    rc=0
    case "$(cat "$cls")" in eof | reset) ;; *) rc=1 ;; esac
    if ! compare_ref "killpeer.$dir" "$cls"; then rc=1; detail="differs from plain ($(cat "$(ref_file "killpeer.$dir")")): $detail"; fi
    tap_result $rc "$name [$MODE]" "$detail" "$out"
  done
done
it_done
