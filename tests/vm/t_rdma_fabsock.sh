#!/bin/bash
# Guest test: libfabsock over a real verbs device.  TAP.
#
#  - two preloaded processes over 10.0.2.15 (FABSOCK_TRANSPORT=rdma): bytes identical, and the
#    connection went rdma according to `fabsock stat --json`;
#  - a writer that exits right after its last bytes (after close, or with the socket open, or
#    through _exit): the reader gets all of them;
#  - a preloaded guest client to a plain server on this machine (10.0.2.2, no RDMA) and to a
#    preloaded one: bytes identical, the connection stays tcp, and no delay beyond a plain run;
#    and redis-cli (an event loop: non-blocking connect) to the plain one answers (rsocket hangs);
#  - rdma_key (a pre-shared key): both ends with the same key go rdma; different keys, a key at
#    one end only: bytes identical, the connection stays tcp with reason "auth";
#  - sockperf, iperf3 and redis with both sides preloaded (FABSOCK_TRANSPORT=rdma): same
#    correctness checks as the plain baseline, and their connections went rdma.
#
# Every point is real (FABSOCK_VM_RDMA_TODO=1 turns the "went rdma" ones into TODO points, for
# a build without the rdma fabric).
#
# Environment: FABSOCK_LIB, FABSOCK_BIN (make check-vm); FABSOCK_VM_HOST_PLAIN and
# FABSOCK_VM_HOST_FABSOCK (run.sh); FABSOCK_VM_TRANSPORT (default rdma).
. "$(dirname "$0")/lib.sh"

if ! have_fabsock; then
  t_skip "libfabsock over rdma" "FABSOCK_LIB / FABSOCK_BIN not set or not built (make check-vm sets them)"
  t_done
  exit 0
fi
transport=${FABSOCK_VM_TRANSPORT:-rdma}
if [ "${FABSOCK_VM_RDMA_TODO:-0}" = 1 ]; then todo="TODO rdma fabric not built"; else todo=; fi
pre="LD_PRELOAD=$FABSOCK_LIB"
pre_rdma="$pre FABSOCK_TRANSPORT=$transport"
SLACK=${FABSOCK_VM_SLACK:-5}   # seconds a preloaded client may take beyond the plain run

# went FABRIC FILE...: every FILE lists connections, all on FABRIC.  Prints what they were on.
went() {
  local want=$1 f ok=0 seen=; shift
  for f in "$@"; do
    all_on "$f" "$want" || ok=1
    seen="$seen${seen:+; }$(fabrics "$f")$(awk '$6 != "none" { r = r " " $6 } END { if (r) print " (reason" r ")" }' "$f")"
  done
  echo "${seen:-no connection}"
  return $ok
}
# listed FILE: fabsock stat listed at least one connection.
listed() { [ -s "$1" ]; }

# ---- echo between two preloaded processes in the guest -------------------------------------
echo_pair() {
  local port=15000 c st
  if ! start_server echo "$pre_rdma" "$port" "$PYTHON" "$VMTOOL" echo-server --bind "$VM_IP" --port "$port"; then
    t_fail "echo server under libfabsock: $out"
    return
  fi
  touch "$T_WORK/hold"
  timeout -k 5 120 env $pre_rdma "$PYTHON" "$VMTOOL" echo-client "$VM_IP:$port" --bytes $((4 << 20)) \
    --chunk 32768 --ready-file "$T_WORK/ready" --hold-file "$T_WORK/hold" > "$T_WORK/echo" 2>&1 &
  c=$!
  if wait_file "$T_WORK/ready" 60 $c; then
    stat_until "$T_WORK/st-echo-c" rdma 3 --peer "$VM_IP:$port"
    fabsock_stat "$T_WORK/st-echo-s" --local "$VM_IP:$port"
  fi
  rm -f "$T_WORK/hold"
  wait $c
  st=$?
  grep -q '"ok": true' "$T_WORK/echo"
  t_check $? "echo, 4 MiB between two preloaded processes over $VM_IP: identical bytes"
  [ $st = 0 ] || t_diag "client exit $st: $(tail -n 3 "$T_WORK/echo")"
  listed "$T_WORK/st-echo-c" && listed "$T_WORK/st-echo-s"
  t_check $? "fabsock stat --json lists the client's and the server's connection"
  [ -s "$T_WORK/st-echo-c.err" ] && t_diag "fabsock stat: $(head -n 3 "$T_WORK/st-echo-c.err")"
  seen=$(went rdma "$T_WORK/st-echo-c" "$T_WORK/st-echo-s")
  t_check $? "echo connection went rdma at both ends: $seen (client; server)" "$todo"
  stop "$srv"
}

# gate_on_rdma GATE PORT PID: once fabsock stat shows the client's connection to PORT on rdma
# (or after 60 s, or once PID is gone), create GATE.  The seams count pushes on rdma: the echo
# client waits at its gate after the first chunk, so the pushes after it all go over rdma however
# long the upgrade took (a loaded CI host's took most of the transfer: too few pushes were left).
gate_on_rdma() {
  local deadline=$((SECONDS + 60))
  while [ $SECONDS -lt $deadline ] && kill -0 "$3" 2> /dev/null; do
    fabsock_stat "$T_WORK/gate-st" --peer "$VM_IP:$2" && awk '$5 == "rdma" { ok = 1 } END { exit !ok }' "$T_WORK/gate-st" &&
      break
    sleep 0.1
  done
  touch "$1"
}

# ---- a silent stall: records published, never posted (FABSOCK_TEST_RDMA_DROP) ---------------
# Seen between two Soft-RoCE guests after a link outage: both queue pairs in RTS, no error, the
# peer missing the last records, both ends waiting for good.  The seam holds the client's pushes
# back from its 20th on, as a stalled requester would; the stall watch must announce the tail
# again after a second of quiet and the echo complete.  (Before the watch, this hung.)
echo_stall() {
  local port=15003 c st
  if [ "$transport" != rdma ]; then
    t_skip "a silent stall on rdma is recovered" "FABSOCK_VM_TRANSPORT=$transport"
    return
  fi
  if ! start_server echo "$pre_rdma" "$port" "$PYTHON" "$VMTOOL" echo-server --bind "$VM_IP" --port "$port"; then
    t_fail "echo server under libfabsock: $out"
    return
  fi
  rm -f "$T_WORK/gate-stall"
  timeout -k 5 120 env $pre_rdma FABSOCK_TEST_RDMA_DROP=20 FABSOCK_LOG=info "$PYTHON" "$VMTOOL" echo-client \
    "$VM_IP:$port" --bytes $((4 << 20)) --chunk 32768 --gate-file "$T_WORK/gate-stall" > "$T_WORK/stall" 2>&1 &
  c=$!
  gate_on_rdma "$T_WORK/gate-stall" "$port" $c
  wait $c
  st=$?
  grep -q '"ok": true' "$T_WORK/stall" && grep -q 'not posted (FABSOCK_TEST_RDMA_DROP)' "$T_WORK/stall" &&
    grep -q 'tail announced again' "$T_WORK/stall"
  t_check $? "a silent stall on rdma (pushes held back from the 20th on) is announced again: echo intact" "$todo"
  [ $st = 0 ] || t_diag "client exit $st: $(grep -v '^{' "$T_WORK/stall" | tail -n 3)"
  grep -q 'tail announced again' "$T_WORK/stall" || t_diag "$(grep '^fabsock' "$T_WORK/stall" | tail -n 3)"
  stop "$srv"
}

# ---- a wedged queue pair: the channel resumes on a new one (FABSOCK_TEST_RDMA_WEDGE) -----------
# Seen between two Soft-RoCE guests after a link outage: a queue pair in RTS whose sends never
# leave, no error anywhere.  The seam wedges one end's queue pair from its 20th push on (posts
# taken, never sent, never completed).  That end's stall watch (client) or the peer's (server:
# it destroys its pair, the client's probes go unanswered) must find it and resume the channel on
# a new queue pair through rdma_cm, each end writing again from where the other's ring stands:
# the echo intact, both ends still on rdma.  (Before the resume, this hung for good.)
echo_wedge() {  # echo_wedge WHO PORT: WHO (client or server) runs with the seam
  local who=$1 port=$2 c st senv= cenv= log
  if [ "$transport" != rdma ]; then
    t_skip "a wedged queue pair ($who) resumes on a new one" "FABSOCK_VM_TRANSPORT=$transport"
    return
  fi
  [ "$who" = server ] && senv="FABSOCK_TEST_RDMA_WEDGE=20" || cenv="FABSOCK_TEST_RDMA_WEDGE=20"
  if ! start_server "wedge-$who" "$pre_rdma $senv FABSOCK_LOG=info" "$port" "$PYTHON" "$VMTOOL" echo-server \
    --bind "$VM_IP" --port "$port"; then
    t_fail "echo server under libfabsock: $out"
    return
  fi
  touch "$T_WORK/hold-wedge"
  rm -f "$T_WORK/gate-wedge-$who"
  timeout -k 5 150 env $pre_rdma $cenv FABSOCK_LOG=info "$PYTHON" "$VMTOOL" echo-client \
    "$VM_IP:$port" --bytes $((4 << 20)) --chunk 32768 --gate-file "$T_WORK/gate-wedge-$who" \
    --ready-file "$T_WORK/ready-wedge-$who" --hold-file "$T_WORK/hold-wedge" --ready-at-end > "$T_WORK/wedge-$who" 2>&1 &
  c=$!
  gate_on_rdma "$T_WORK/gate-wedge-$who" "$port" $c
  # Every byte came back, the connection still open: a resume it needed is over, and counted.
  if wait_file "$T_WORK/ready-wedge-$who" 100 $c; then
    fabsock_stat "$T_WORK/st-wedge-$who" --peer "$VM_IP:$port"
    fabsock_stat "$T_WORK/st-wedge-$who-s" --local "$VM_IP:$port"
  fi
  rm -f "$T_WORK/hold-wedge"
  wait $c
  st=$?
  log="$T_WORK/wedge-$who $T_WORK/srv-wedge-$who"
  # shellcheck disable=SC2086
  grep -q '"ok": true' "$T_WORK/wedge-$who" && grep -q 'queue pair wedged from' $log &&
    grep -q 'resuming on a new queue pair' $log && grep -q 'the peer resumes it on a new queue pair' $log &&
    [ "$(cat $log | grep -c 'resumed; writing again from')" -ge 2 ]
  local ok=$?
  t_check $ok "a wedged queue pair ($who, from its 20th push) resumes on a new one: echo intact" "$todo"
  # fabsock stat shows it: both rows on rdma with a resume counted (columns 5 and 11).
  local rows
  rows=$(cat "$T_WORK/st-wedge-$who" "$T_WORK/st-wedge-$who-s" 2>/dev/null |
    awk '{ printf "%s%s x%s", sep, $5, $11; sep = "; " } $5 == "rdma" && $11 >= 1 { n++ } END { exit n != 2 }')
  t_check $? "fabsock stat counts the resume at both ends ($who wedged): ${rows:-no rows}" "$todo"
  [ $st = 0 ] || t_diag "client exit $st: $(grep -v '^{' "$T_WORK/wedge-$who" | tail -n 3)"
  # shellcheck disable=SC2086
  [ $ok = 0 ] || t_diag "$(grep -h '^fabsock' $log | grep -E 'wedged|resum|refused|reset' | head -n 8)"
  stop "$srv"
}

# ---- the rdma rendezvous under a pre-shared key (FABSOCK_RDMA_KEY_FILE) ----------------------
# echo_auth PORT SERVER_KEY CLIENT_KEY WANT: WANT rdma (both ends) or auth (the client stays tcp
# with reason auth).  A key is a file name under $T_WORK/keys, or "-" for none.
mkdir -p "$T_WORK/keys"
printf 'correct horse battery staple\n' > "$T_WORK/keys/a"
printf 'correct horse battery stable\n' > "$T_WORK/keys/b"
chmod 600 "$T_WORK/keys/a" "$T_WORK/keys/b"
keyenv() { [ "$1" = - ] || echo "FABSOCK_RDMA_KEY_FILE=$T_WORK/keys/$1"; }
echo_auth() {
  local port=$1 sk=$2 ck=$3 want=$4 c st i what="server key $2, client key $3"
  if ! start_server "auth-$port" "$pre_rdma $(keyenv "$sk")" "$port" "$PYTHON" "$VMTOOL" echo-server \
      --bind "$VM_IP" --port "$port"; then
    t_fail "echo server under libfabsock ($what): $out"
    return
  fi
  touch "$T_WORK/hold"
  rm -f "$T_WORK/ready"
  timeout -k 5 120 env $pre_rdma $(keyenv "$ck") "$PYTHON" "$VMTOOL" echo-client "$VM_IP:$port" \
    --bytes $((1 << 20)) --chunk 32768 --ready-file "$T_WORK/ready" --hold-file "$T_WORK/hold" \
    > "$T_WORK/auth-$port" 2>&1 &
  c=$!
  : > "$T_WORK/st-auth-c"
  if wait_file "$T_WORK/ready" 60 $c; then
    for i in $(seq 20); do   # the upgrade, or its refusal, is asynchronous: up to 10 s
      fabsock_stat "$T_WORK/st-auth-c" --peer "$VM_IP:$port"
      if [ "$want" = rdma ]; then all_on "$T_WORK/st-auth-c" rdma && break
      else awk '$6 == "auth" { f = 1 } END { exit !f }' "$T_WORK/st-auth-c" && break; fi
      sleep 0.5
    done
    fabsock_stat "$T_WORK/st-auth-s" --local "$VM_IP:$port"
  fi
  rm -f "$T_WORK/hold"
  wait $c
  st=$?
  grep -q '"ok": true' "$T_WORK/auth-$port"
  t_check $? "echo with $what: identical bytes"
  [ $st = 0 ] || t_diag "client exit $st: $(tail -n 3 "$T_WORK/auth-$port")"
  seen=$(went rdma "$T_WORK/st-auth-c" "$T_WORK/st-auth-s")
  if [ "$want" = rdma ]; then
    t_check $? "$what: the connection went rdma at both ends: $seen (client; server)" "$todo"
  else
    awk '$5 == "tcp" && $6 == "auth" { f = 1 } END { exit !f }' "$T_WORK/st-auth-c"
    t_check $? "$what: the client stays tcp with reason auth: $seen (client; server)" "$todo"
  fi
  stop "$srv"
}

# ---- a preloaded guest client to a server on this machine (no RDMA there) ------------------
# host_echo NAME ADDR [--nonblock-connect]
host_echo() {
  local name=$1 addr=$2 how=${3:+non-blocking} c st plain pre_s
  how=${how:-blocking}
  timeout -k 5 60 "$PYTHON" "$VMTOOL" echo-client "$addr" --bytes $((1 << 20)) ${3:-} > "$T_WORK/h-plain" 2>&1
  plain=$(sed -n 's/.*"elapsed_s": \([0-9.]*\).*/\1/p' "$T_WORK/h-plain")
  touch "$T_WORK/hold"
  rm -f "$T_WORK/ready"
  timeout -k 5 120 env $pre "$PYTHON" "$VMTOOL" echo-client "$addr" --bytes $((1 << 20)) ${3:-} \
    --ready-file "$T_WORK/ready" --hold-file "$T_WORK/hold" > "$T_WORK/h-pre" 2>&1 &
  c=$!
  : > "$T_WORK/st-h"
  # Give an upgrade attempt time to fail (or, wrongly, to succeed) before looking.
  wait_file "$T_WORK/ready" 60 $c && sleep 2 && fabsock_stat "$T_WORK/st-h" --peer "$addr"
  rm -f "$T_WORK/hold"
  wait $c
  st=$?
  pre_s=$(sed -n 's/.*"elapsed_s": \([0-9.]*\).*/\1/p' "$T_WORK/h-pre")
  grep -q '"ok": true' "$T_WORK/h-pre"
  t_check $? "echo, 1 MiB from a preloaded guest client ($how connect) to a $name server on the host ($addr): identical bytes"
  [ $st = 0 ] || t_diag "client exit $st: $(tail -n 3 "$T_WORK/h-pre")"
  seen=$(went tcp "$T_WORK/st-h")
  t_check $? "... and that connection stays tcp: $seen"
  awk -v a="${pre_s:-999}" -v b="${plain:-0}" -v s="$SLACK" 'BEGIN { exit !(a <= b + s) }'
  t_check $? "... without delay: ${pre_s:-?}s preloaded, ${plain:-?}s plain (slack ${SLACK}s)"
}

# ---- a writer that quits right after its last bytes ----------------------------------------
# exit_burst PORT close|exit|_exit: 8 MiB, the second half on rdma, then exit() at once (after
# close, or with the socket open), or _exit() with the socket open (no exit handler runs).  The kernel flushes unfinished rdma writes with the queue pair, so the
# library waits at exit until they landed; the reader must get every byte.  (Soft-RoCE posts
# synchronously, so here this guards the exit path rather than reproducing the loss.)
exit_burst() {
  local port=$1 end=$2 c st
  rm -f "$T_WORK/sink-$port"
  if ! start_server "sink-$port" "$pre_rdma" "$port" "$PYTHON" "$VMTOOL" sink-server --bind "$VM_IP" \
    --port "$port" --out "$T_WORK/sink-$port"; then
    t_fail "sink server under libfabsock: $out"
    return
  fi
  touch "$T_WORK/hold-$port"
  timeout -k 5 120 env $pre_rdma "$PYTHON" "$VMTOOL" burst-client "$VM_IP:$port" --bytes $((8 << 20)) \
    --end "$end" --ready-file "$T_WORK/ready-$port" --hold-file "$T_WORK/hold-$port" \
    > "$T_WORK/burst-$port" 2>&1 &
  c=$!
  wait_file "$T_WORK/ready-$port" 60 $c && stat_until "$T_WORK/st-burst-$port" rdma 10 --peer "$VM_IP:$port"
  rm -f "$T_WORK/hold-$port"
  wait $c
  st=$?
  wait_file "$T_WORK/sink-$port" 60 "$srv"
  local sent got
  sent=$(head -n 1 "$T_WORK/burst-$port")
  got=$(cat "$T_WORK/sink-$port" 2> /dev/null)
  [ $st = 0 ] && [ -n "$got" ] && [ "$(echo "$sent" | tr -d ' ')" = "$(echo "$got" | tr -d ' ')" ]
  t_check $? "writer exits right after its last bytes ($end): the reader got all 8 MiB (sent $sent; got ${got:-nothing}; exit $st)"
  seen=$(went rdma "$T_WORK/st-burst-$port")
  t_check $? "that connection went rdma: $seen" "$todo"
  stop "$srv"
}

# ---- unmodified programs, both sides preloaded ---------------------------------------------------
# Emulated, an upgrade (agent, route, CM handshake) and each `fabsock stat` take a while: sample
# for up to 10 s, and let sockperf and iperf3 run long enough for that.
probe_rdma() { stat_until "$T_WORK/st-$1" rdma 10 --peer "$VM_IP:$1"; }
export SOCKPERF_TIME=${SOCKPERF_TIME:-8} IPERF3_TIME=${IPERF3_TIME:-8}

echo_pair
echo_stall
echo_wedge client 15004
echo_wedge server 15005
exit_burst 15020 close
exit_burst 15021 exit
exit_burst 15022 _exit
echo_auth 15010 a a rdma
echo_auth 15011 a b auth
echo_auth 15012 a - auth
echo_auth 15013 - a auth
if [ -n "${FABSOCK_VM_HOST_PLAIN:-}" ]; then host_echo plain "$FABSOCK_VM_HOST_PLAIN"
else t_skip "preloaded client to a plain host server" "FABSOCK_VM_HOST_PLAIN not set (run through run.sh)"; fi
if [ -n "${FABSOCK_VM_HOST_FABSOCK:-}" ]; then host_echo preloaded "$FABSOCK_VM_HOST_FABSOCK" --nonblock-connect
else t_skip "preloaded client to a preloaded host server" "FABSOCK_VM_HOST_FABSOCK not set (run through run.sh)"; fi

# An event-loop client (non-blocking connect) to a host without RDMA: rsocket's failure case.
if [ -n "${FABSOCK_VM_HOST_PLAIN:-}" ]; then
  t1=$SECONDS
  timeout -k 5 30 env $pre redis-cli -h "${FABSOCK_VM_HOST_PLAIN%:*}" -p "${FABSOCK_VM_HOST_PLAIN#*:}" \
    ping > "$T_WORK/host-ping" 2>&1
  st=$?
  grep -qx ping "$T_WORK/host-ping"
  t_check $? "redis-cli under libfabsock to the host's plain echo server: answered in $((SECONDS - t1))s (exit $st)"
fi

# Each program twice: as it comes (a process's first 16 rdma connections have a completion
# channel of their own), then with every connection on the device's shared one, whose events
# the agent hands to the connection's door (FABSOCK_RDMA_OWN_CHANNELS=0, fabric/rdma/cq.h):
# sockperf's epoll server, iperf3's stream, redis-benchmark's 50 connections.
probe=probe_rdma
for prog in sockperf:11113 iperf3:5203 redis:6392 sockperf:11213:0 iperf3:5213:0 redis:6492:0; do
  IFS=: read -r name port own <<< "$prog"
  envs=$pre_rdma how=
  [ -n "$own" ] && envs="$pre_rdma FABSOCK_RDMA_OWN_CHANNELS=$own" how=" (shared completion channel)"
  : > "$T_WORK/st-$port"
  "${name}_run" "fabsock${own:+-shared}" "$envs" "$port" 60
  t_check "$([ "$out" = works ]; echo $?)" "$name under libfabsock over $VM_IP$how: $out${res:+, $res}"
  listed "$T_WORK/st-$port"
  t_check $? "fabsock stat --json lists $name's connections$how"
  seen=$(went rdma "$T_WORK/st-$port")
  t_check $? "$name's connections went rdma$how: $seen" "$todo"
done
probe=

t_done
