#!/bin/bash
# t_forksrv: tests/progs/forksrv accepts, forks, the child echoes and the
# parent closes its copy.  Clients: 20 sequential connections of 1 MiB,
# then 4 threads x 5 sequential connections of 256 KiB, then 4 threads x 25
# short connections of 16 KiB written 1 KiB at a time, so that the 4 KiB
# upgrade threshold is crossed (and the rendezvous runs) right around the
# server's fork; every byte verified.  The last shape is the one that caught
# a channel attached by the parent's agent during fork() (the client read
# EOF before any echo) in every run.
# With the server preloaded, a connection held open halfway must have its
# row in `fabsock stat`, in the child that serves it: the parent frees its
# slot right after fork, and the child's copy of the table once lost it.
# The same shapes then run against forksrv -w 2, a prefork server (the
# parent listens, two workers accept: nginx, Apache prefork, gunicorn).
# For both kinds, held connections must be on ${FABSOCK_EXPECT_FABRIC:-the
# expected fabric} in [both]: the process serving a connection is not the
# one whose listener the client finds, so the client looks the holder up
# (docs/design.md, 1.3).
# Then three children holding one accepted connection, the first idle: the
# one that serves it stays on TCP.  A prefork worker that reads nothing for
# 1.5 s after its client crossed the threshold (it lists the connection
# only at its own crossing): on the fabric all the same.  Last, forked
# children that end with _exit must leave no stat table.
. "$(dirname "$0")/lib.sh"
require_progs forksrv mtclient
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-40} # quick clients: a hang must not eat the budget

for MODE in $(it_modes); do
 for KIND in fork prefork; do
  args=(); label=forksrv
  [ $KIND = prefork ] && { args=(-w 2); label="forksrv -w 2"; }
  if ! start_prog_server forksrv forksrv "${args[@]}"; then
    server_status; tap_not_ok "$label [$MODE]" "forksrv did not start ($SRV_STATUS)" "$SERVER_LOG"
    stop_server; continue
  fi
  hold_args
  # A child of a process that set rdma up cannot use rdma: no fabric to
  # wait for (the wait for one took 30 s per server kind).
  rdma_child=
  if [ -n "$HOLD_FILE" ] && [ "$MODE" = both ] && [ "$(fabric_expected)" = rdma ]; then
    rdma_child=1; HOLD=(); HOLD_FILE=
  fi
  name="$label: 2 held connections of 4 MiB"
  out=$IT_TMP/forksrv.held.$KIND.$MODE.out
  run_held_client "forkheld" "$SERVER_PORT" "$out" "$PROGS/mtclient" -p "$SERVER_PORT" -t 2 -n 4M "${HOLD[@]}"
  rc=$?
  tap_result $rc "$name [$MODE]" "$(grep -v '^$' "$out" | tail -n 1)" "$out" "$SERVER_LOG"
  if [ -n "$rdma_child" ]; then
    tap_skip "$name [$MODE] fabric=rdma" "a child of a process that set rdma up cannot use rdma (libfabsock(7)); on shm it upgrades"
  elif [ -n "$HOLD_FILE" ]; then
    tap_result "$FABRIC_STATUS" "$name [$MODE] fabric=$(fabric_expected)" "$FABRIC_DETAIL"
  fi
  for shape in "1 20 1M 64K" "4 5 256K 64K" "4 25 16K 1K"; do
    set -- $shape
    name="$label, $1 client thread(s) x $2 sequential connections x $3"
    [ "$4" = 64K ] || name="$name in $4 writes"
    out=$IT_TMP/forksrv.$KIND.$1.$2.$MODE.out
    run_client "$PROGS/mtclient" -p "$SERVER_PORT" -t "$1" -r "$2" -n "$3" -c "$4" >"$out" 2>&1
    rc=$?
    detail=$(grep -v '^$' "$out" | tail -n 1)
    server_check || { rc=1; detail="$SRV_DETAIL; $detail"; }
    [ $rc -eq 124 ] && detail="client timed out; $detail"
    tap_result $rc "$name [$MODE]" "$detail" "$out" "$SERVER_LOG"
  done
  if [ $KIND = fork ] && [ -n "$FABSOCK_LIB" ] && preloaded server && [ -x "$FABSOCK_BIN" ]; then
    name="forksrv: the child serving a connection has its row in fabsock stat"
    hold=$IT_TMP/forksrv.hold.$MODE
    start_bg_client forkhold "$PROGS/mtclient" -p "$SERVER_PORT" -t 1 -n 64K -w "$hold"
    if wait_file "$hold.ready" "$BG_PID" "$(client_timeout)"; then
      real_python
      rows=$(timeout 10 "$FABSOCK_BIN" stat --json 2>&1 | "$IT_PYTHON" -c '
import json, sys
doc = json.load(sys.stdin)
port = sys.argv[1]
for p in doc.get("processes", []):
    for c in p.get("connections", []):
        if str(c.get("local", "")).endswith(":" + port) and c.get("state") != "listen":
            print("%s[%s] fd %s %s" % (p.get("program"), p.get("pid"), c.get("fd"), c.get("state")))
' "$SERVER_PORT" 2>&1)
      touch "$hold"
      wait "$BG_PID"; rc=$?
      it_forget "$BG_PID"
      if [ $rc -eq 0 ] && [ -n "$rows" ]; then tap_ok "$name [$MODE]" "$(echo $rows)"
      else tap_not_ok "$name [$MODE]" "client exit $rc; server-side rows: '${rows}'" "$BG_LOG"; fi
    else
      touch "$hold"
      tap_not_ok "$name [$MODE]" "client never reached its hold point" "$BG_LOG"
    fi
  fi
  stop_server
 done
done

# An accepted connection three children hold, the first of them idle: the
# child serving it stays on TCP (bytes on a ring would never reach the idle
# one); with the first gone, it upgrades.  The first child's table may stay
# in its own memory, so only the pid the serving child's copy names finds
# it (engine/sockfork.c).  Both ends preloaded, one pass.
if [ -n "$FABSOCK_LIB" ] && [ -x "$FABSOCK_BIN" ] && [ -n "${FABSOCK_TRANSPORT:-}" ] && [ "${FABSOCK_TRANSPORT:-}" != shm ]; then
  tap_skip "forked children sharing an accepted connection; a prefork worker reading late" \
    "runs over 127.0.0.1 with the fabric chosen there (shm); FABSOCK_TRANSPORT=${FABSOCK_TRANSPORT:-} here"
elif [ -n "$FABSOCK_LIB" ] && [ -x "$FABSOCK_BIN" ]; then
  real_python
  # RC OUT NAME WANT WHAT: a script's "ok ROWS" (FABRIC/REASON,...) against
  # WANT, the fabric every row must be on (none: no fabric check).
  rows_verdict() {
    local seen=${2#ok }
    if [ "$1" -ne 0 ] || [ "${2%% *}" != ok ]; then
      tap_not_ok "$3" "exit $1: $2"
    elif [ -z "$4" ]; then
      tap_ok "$3" "$seen (no fabric check)"
    elif [ "$seen" != no-row ] && [ -z "$(echo "$seen" | tr ',' '\n' | grep -v "^$4/")" ]; then
      tap_ok "$3 on $4" "$seen"
    else
      tap_not_ok "$3 on $4" "$5: $seen"
    fi
  }
  for share in idle gone; do
    name="forked children sharing an accepted connection, the first $share: served"
    want=tcp
    [ $share = gone ] && want=${FABSOCK_EXPECT_FABRIC:-}
    sdir=$IT_TMP/statdir.share.$share; mkdir -p "$sdir"
    out=$(LD_PRELOAD=$FABSOCK_LIB timeout 60 "$IT_PYTHON" "$IT_DIR/forkshare.py" "$share" "$sdir" "$FABSOCK_BIN" 2>&1)
    rows_verdict $? "$out" "$name" "$want" "the serving child's row"
  done
  name="a prefork worker that reads 1.5 s late: its connection upgrades"
  want=${FABSOCK_EXPECT_FABRIC:-}
  sdir=$IT_TMP/statdir.late; mkdir -p "$sdir"
  out=$(LD_PRELOAD=$FABSOCK_LIB timeout 60 "$IT_PYTHON" "$IT_DIR/preforklate.py" "$sdir" "$FABSOCK_BIN" 2>&1)
  rows_verdict $? "$out" "$name" "$want" "the worker's row"
fi

# Children that end with _exit (sshd's session children, os._exit in
# Python's forked workers) run no exit handlers: their stat tables must go
# all the same, or each one stays in the directory for good.
if [ -n "$FABSOCK_LIB" ]; then
  name="forked children that _exit leave no stat table behind"
  real_python
  sdir=$IT_TMP/statdir.exit; mkdir -p "$sdir"
  out=$(FABSOCK_STATDIR=$sdir LD_PRELOAD=$FABSOCK_LIB timeout 30 "$IT_PYTHON" -c '
import os, socket
s = socket.socket()  # tracked: the process has a table, and so has each child
kids = []
for _ in range(20):
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    kids.append(pid)
print(sum(os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) == 7 for p in kids), "of 20 exited 7")
' 2>&1)
  left=$(find "$sdir" -name 'fabsock.*.stat' | wc -l)
  if [ "$out" = "20 of 20 exited 7" ] && [ "$left" = 0 ]; then tap_ok "$name" "$out"
  else tap_not_ok "$name" "$out; $left tables left in $sdir"; fi
fi
it_done
