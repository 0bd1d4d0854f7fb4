#!/bin/bash
# t_splice: splice() on an accelerated connection, at both ends, half way
# through a stream (tests/progs/splicer).  The kernel serves splice from the
# kernel socket alone, so the library must bring the connection back to TCP
# first, byte-exact: the bytes arrive intact (same count and CRC as sent),
# nothing hangs, each preloaded end ends on TCP, and one that was on the
# fabric shows reason kernel-io.  Run also
# with the connection upgraded before its first byte (FABSOCK_UPGRADE_BYTES=0,
# the client held until both ends show the fabric), where every byte before
# the splice sits in a ring.
. "$(dirname "$0")/lib.sh"
require_progs splicer
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-30} # a hang must not eat the budget

# sp_run TAG [early]: one transfer; prints both ends' lines and a stat snapshot.
sp_run() {
  local tag=$1 early=${2:-} base hold=() pf
  base=$IT_TMP/splice.$tag.$MODE
  pf=$base.port
  rm -f "$base".*
  [ -n "$early" ] && hold=(-H "$base.hold")
  start_server "splicer-$tag" "$PROGS/splicer" -l -P "$pf" -w "$base.ends"
  if ! wait_file "$pf" "$SERVER_PID" 20; then echo "setup: server did not start"; stop_server; return; fi
  SP_PORT=$(cat "$pf")
  start_bg_client "splicer-$tag" "$PROGS/splicer" -c -p "$SP_PORT" -n 8M -s 3M "${hold[@]}" -w "$base.endc"
  local cpid=$BG_PID clog=$BG_LOG
  if [ -n "$early" ]; then
    wait_file "$base.hold.ready" "$cpid" 20 && expect_fabric "$SP_PORT" "$(fabric_expected)" 10 ||
      echo "note: not on the fabric before the first byte: ${FABRIC_DETAIL:-client not held}"
    touch "$base.hold"
  fi
  SP_STAT=
  if wait_file "$base.endc.ready" "$cpid" 30 && wait_file "$base.ends.ready" "$SERVER_PID" 30; then
    [ "$MODE" != plain ] && SP_STAT=$(timeout 10 "$FABSOCK_BIN" stat --json 2>&1 |
      "$IT_PYTHON" "$IT_DIR/hook_stat.py" "$SP_PORT")
  fi
  touch "$base.endc" "$base.ends"
  { wait "$cpid"; } 2>/dev/null
  echo "client exit $?"
  it_forget "$cpid"
  grep -h '^splicer:' "$clog" "$SERVER_LOG"
  for _ in $(seq 100); do server_alive || break; sleep 0.1; done
  stop_server
}

real_python
for MODE in $(it_modes); do
  for tag in threshold early; do
    early=; [ "$tag" = early ] && early=1
    name="splice at both ends half way through 8 MiB${early:+ (upgraded before the first byte)}: intact, back on TCP"
    out=$IT_TMP/sp-out.$tag.$MODE
    if [ -n "$early" ]; then FABSOCK_UPGRADE_BYTES=0 sp_run "$tag" 1 >"$out"; else sp_run "$tag" >"$out"; fi
    printf '%s\n' "$SP_STAT" >>"$out"
    WHY=
    grep -qx 'client exit 0' "$out" || WHY="client: $(grep -m1 '^client exit' "$out")"
    cl=$(grep -m1 'role=client' "$out") sv=$(grep -m1 'role=server' "$out")
    if [ -z "$cl" ] || [ -z "$sv" ] || [ "${cl#*bytes=}" != "${sv#*bytes=}" ]; then
      WHY="${WHY:+$WHY; }bytes differ: client '${cl:-none}', server '${sv:-none}'"
    fi
    # Each preloaded end is on TCP at the end.  Where it surely was on the
    # fabric before the splice (both ends, upgraded first) the reason says
    # why it left; otherwise an earlier reason (peer-no-fabsock, or a
    # rendezvous the splice overtook) may stand.
    if [ "$MODE" != plain ]; then
      want=
      [ "$MODE" = both ] && [ -n "$early" ] && want=kernel-io
      for d in connect accept; do
        who=client; [ $d = accept ] && who=server
        preloaded $who || continue
        l=" $(grep -m1 "dir=$d " <<<"$SP_STAT") "
        if [[ $l != *" fabric=tcp "* || ( -n $want && $l != *" reason=$want "* ) ]]; then
          WHY="${WHY:+$WHY; }$who:${l:- not in fabsock stat}"
        fi
      done
    fi
    tap_result "$([ -z "$WHY" ]; echo $?)" "$name [$MODE]" "${WHY:-${sv#splicer: }}" "$out"
  done
done
it_done
