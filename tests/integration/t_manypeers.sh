#!/bin/bash
# t_manypeers: a server of many client processes near its descriptor limit
# (tests/integration/manypeers.py: an epoll echo server; a process per
# client connection, 20 round trips of 8 KiB each, checked, then 2 s idle).
#   100 client processes at once against the server under ulimit -n 128
#   (plain TCP needs about 110): every connection accepted at the first try
#   (no EMFILE) and echoed.  A client process's doorbell costs the server
#   one eventfd (base/bell.h); they were kept past the library's fd budget,
#   and the server's own accept() failed with EMFILE for good (89 of 100
#   accepted); the rendezvous in flight held up to 5 of ours each until
#   accept(), and made it fail now and then.  Past the budget now, a client
#   is told so: in [both] every connection is on the fabric or on TCP with
#   reason resources (pending, on the accepting end), never another.
#   60 client processes, the same: in [both] at least one connection
#   reaches the fabric (the server keeps doorbells up to an eighth of its
#   limit).
#   8 client processes that upgrade after the server used its last
#   descriptor (it opens /dev/null until EMFILE once it accepted them):
#   the library's agent cannot accept their rendezvous.  It polled the
#   readable listener again at once, 100% of a CPU for good; unwatched, its
#   backlog held the sockets the clients passed, and the server never saw
#   their EOF.  The server's CPU time, all its threads, from then to the
#   last EOF (about 2.5 s) must stay under half of that time.
#   Doorbells on, whatever the pass: without them each upgraded connection
#   holds two descriptors of ours at each end (its wake eventfd and its
#   peer's), kept within three quarters of the limit as the connection's fd
#   reads it; a server that accelerated many while small and then grew past
#   that can still run out (docs/design.md 1.7).
. "$(dirname "$0")/lib.sh"
require_cmd python3
export FABSOCK_DOORBELL=1
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-120}

mp_case() { # N FILL NOFILE: runs it in MODE; sets rc, detail
  local n=$1 fill=$2 lim=$3 pf out cpid e line cpu wall shm bad i rows
  pf=$IT_TMP/manypeers.$MODE.$RANDOM.port out=$IT_TMP/manypeers.$MODE.$RANDOM.out
  rc=0 detail=
  real_python
  start_server manypeers sh -c 'ulimit -n "$0" && exec "$@"' "$lim" "$IT_PYTHON" "$IT_DIR/manypeers.py" server "$pf" "$n" "$fill"
  if ! wait_file "$pf" "$SERVER_PID" 20; then
    server_status; rc=1; detail="server did not start ($SRV_STATUS)"; stop_server; return
  fi
  local go=-
  [ "$fill" = 1 ] && go=$pf.go
  run_client "$IT_PYTHON" "$IT_DIR/manypeers.py" clients "$(cat "$pf")" "$n" $go "$pf.ready" "$pf.hold" >"$out" 2>&1 &
  cpid=$!
  # Where the connections went, once every client made its round trips
  # (they wait for the hold file).
  for i in $(seq 600); do [ -e "$pf.ready" ] && break; kill -0 "$cpid" 2>/dev/null || break; sleep 0.1; done
  shm=0 bad=0
  if fabric_enabled; then
    rows=$(conn_reasons "$(cat "$pf")")
    shm=$(printf '%s\n' $rows | grep -c '^shm/\|^rdma/' || true)
    bad=$(printf '%s\n' $rows | grep '/' | grep -vc '^shm/\|^rdma/\|^tcp/resources$\|^tcp/pending$' || true)
    detail="stat: $(printf '%s\n' $rows | sed 's/^[^ ]* //' | sort | uniq -c | tr -s ' ' | tr '\n' ';'); "
  fi
  touch "$pf.hold"
  wait "$cpid"; e=$?
  it_reap "$SERVER_PID"; it_forget "$SERVER_PID"
  line=$(grep '^accepted' "$SERVER_LOG")
  detail+="server: ${line:-$(tail -n 1 "$SERVER_LOG")}; $(grep '^clients' "$out" || tail -n 1 "$out")"
  [ "$e" -eq 0 ] && [ -n "$line" ] || rc=1
  set -- $line # accepted A errors E cpu_ms C wall_ms W
  [ "${2:-0}" = "$n" ] || rc=1
  [ "$fill" = 1 ] || [ "${4:-1}" = 0 ] || { rc=1; detail="the server's accept() failed; $detail"; }
  cpu=${6:-0} wall=${8:-0}
  if [ "$fill" = 1 ] && [ $((cpu * 2)) -ge "$wall" ]; then
    rc=1; detail="the server spent ${cpu} ms of CPU in ${wall} ms with no descriptor left; $detail"
  fi
  if [ "$fill" = 0 ] && [ "$n" -le 60 ] && [ "$MODE" = both ] && fabric_enabled && [ "$shm" -lt 1 ]; then
    rc=1; detail="no connection reached the fabric; $detail"
  fi
  if [ "$fill" = 0 ] && [ "$MODE" = both ] && fabric_enabled && [ "$bad" -gt 0 ]; then
    rc=1; detail="$bad connections with another reason; $detail"
  fi
}

for MODE in $(it_modes); do
  mp_case 100 0 128
  tap_result $rc "100 client processes, server under ulimit -n 128: every connection accepted at once and echoed [$MODE]" \
    "$detail" "$SERVER_LOG"
  mp_case 60 0 128
  tap_result $rc "60 client processes, server under ulimit -n 128: accepted at once, echoed, some on the fabric [$MODE]" \
    "$detail" "$SERVER_LOG"
  mp_case 8 1 256
  tap_result $rc "8 client processes upgrading while the server has no descriptor left: echoed, no spin [$MODE]" \
    "$detail" "$SERVER_LOG"
done
it_done
