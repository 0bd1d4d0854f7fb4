#!/bin/bash
# t_socat_echo: a socat echo server, forking per connection, two ways:
#   PIPE          socat itself echoes through a pipe
#   EXEC:cat,nofork  socat execs cat directly on the accepted socket
# A socat client sends a 50 MiB random file, half-closes (its stdin ends, a
# second later), and must get every byte back (sha256 equal) before EOF.  Plus a one-line
# message through the half-close path.
# The PIPE server reads 4 KiB at a time (-b 4096): socat writes each block to
# its own pipe, blocking, as soon as select says the pipe is writable (one
# free page), and only it drains that pipe, so a larger block can block it
# for good once the pipe fills.  That needs the way back to the client to
# stall first, which kernel TCP's megabytes of buffer almost never let
# happen and a connection on a fabric (ring of 256 KiB here) does under load.
. "$(dirname "$0")/lib.sh"
require_cmd socat

make_random "$IT_TMP/data" 50
want=$(sha "$IT_TMP/data")

for MODE in $(it_modes); do
  for how in pipe exec; do
    port=$(pick_port)
    if [ "$how" = pipe ]; then
      start_server "socat-$how" socat -b 4096 -t 10 "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr,fork" PIPE
    else
      start_server "socat-$how" socat -t 10 "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr,fork" EXEC:cat,nofork
    fi
    if ! wait_port "$port" "$SERVER_PID" 20; then
      server_status; tap_not_ok "socat $how [$MODE]" "socat did not start ($SRV_STATUS)" "$SERVER_LOG"; stop_server; continue
    fi
    name="socat echo ($how) 50 MiB, half-close, sha256"
    got=$IT_TMP/echo.$how.$MODE
    fabric_watch_start "$port"
    t0=$(ms_now)
    # The client's stdin stays open a second after the data (the echo is
    # back by then), so that fabsock stat sees the connection: 50 MiB took
    # 96-166 ms here, too short for the watch, whose every sample was a SKIP.
    { cat "$IT_TMP/data"; sleep 1; } | run_client socat -t 30 -b 65536 - "TCP:127.0.0.1:$port" >"$got" 2>"$got.err"
    rc=${PIPESTATUS[1]}
    ms=$(($(ms_now) - t0))
    fabric_watch_stop; fst=$?
    if [ $rc -ne 0 ]; then detail="socat client exit $rc: $(head -c 200 "$got.err")"
    elif [ "$(sha "$got")" != "$want" ]; then rc=1; detail="sha256 differs ($(stat -c %s "$got") of $((50 * 1048576)) bytes back)"
    else detail="sha256 ok in $ms ms"; fi
    server_check || { rc=1; detail="$SRV_DETAIL; $detail"; }
    tap_result $rc "$name [$MODE]" "$detail" "$got.err" "$SERVER_LOG"
    fabric_report "$name" $fst
    rm -f "$got"

    name="socat echo ($how) one line, half-close"
    line="half-close $MODE $how $RANDOM"
    out=$(printf '%s\n' "$line" | run_client socat -t 10 - "TCP:127.0.0.1:$port" 2>"$got.err")
    rc=$?
    if [ $rc -eq 0 ] && [ "$out" = "$line" ]; then detail=""; else rc=1; detail="exit $rc, got '$out'"; fi
    tap_result $rc "$name [$MODE]" "$detail" "$got.err" "$SERVER_LOG"
    stop_server
  done
done
it_done
