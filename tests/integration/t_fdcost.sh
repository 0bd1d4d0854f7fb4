#!/bin/bash
# t_fdcost: what a connection costs in descriptors (tests/integration/fdcost.py).
#   40 connections held open at once, 64 B each way (under the upgrade
#   threshold), plain blocking sockets at both ends: each process holds no
#   descriptor beyond its sockets but the library's own few (no wake
#   eventfd: a connection that never upgrades never makes one; it used to
#   cost two system calls and an fd at each end of every connection);
#   the same with the server an event loop (each connection in its epoll
#   set): a set that takes a connection makes no wake eventfd for it (the
#   set has one bell; the connection's comes with its rendezvous); it cost
#   an fd and four system calls per connection (nginx under short
#   connections);
#   the same with FABSOCK_UPGRADE_BYTES=0, both ends preloaded: every
#   connection upgrades at once, and then holds its wake eventfd and the
#   peer's (the measure sees them: the first case could fail).
. "$(dirname "$0")/lib.sh"
# What a connection costs with a wake eventfd of its own at each end
# (doorbells off); doorbells are t_doorbell's.
export FABSOCK_DOORBELL=0
require_cmd python3
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-40}
N=40
MAX_EXTRA=6 # the library's own per process: agent eventfd (and epoll set in a burst), rendezvous socket, ...

fc_case() { # [WANT]: runs server and client in MODE, sets rc and detail
  local want=${1:-} pf=$IT_TMP/fdcost.$MODE.$RANDOM.port out
  out=$IT_TMP/fdcost.$MODE.$RANDOM.out
  real_python
  start_server fdcost "$IT_PYTHON" "$IT_DIR/fdcost.py" "${FC_SERVER:-server}" "$pf" "$N" $want
  if ! wait_file "$pf" "$SERVER_PID" 20; then
    server_status; rc=1; detail="server did not start ($SRV_STATUS)"; stop_server; return
  fi
  run_client "$IT_PYTHON" "$IT_DIR/fdcost.py" client "$(cat "$pf")" "$N" $want >"$out" 2>&1
  rc=$?
  it_reap "$SERVER_PID"; it_forget "$SERVER_PID"
  CLI=$(grep '^extra' "$out"); SRV=$(grep '^extra' "$SERVER_LOG")
  detail="client: $CLI; server: $SRV"
  [ $rc -eq 0 ] && [ -n "$CLI" ] && [ -n "$SRV" ] ||
    { detail="client exit $rc; $detail; $(tail -n 2 "$out" "$SERVER_LOG" | tr '\n' ' ')"; rc=1; }
}

# fc_under MAX_EVENTFDS / fc_upgraded: fc_case's counts checked (rc, detail)
fc_under() {
  local max=$1
  [ $rc -eq 0 ] || return
  for e in "$CLI" "$SRV"; do
    set -- $e # extra E eventfds V
    { [ "$2" -le $MAX_EXTRA ] && [ "$4" -le "$max" ]; } || { rc=1; detail="too many: $detail"; }
  done
}
fc_upgraded() {
  [ $rc -eq 0 ] || return
  for e in "$CLI" "$SRV"; do
    set -- $e
    [ "$4" -ge $((2 * N)) ] || { rc=1; detail="fewer eventfds than upgraded connections: $detail"; }
  done
}

for MODE in $(it_modes); do
  name="$N connections under the threshold: no descriptor beyond their sockets"
  FABSOCK_UPGRADE_BYTES=4096 fc_case # the default, whatever point the run upgrades at
  fc_under 1
  tap_result $rc "$name [$MODE]" "$detail" "$SERVER_LOG"

  name="$N connections under the threshold in an epoll set (an event loop): no descriptor beyond their sockets"
  FC_SERVER=eserver FABSOCK_UPGRADE_BYTES=4096 fc_case
  fc_under 2 # the set's bell is one eventfd
  tap_result $rc "$name [$MODE]" "$detail" "$SERVER_LOG"

  [ "$MODE" = both ] || continue
  for FC_SERVER in server eserver; do
    name="$N connections upgraded at once: each holds its wake eventfd and the peer's"
    [ $FC_SERVER = eserver ] && name="$N connections upgraded at once into an epoll set: each holds its wake eventfd and the peer's"
    FABSOCK_UPGRADE_BYTES=0 fc_case $((2 * N))
    fc_upgraded
    tap_result $rc "$name [$MODE]" "$detail" "$SERVER_LOG"
  done
  unset FC_SERVER

  # Doorbells (the default), both ends blocking: no epoll set at either
  # end, so each connection's peer rings its process's door, and a wait
  # leases a wake eventfd from the process's pool (docs/design.md 1.7).
  name="$N blocking connections upgraded at once, doorbells: no descriptor per connection"
  hold=$IT_TMP/fdcost.hold.$RANDOM pf=$IT_TMP/fdcost.door.port
  rm -f "$hold" "$pf"
  real_python
  FC_HOLD=$hold FABSOCK_DOORBELL=1 FABSOCK_UPGRADE_BYTES=0 \
    start_server fdcost "$IT_PYTHON" "$IT_DIR/fdcost.py" server "$pf" "$N"
  rc=0 detail=
  if ! wait_file "$pf" "$SERVER_PID" 20; then
    server_status; rc=1; detail="server did not start ($SRV_STATUS)"
  else
    port=$(cat "$pf")
    FC_HOLD=$hold FABSOCK_DOORBELL=1 FABSOCK_UPGRADE_BYTES=0 \
      start_bg_client fdcost "$IT_PYTHON" "$IT_DIR/fdcost.py" client "$port" "$N"
    for _ in $(seq 400); do
      grep -q '^extra' "$SERVER_LOG" && grep -q '^extra' "$BG_LOG" && break
      kill -0 "$BG_PID" 2>/dev/null || break
      sleep 0.05
    done
    expect_fabric "$port" "$FABSOCK_EXPECT_FABRIC" 10 || { rc=1; detail="$FABRIC_DETAIL; "; }
  fi
  touch "$hold"
  [ -n "${BG_PID:-}" ] && { wait "$BG_PID" || rc=1; it_forget "$BG_PID"; }
  it_reap "$SERVER_PID"; it_forget "$SERVER_PID"
  CLI=$(grep '^held extra' "$BG_LOG" | cut -d' ' -f2-); SRV=$(grep '^held extra' "$SERVER_LOG" | cut -d' ' -f2-)
  detail+="client: $CLI; server: $SRV"
  [ -n "$CLI" ] && [ -n "$SRV" ] || rc=1
  # extra E eventfds V doors D: the library's own; one door per process
  # (an eventfd and a memfd), whichever came first, the process's or its
  # thread's (a connection whose rendezvous came before its thread's first
  # wait on it gets the process's; before the two were one, the client
  # held both in most runs); the peer's door's eventfd; the agent's
  # eventfd; a lease or two.  At most 6 eventfds, where a wake eventfd per
  # connection would make 40 or 80.
  for e in "$CLI" "$SRV"; do
    set -- $e
    [ $rc -eq 0 ] && [ "${2:-99}" -le $((MAX_EXTRA + 4)) ] && [ "${4:-99}" -le 6 ] &&
      [ "${6:-99}" -eq 1 ] || rc=1
  done
  tap_result $rc "$name [$MODE]" "$detail" "$SERVER_LOG"
  BG_PID=
done
it_done
