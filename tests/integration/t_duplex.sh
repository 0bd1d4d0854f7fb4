#!/bin/bash
# t_duplex: a large full-duplex transfer between two tests/progs/duplex
# processes: each side sends FABSOCK_IT_DUPLEX_MIB (default 256) MiB with
# write() sizes 1..256 KiB and short random sleeps while it receives and
# verifies the other side's stream byte for byte (CRC-32 reported, equal to
# plain's since the streams are deterministic).  Preloaded ends log at
# debug level, so that a wait which ran into libfabsock's 20 ms safety bound
# with its wait already over (a lost wake: sender and receiver share the
# connection's wake eventfd) fails the test: it once made this 17x slower.
# A wake that comes late (its waker preempted between publish and write on
# a loaded machine) is logged apart ("late, not lost") and does not count.
. "$(dirname "$0")/lib.sh"
require_progs duplex
mib=${FABSOCK_IT_DUPLEX_MIB:-256}
export FABSOCK_LOG=${FABSOCK_LOG:-debug}

# dx_ends OUT: after the client ran (rc its status), wait for the server
# (it exits after its one connection); rc and detail say how both ended.
dx_ends() {
  for _ in $(seq 100); do server_alive || break; sleep 0.1; done
  server_status
  detail=$(grep -v -e '^$' -e '^fabsock\[' "$1" | tail -n 1)
  [ "$rc" -eq 124 ] && detail="client timed out; $detail"
  if [ "$SRV_STATUS" != "exited with status 0" ]; then rc=1; detail="server $SRV_STATUS: $(tail -n 1 "$SERVER_LOG"); $detail"; fi
}

for MODE in $(it_modes); do
  name="full duplex ${mib} MiB each way, random sizes and sleeps"
  if ! start_prog_server duplex duplex -l -n "${mib}M"; then
    server_status; tap_not_ok "$name [$MODE]" "duplex server did not start ($SRV_STATUS)" "$SERVER_LOG"
    stop_server; continue
  fi
  hold_args
  out=$IT_TMP/duplex.$MODE.out
  run_held_client duplex "$SERVER_PORT" "$out" "$PROGS/duplex" -p "$SERVER_PORT" -n "${mib}M" "${HOLD[@]}"
  rc=$?
  dx_ends "$out"
  crcs=$IT_TMP/duplex.$MODE.crc
  grep -o 'tx_crc=[0-9a-f]* rx_crc=[0-9a-f]*' "$out" >"$crcs"
  if [ $rc -eq 0 ] && { [ "$MODE" = plain ] || [ -f "$(ref_file duplex.crc)" ]; }; then
    compare_ref duplex.crc "$crcs" || { rc=1; detail="CRCs differ from plain: $DIFF"; }
  elif [ $rc -eq 0 ]; then # no plain run in this pass: each end's tx must be the other's rx
    read -r ctx crx <<<"$(sed 's/[a-z_]*=//g' "$crcs")"
    read -r stx srx <<<"$(grep -o 'tx_crc=[0-9a-f]* rx_crc=[0-9a-f]*' "$SERVER_LOG" | sed 's/[a-z_]*=//g')"
    if [ -z "$ctx" ] || [ "$ctx" != "$srx" ] || [ "$crx" != "$stx" ]; then
      rc=1; detail="CRCs differ between the ends: client tx/rx ${ctx:-?}/${crx:-?}, server ${stx:-?}/${srx:-?}"
    fi
  fi
  lost_lines=$(cat "$out" "$SERVER_LOG" | grep 'ran into the [0-9]* ms bound (ready now: 1)')
  lost=$(printf '%s' "$lost_lines" | grep -c .)
  if [ $rc -eq 0 ] && [ "$lost" -gt 0 ]; then
    first=$(printf '%s\n' "$lost_lines" | head -n 2 | sed 's/^fabsock\[[0-9]*\] debug: //' | paste -sd';')
    detail="$lost waits ran into the 20 ms bound with their wait over (lost wakes: $first); $detail"
    # FABSOCK_IT_DUPLEX_LOST_KNOWN: a known open bug makes a few lost wakes a TODO (rdma VM)
    if [ -n "${FABSOCK_IT_DUPLEX_LOST_KNOWN:-}" ] && [ "$lost" -le 5 ]; then
      tap_todo "$name [$MODE]" "$FABSOCK_IT_DUPLEX_LOST_KNOWN" "$detail"
      fabric_report "$name" "$FABRIC_STATUS"
      stop_server
      continue
    fi
    rc=1
  fi
  tap_result $rc "$name [$MODE]" "$detail" "$out" "$SERVER_LOG"
  fabric_report "$name" "$FABRIC_STATUS"
  stop_server
done

# Idle rings give their memory back mid-stream (engine/trim.h): each sender
# rests 2.5 s after every 8 MiB, past the 1 s trim period twice.  The
# stream must stay byte-exact, and on shm each end must have trimmed (its
# debug log says so).  Both ends preloaded only: elsewhere nothing trims.
for MODE in $(it_modes); do
  [ "$MODE" = both ] || continue
  name="full duplex 24 MiB resting 2.5 s every 8 MiB: idle rings give memory back, stream intact"
  if ! start_prog_server duplex duplex -l -n 24M -z 8M; then
    server_status; tap_not_ok "$name [$MODE]" "duplex server did not start ($SRV_STATUS)" "$SERVER_LOG"
    stop_server; continue
  fi
  out=$IT_TMP/duplex-rest.$MODE.out
  run_client "$PROGS/duplex" -p "$SERVER_PORT" -n 24M -z 8M >"$out" 2>&1
  rc=$?
  dx_ends "$out"
  if [ $rc -eq 0 ] && [ "${FABSOCK_EXPECT_FABRIC:-}" = shm ]; then
    for who in client server; do
      f=$out; [ $who = server ] && f=$SERVER_LOG
      grep -q 'idle rings gave back' "$f" || { rc=1; detail="the $who never trimmed its idle ring; $detail"; }
    done
  fi
  tap_result $rc "$name [$MODE]" "$detail" "$out" "$SERVER_LOG"
  stop_server
done
it_done
