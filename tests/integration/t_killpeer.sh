#!/bin/bash
# t_killpeer: the server is killed with SIGKILL in the middle of a transfer.
#   send: the client is blocked writing to a server that never reads
#   psend: the same, non-blocking, waiting in poll() for POLLOUT
#   recv: the client is reading a server that writes without end
#   arecv: the client is reading a server that aborts (SO_LINGER {1, 0}:
#          a reset, not a kill) after 2 MiB
# Each also runs with the connection upgraded before its first byte
# (FABSOCK_UPGRADE_BYTES=0, the client held until both ends show the
# fabric): every byte went to the ring, none sits in the dead peer's
# kernel, whose close then sends a FIN, not the reset TCP would get.
# The client must see the end (EOF, or ECONNRESET/EPIPE) within 20 s, never
# hang, and the class of outcome must be the same as plain's.
. "$(dirname "$0")/lib.sh"
require_progs killpeer

# kp_run DIR [early]: one run, prints the client's "outcome:" line.
kp_run() {
  local dir=$1 early=${2:-} srv=sink pf pidf ready hold hargs=() cdir=$1
  [ "$dir" = recv ] && srv=source
  [ "$dir" = arecv ] && srv=abort cdir=recv
  pidf=$IT_TMP/killpeer.$dir$early.$MODE.pid
  ready=$IT_TMP/killpeer.$dir$early.$MODE.ready
  hold=$IT_TMP/killpeer.$dir$early.$MODE.hold
  rm -f "$pidf" "$ready" "$hold" "$hold.ready"
  [ -n "$early" ] && hargs=(-H "$hold")
  if ! start_prog_server "killpeer-$srv" killpeer -l "$srv" -I "$pidf" "${hargs[@]}"; then
    echo "outcome: setup (server did not start)"; stop_server; return
  fi
  start_bg_client "killpeer-$dir" "$PROGS/killpeer" -c "$cdir" -p "$SERVER_PORT" -R "$ready" "${hargs[@]}" -T 20
  local cpid=$BG_PID clog=$BG_LOG
  if [ -n "$early" ]; then
    # Let go once both ends show the fabric (up to 10 s: the upgrade is
    # asynchronous); the outcome must match plain's either way.
    wait_file "$hold.ready" "$cpid" 20 && expect_fabric "$SERVER_PORT" "$(fabric_expected)" 10 ||
      echo "# not on the fabric before the first byte: ${FABRIC_DETAIL:-client not held}"
    touch "$hold"
  fi
  if [ "$srv" = abort ]; then
    : # the server ends the connection itself
  elif wait_file "$ready" "$cpid" 20 && wait_file "$pidf" "" 5; then
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
  for case in send psend recv arecv send:early psend:early recv:early arecv:early; do
    dir=${case%:*} early=
    [ "$case" != "$dir" ] && early=-early
    name="server SIGKILLed while the client ${dir}s${early:+ (upgraded before the first byte)}: same outcome class as plain"
    [ "$dir" = arecv ] && name="server aborts (SO_LINGER 0) while the client recvs${early:+ (upgraded before the first byte)}: same outcome class as plain"
    out=$IT_TMP/killpeer.$dir$early.$MODE.out
    cls=$IT_TMP/killpeer.$dir$early.$MODE.class
    ensure_ref "killpeer.$dir" eval 'kp_run '"$dir"' | sed -n "s/^outcome: \([a-z]*\).*/\1/p"'
    KP_MS=0
    if [ -n "$early" ]; then
      FABSOCK_UPGRADE_BYTES=0 kp_run "$dir" "$early" >"$out"
    else
      kp_run "$dir" >"$out"
    fi
    sed -n 's/^outcome: \([a-z]*\).*/\1/p' "$out" >"$cls"
    detail="$(grep -m1 '^outcome:' "$out") in ${KP_MS} ms"
    rc=0
    case "$(cat "$cls")" in eof | reset) ;; *) rc=1 ;; esac
    if ! compare_ref "killpeer.$dir" "$cls"; then rc=1; detail="differs from plain ($(cat "$(ref_file "killpeer.$dir")")): $detail"; fi
    tap_result $rc "$name [$MODE]" "$detail" "$out"
  done
done
it_done
