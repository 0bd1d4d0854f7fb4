#!/bin/bash
# t_doorbell: FABSOCK_DOORBELL=1 (docs/design.md 1.7; tests/integration/doorbell.py).
#   Both ends event loops, every connection in one epoll set, upgraded
#   after 64 bytes: each peer rings the other's set's doorbell, so a process holds
#   no descriptor per connection beyond its socket (without doorbells each
#   holds its wake eventfd and the peer's: 2 per connection); checked on
#   shm with `fabsock stat` while the connections are held.  Then each
#   other kind of waiter on such a connection is woken when its bytes come
#   0.3 s later: a blocking recv while nobody waits in the set, poll(), a
#   second epoll set, and 1 MiB through the set with its SHA-256.  In the
#   other modes (one end preloaded, or none) the same runs on TCP.
. "$(dirname "$0")/lib.sh"
require_cmd python3
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-60}
N=${DOORBELL_N:-100}
MAX_EXTRA=8 # the library's own per process (agent, rendezvous, stat), a set's bell and door, a peer's door

# Upgraded after the first 64 bytes, by which time both ends have the
# connection in their set (at 0 bytes the rendezvous may run first, and
# that connection takes wake eventfds).
export FABSOCK_UPGRADE_BYTES=64
export FABSOCK_DOORBELL=1
for MODE in $(it_modes); do
  tag=$MODE
  real_python
  py=("$IT_PYTHON")
  pf=$IT_TMP/door.$MODE.port hf=$IT_TMP/door.$MODE.hold
  rm -f "$pf" "$hf"
  start_server doorbell "${py[@]}" "$IT_DIR/doorbell.py" server "$pf" "$N" "$hf"
  if ! wait_file "$pf" "$SERVER_PID" 20; then
    server_status
    tap_not_ok "$N connections in epoll sets at both ends [$tag]" "server did not start ($SRV_STATUS)" "$SERVER_LOG"
    stop_server
    continue
  fi
  port=$(cat "$pf")
  start_bg_client doorbell "${py[@]}" "$IT_DIR/doorbell.py" client "$port" "$N" "$hf"
  for _ in $(seq 400); do
    grep -q '^held' "$SERVER_LOG" && grep -q '^held' "$BG_LOG" && break
    kill -0 "$BG_PID" 2>/dev/null || break
    sleep 0.05
  done
  name="$N connections in one epoll set at each end: no descriptor per connection beyond its socket"
  rc=0 detail=
  if ! grep -q '^held' "$SERVER_LOG" || ! grep -q '^held' "$BG_LOG"; then
    rc=1 detail="never held: $(tail -n 2 "$SERVER_LOG" "$BG_LOG" | tr '\n' ' ')"
  elif ! expect_fabric "$port" "$(fabric_expected)" 10; then
    rc=1 detail="$FABRIC_DETAIL"
  fi
  # Counted now, every connection upgraded (a count taken before the
  # upgrades finished would say nothing).
  if [ $rc -eq 0 ]; then
    for who in server:$SERVER_PID client:$BG_PID; do
      pid=$(pgrep -P "${who#*:}" | head -n1) # below timeout (env execs python)
      fds=$(find /proc/"$pid"/fd -mindepth 1 2>/dev/null | wc -l)
      efds=$(find /proc/"$pid"/fd -mindepth 1 -lname 'anon_inode:\[eventfd\]' 2>/dev/null | wc -l)
      detail+="${detail:+; }${who%%:*} $fds fds ($efds eventfds)"
      [ "$fds" -le $((N + MAX_EXTRA + 10)) ] || rc=1 # python's own few
      [ "$MODE" != both ] || [ "$efds" -le 4 ] || rc=1
    done
  fi
  tap_result $rc "$name [$tag]" "$detail" "$SERVER_LOG"
  touch "$hf"
  wait "$BG_PID"
  crc=$?
  it_forget "$BG_PID"
  wait "$SERVER_PID"
  src=$?
  it_forget "$SERVER_PID"
  for w in 'blocking recv' 'poll' 'second epoll set' 'event loop 1 MiB'; do
    line=$(grep -m1 -E "^(ok|bad) $w" "$SERVER_LOG")
    [ "${line%% *}" = ok ] && r=0 || r=1
    tap_result $r "a connection of an epoll set woken in a $w [$tag]" "${line:-no result (server exit $src)}" "$SERVER_LOG"
  done
  line=$(grep -m1 -E '^(ok|bad) hash' "$BG_LOG")
  [ "${line%% *}" = ok ] && [ $crc -eq 0 ] && [ $src -eq 0 ] && r=0 || r=1
  tap_result $r "1 MiB echoed intact, both ends exit 0 [$tag]" "${line:-no hash} (client $crc, server $src)" "$BG_LOG"
done
it_done
