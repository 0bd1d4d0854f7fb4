#!/bin/bash
# t_forkwait: a fork child waits on a connection its parent upgraded
# (tests/integration/forkwait.py), the parent in waitpid() meanwhile: sshd's
# session child inherits a connection its monitor upgraded.  With
# doorbells the peer rings the parent's door, which only the parent drains;
# the child watches it (engine/door.h, fs_door_watch) instead of sleeping
# its waits out to their 20 ms bound.  Spinning is off
# (FABSOCK_SPIN_US=0) and the client echoes 1 ms late, so that every wait
# sleeps: 100 round trips sleeping in recv(), then 100 in poll(), then 100
# in an epoll set of the child's own, must take less than 1.5 s each.  Not
# a race with the machine's load: woken, a phase takes ~0.11 s here (its
# 100 echoes' 1 ms sleeps); sliced, every wait ends at its 20 ms bound, 2 s
# and more however idle the machine.  The parent makes 100
# before the fork and 100 after the child's exit.  Then again with the
# child's round trips the first after the upgrade: its copy of the
# connection switches both directions to the fabric, and the parent's copy,
# which never did, must follow (it wrote a second SWITCH, and its peer
# reset the connection), or only closes it (the client must read EOF and
# exit 0).  Echoes are checked.
. "$(dirname "$0")/lib.sh"
require_cmd python3
real_python
export FABSOCK_SPIN_US=0
N=100
for MODE in $(it_modes); do
 for how in parent-first child-first child-only; do
  name="a fork child's waits on its parent's upgraded connection: woken, not sliced"
  [ $how = child-first ] && name="the child switches both directions, then its parent uses the connection"
  [ $how = child-only ] && name="the child switches both directions, then its parent closes: the peer reads EOF"
  pf=$IT_TMP/forkwait.$MODE.$how.port hold=$IT_TMP/forkwait.$MODE.$how.hold
  rm -f "$pf" "$hold"
  start_server forkwait-$how "$IT_PYTHON" "$IT_DIR/forkwait.py" server "$pf" "$hold" $N $how
  rc=0 detail=
  if ! wait_file "$pf" "$SERVER_PID" 20; then
    server_status; rc=1; detail="server did not start ($SRV_STATUS)"
  else
    port=$(cat "$pf")
    start_bg_client forkwait-$how "$IT_PYTHON" "$IT_DIR/forkwait.py" client "$port"
    it_exchanged_fabric "$port"
  fi
  it_release_reap "$hold"
  phases=('parent before' 'child recv' 'child poll' 'child epoll' 'parent after')
  [ $how = child-first ] && phases=('child recv' 'child poll' 'child epoll' 'parent after')
  [ $how = child-only ] && phases=('child recv' 'child poll' 'child epoll')
  for ph in "${phases[@]}"; do
    line=$(grep -m1 "^$ph $N round trips in" "$SERVER_LOG")
    secs=${line##* in }; secs=${secs% s}
    detail+="$ph ${secs:-?} s; "
    [ -n "$line" ] && awk -v s="$secs" 'BEGIN { exit !(s < 1.5) }' || rc=1
  done
  tap_result $rc "$name [$MODE]" "${detail%; } (server exit $SRC)" "$SERVER_LOG" "$BG_LOG"
 done
done
it_done
