#!/bin/bash
# t_herd: threads blocked each on a connection of its own (MariaDB's thread
# per connection, Java's blocking sockets; herd.py), in recv() or poll():
# while the main thread sleeps for each of 300 replies on its own
# connection, the 4 idle threads sleep through them (their context
# switches, counted), and every connection, 1.3 MiB echoed each way and
# checked, is on the expected fabric at both ends in [both].  Each
# connection's peer rang the process's door, on which every blocked thread
# slept: each reply woke them all (docs/design.md 1.7, thread doors).
# Once more in [both] with every connection upgraded at connect and idle
# for 100 ms after it, so that its rendezvous is over before any thread
# waits on it: the connecting thread marks it (before, the connections
# rang the process's door: at the default threshold 1 run in 18 had an
# idle thread wake at each reply, where the rendezvous came first).
. "$(dirname "$0")/lib.sh"
require_cmd python3
runs=$(it_modes)
case " $runs " in *" both "*) [ -z "${FABSOCK_UPGRADE_BYTES:-}" ] && runs="$runs both@0" ;; esac
for run in $runs; do
  MODE=${run%@*} at=
  [ "$run" != "$MODE" ] && at=${run#*@}
  name="threads blocked each on its own connection: a reply wakes its own thread alone${at:+ (upgraded at connect, idle 100 ms first)}"
  [ -n "$at" ] && export FABSOCK_UPGRADE_BYTES=$at # both ends, this run alone
  if held_pair_start herd "$IT_DIR/herd.py" ${at:+100}; then
    expect_fabric "$HELD_PORT@1000000" "$(fabric_expected)" 10 || { rc=1; detail="$FABRIC_DETAIL; "; }
  fi
  held_pair_end
  grep -qx 'served 5' "$SERVER_LOG" || rc=1
  [ -n "$at" ] && unset FABSOCK_UPGRADE_BYTES
  tap_result $rc "$name [$MODE]" "${detail}$(grep '^idle' "$BG_LOG" 2>/dev/null | tail -n 1)" "$BG_LOG" "$SERVER_LOG"
done
it_done
