# Shared by the guest tests tests/vm/t_rdma_*.sh (bash; sourced).  TAP helpers, background
# processes that are always cleaned up, readiness waits, `fabsock stat` queries.
#
# Every command that talks to a peer runs under `timeout`: rsocket and a broken fabric can hang,
# and one hung test must not eat the VM's whole time budget.

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# the guest's eth0 (rxe0 sits on it); its address on the link in a two-host run
VM_IP=${FABSOCK_VM_SELF:-10.0.2.15}
RSOCKET_LIB=${RSOCKET_LIB:-/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so}
VMTOOL=$VM_DIR/vmtool.py
# The system's python3 before any other in PATH: wrappers such as pyenv's shims cost seconds per
# start under emulation.
PYTHON=${PYTHON:-$(command -v /usr/bin/python3 || command -v python3)}
T_WORK=$(mktemp -d "${TMPDIR:-/tmp}/fabsock-t.XXXXXX")
# The guest is emulated (TCG, no KVM) and so is its RDMA device: on a loaded 2-core CI host an
# rdma_cm set-up (resolve, queue pairs, connect) has taken over a second, the default bound for
# hardware, and the connection then rightly stayed on tcp (reason timeout).  The guest tests give
# libfabsock's set-up 15 s; the application never waits for it either way.
export FABSOCK_TIMEOUT_MS=${FABSOCK_TIMEOUT_MS:-15000}

t_n=0
t_last=$SECONDS
# Each point is followed by how long it took (the VM is slow: this shows where time goes).
t_took() { echo "#   ($((SECONDS - t_last))s)"; t_last=$SECONDS; }
t_ok()   { t_n=$((t_n + 1)); echo "ok $t_n - $*"; t_took; }
t_fail() { t_n=$((t_n + 1)); echo "not ok $t_n - $*"; t_took; }
t_diag() { local l; while IFS= read -r l; do echo "# $l"; done <<< "$*"; }
# t_why TEXT: why a run did not work, as diagnostics; quiet with T_QUIET_WHY=1 (the baselines of
# peers expected to fail: their description already says how, and their "ERROR" and "Segmentation
# fault" lines only bury a real failure in a CI log's excerpt).
t_why() { [ -n "${T_QUIET_WHY:-}" ] || t_diag "$@"; }
t_skip() { t_n=$((t_n + 1)); echo "ok $t_n - $1 # SKIP ${2:-}"; t_took; }
# t_check STATUS DESC [DIRECTIVE]: ok when STATUS is 0.  DIRECTIVE (e.g. "TODO reason") is
# appended as "# DIRECTIVE".
t_check() {
  local st=$1 desc=$2 dir=${3:+ # $3}
  if [ "$st" = 0 ]; then t_ok "$desc$dir"; else t_fail "$desc$dir"; fi
}
t_done() { echo "1..$t_n"; }
# t_works DESC [DIRECTIVE]: ok when $out (set by the X_run functions below) is "works".
t_works() { t_check "$([ "$out" = works ]; echo $?)" "$@"; }

# ---- background processes ----------------------------------------------------------------------
bg_pids=()
# bg LOGFILE CMD...: start CMD in the background (stdout and stderr to LOGFILE); pid in $bg_pid.
bg() {
  local log=$1; shift
  "$@" > "$log" 2>&1 < /dev/null &
  bg_pid=$!
  bg_pids+=("$bg_pid")
}
# stop PID...: TERM, a short grace, then KILL; reaps.  Only pids this test started.
stop() {
  local p
  for p in "$@"; do kill "$p" 2> /dev/null; done
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    local alive=0
    for p in "$@"; do kill -0 "$p" 2> /dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.2
  done
  for p in "$@"; do kill -9 "$p" 2> /dev/null; wait "$p" 2> /dev/null; done
  return 0
}
# FABSOCK_T_KEEP=DIR (debugging): each test's work directory (its programs' output) is copied
# there at the end, as DIR/HOST.PID.
t_cleanup() {
  [ ${#bg_pids[@]} = 0 ] || stop "${bg_pids[@]}"
  [ -z "${FABSOCK_T_KEEP:-}" ] || cp -r "$T_WORK" "$FABSOCK_T_KEEP/${FABSOCK_VM_HOST:-host}.$$" 2> /dev/null
  rm -rf "$T_WORK"
}
trap t_cleanup EXIT

# wait_listen PORT [SECONDS [PID]]: until something listens on PORT, as a TCP socket (kernel,
# libfabsock) or as an rdma_cm id (rsocket listens on RDMA only).  1 on timeout, 2 as soon as
# PID (the server) has died.
wait_listen() {
  local port=$1 deadline=$((SECONDS + ${2:-20})) pid=${3:-}
  while [ $SECONDS -lt $deadline ]; do
    ss -Hltn "sport = :$port" 2> /dev/null | grep -q . && return 0
    rdma resource show cm_id 2> /dev/null | grep -q "LISTEN.*src-addr [0-9.]*:$port " && return 0
    [ -z "$pid" ] || kill -0 "$pid" 2> /dev/null || return 2
    sleep 0.2
  done
  return 1
}
# server_gone PID LOG: sets $gone to why a server that did not listen is gone, e.g.
# "died: exit 139 (SIGSEGV)".  Not in a subshell: it reaps PID.
server_gone() {
  if kill -0 "$1" 2> /dev/null; then gone="still not listening"; return; fi
  wait "$1" 2> /dev/null
  local st=$?
  if [ $st -gt 128 ]; then gone="died: exit $st (SIG$(kill -l $((st - 128))))"
  else gone="exited $st: $(errno_of "$2")"; fi
}
# wait_file FILE [SECONDS [PID]]: until FILE exists; 1 on timeout, 2 as soon as PID has died.
wait_file() {
  local deadline=$((SECONDS + ${2:-20})) pid=${3:-}
  while [ $SECONDS -lt $deadline ]; do
    [ -e "$1" ] && return 0
    [ -z "$pid" ] || kill -0 "$pid" 2> /dev/null || return 2
    sleep 0.1
  done
  return 1
}

# wait_conn PORT [SECONDS]: until an established TCP connection to PORT exists.
wait_conn() {
  local deadline=$((SECONDS + ${2:-20}))
  while [ $SECONDS -lt $deadline ]; do
    ss -Htn state established "dport = :$1" 2> /dev/null | grep -q . && return 0
    sleep 0.2
  done
  return 1
}

# ---- libfabsock ----------------------------------------------------------------------------------
# have_fabsock: FABSOCK_LIB and FABSOCK_BIN (set by `make check-vm`) point at a built library.
have_fabsock() { [ -n "${FABSOCK_LIB:-}" ] && [ -f "$FABSOCK_LIB" ] && [ -n "${FABSOCK_BIN:-}" ] && [ -x "$FABSOCK_BIN" ]; }
# fabsock_stat OUT_FILE FILTER...: run `fabsock stat --json` into OUT_FILE.json, print the
# connections matching FILTER (vmtool.py stat arguments) into OUT_FILE; 1 if stat failed.
fabsock_stat() {
  local out=$1; shift
  timeout 20 "$FABSOCK_BIN" stat --json > "$out.json" 2> "$out.err" || return 1
  "$PYTHON" "$VMTOOL" stat "$@" < "$out.json" > "$out"
}
# all_on FILE FABRIC: FILE (from fabsock_stat) lists at least one connection on FABRIC, and every
# other one is a connection that never reached the upgrade threshold (reason "pending" with under
# 4 KiB through TCP: a control connection such as iperf3's, kept on TCP by design).
all_on() {
  [ -s "$1" ] && awk -v f="$2" '
    $5 == f { on++; next }
    !($6 == "pending" && $7 + $8 < 4096) { bad = 1 }
    END { exit bad || !on }' "$1"
}
# fabrics FILE: "rdma", "tcp", "tcp,rdma" ...: the fabrics FILE's connections are on.
fabrics() { awk '{ print $5 }' "$1" | sort -u | paste -sd, -; }
# stat_until FILE FABRIC SECONDS FILTER...: fabsock_stat FILE FILTER... again until all the
# matching connections are on FABRIC (an upgrade completes asynchronously) or SECONDS passed.
# FILE keeps the last sample that listed any connection (the program may end meanwhile).
stat_until() {
  local f=$1 want=$2 deadline=$((SECONDS + $3)); shift 3
  : > "$f"
  while :; do
    fabsock_stat "$f.new" "$@" || { cp "$f.new.err" "$f.err"; return 1; }
    [ -s "$f.new" ] || [ ! -s "$f" ] && mv -f "$f.new" "$f"
    all_on "$f" "$want" && return 0
    [ $SECONDS -lt $deadline ] || return 0
    sleep 0.5
  done
}

# ---- programs ------------------------------------------------------------------------------------
# sockperf_summary LOG: "p50 p99 avg" in microseconds from a ping-pong log, or nothing.
sockperf_summary() {
  sed 's/\x1b\[[0-9;]*m//g' "$1" | awk '
    /percentile 50.000 =/ { p50 = $NF } /percentile 99.000 =/ { p99 = $NF }
    /avg-latency=/ { sub(/.*avg-latency=/, ""); sub(/ .*/, ""); avg = $0 }
    END { if (p50 != "") print p50, p99, avg }'
}
# sockperf_clean LOG: the run ended normally with no dropped, duplicated or reordered message.
sockperf_clean() {
  grep -q 'dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0' "$1" &&
    grep -q 'Summary: Latency is' "$1"
}
# errno_of LOG: the first "errno=N Text", else the first error name or text, in a log.
errno_of() {
  { grep -o -E 'errno=[0-9]+ [A-Za-z ]+' "$1"
    grep -o -E '\bE[A-Z]{3,}\b|[A-Z][a-z]+ (refused|reset by peer|timed out)|[Bb]ad file descriptor|No such file or directory|[A-Za-z]+Error: .*' "$1"
  } 2> /dev/null | grep -v -x 'ERROR' | head -n 1
}

# ---- the programs, plain or preloaded ----------------------------------------------------------
# X_run LABEL ENV PORT TIMEOUT runs program X's server and client over $VM_IP:PORT, both with
# the environment assignments ENV (e.g. "LD_PRELOAD=/x.so FABSOCK_TRANSPORT=rdma"; words split on
# blanks; "" for plain), the client bounded by TIMEOUT seconds.  They set:
#   out  works | fails (why) | hangs (killed after TIMEOUT s)
#   res  the figures of a run that worked ("p50 .. us, p99 .. us", "N MB/s", ...)
# When the function named by $probe is set, it is called with PORT while a client connection is
# established (e.g. to take `fabsock stat`).
probe=

# outcome STATUS LOG [TIMEOUT]: sets $out from a client's exit status.
outcome() {
  case $1 in
    0) out=works ;;
    124 | 137) out="hangs (killed after ${3:-?}s)" ;;
    *) out="fails (exit $1${2:+: $(errno_of "$2")})" ;;
  esac
}
# start_server LABEL ENV PORT CMD...: sets $srv; returns 1 (with $out set) if it never listens.
start_server() {
  local label=$1 envs=$2 port=$3; shift 3
  bg "$T_WORK/srv-$label" env $envs "$@"
  srv=$bg_pid
  wait_listen "$port" 30 "$srv" && return 0
  server_gone "$srv" "$T_WORK/srv-$label"
  out="fails (server $gone)"
  t_why "$(tail -n 3 "$T_WORK/srv-$label")"
  stop "$srv"
  return 1
}
# client LOG TIMEOUT PORT ENV CMD...: runs the client (in the background while $probe runs);
# sets $st.
client() {
  local log=$1 to=$2 port=$3 envs=$4; shift 4
  if [ -n "$probe" ]; then
    timeout -k 5 "$to" env $envs "$@" > "$log" 2> "$log.err" < /dev/null &
    local c=$!
    wait_conn "$port" "$to" && "$probe" "$port"
    wait $c
    st=$?
  else
    timeout -k 5 "$to" env $envs "$@" > "$log" 2> "$log.err" < /dev/null
    st=$?
  fi
  cat "$log.err" >> "$log"
}

sockperf_run() {   # ping-pong, 64 B messages, $SOCKPERF_TIME (3) s; also sets sp_p50 sp_p99 sp_avg
  local label=$1 envs=$2 port=$3 to=$4 log=$T_WORK/sockperf-$1
  res= sp_p50= sp_p99= sp_avg=
  start_server "sockperf-$label" "$envs" "$port" sockperf server --tcp -i "$VM_IP" -p "$port" || return
  client "$log" "$to" "$port" "$envs" \
    sockperf ping-pong --tcp -i "$VM_IP" -p "$port" -t "${SOCKPERF_TIME:-3}" -m 64
  outcome $st "$log" "$to"
  if [ $st = 0 ]; then
    if sockperf_clean "$log"; then
      read -r sp_p50 sp_p99 sp_avg <<< "$(sockperf_summary "$log")"
      res="p50 $sp_p50 us, p99 $sp_p99 us"
    else
      out="fails (incomplete run, or lost or reordered messages)"
    fi
  fi
  [ "$out" = works ] || t_why "$(tail -n 4 "$log")"
  stop "$srv"
}

iperf3_run() {     # one stream, $IPERF3_TIME (2) s; also sets ip_mbps
  local label=$1 envs=$2 port=$3 to=$4 log=$T_WORK/iperf3-$1 sent recv mbps
  res= ip_mbps=
  start_server "iperf3-$label" "$envs" "$port" iperf3 -s -B "$VM_IP" -p "$port" -1 || return
  client "$log.json" "$to" "$port" "$envs" iperf3 -c "$VM_IP" -p "$port" -t "${IPERF3_TIME:-2}" -J
  "$PYTHON" "$VMTOOL" iperf3 "$log.json" > "$log" 2>&1
  outcome $st "$log" "$to"
  if [ $st = 0 ]; then
    read -r sent recv mbps < "$log"
    if [ "${recv:-0}" -gt 0 ] 2> /dev/null; then res="$mbps MB/s" ip_mbps=$mbps; else out="fails ($(cat "$log"))"; fi
  elif [ $st != 124 ] && [ $st != 137 ]; then
    out="fails (exit $st: $(cat "$log"))"
  fi
  stop "$srv"
}

redis_run() {      # SET then GET a 64 KiB value (compared), redis-benchmark -n 2000
  local label=$1 envs=$2 port=$3 to=$4 log
  local cli=(timeout -k 5 "$to" env $envs)
  res=
  start_server "redis-$label" "$envs" "$port" redis-server --bind "$VM_IP" --port "$port" \
    --save '' --appendonly no --protected-mode no --daemonize no --dir "$T_WORK" || return
  head -c 32768 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$T_WORK/value"
  log=$T_WORK/redis-set-$label
  "${cli[@]}" redis-cli -h "$VM_IP" -p "$port" -x set k < "$T_WORK/value" > "$log" 2>&1
  st=$?
  [ $st != 0 ] || grep -qx OK "$log" || st=1
  if [ $st = 0 ]; then
    log=$T_WORK/redis-get-$label
    "${cli[@]}" redis-cli -h "$VM_IP" -p "$port" get k > "$log" 2>&1
    st=$?
    if [ $st = 0 ] && ! cmp -s <(cat "$T_WORK/value"; echo) "$log"; then
      out="fails (GET returned different bytes)"; stop "$srv"; return
    fi
  fi
  if [ $st = 0 ]; then
    log=$T_WORK/redis-bench-$label
    "${cli[@]}" redis-benchmark -h "$VM_IP" -p "$port" -n 2000 -c 4 -t set,get --csv > "$log" 2>&1
    st=$?
  fi
  if [ $st = 0 ] && [ -n "$probe" ]; then   # a connection that lives ~3 s, for the probe
    log=$T_WORK/redis-ping-$label
    # GETs of the 64 KiB value: past the upgrade threshold, so the probe sees a fabric
    client "$log" "$to" "$port" "$envs" redis-cli -h "$VM_IP" -p "$port" -r 30 -i 0.1 get k
  fi
  outcome $st "$log" "$to"
  if [ $st = 0 ]; then
    res=$(awk -F'"' '$2 == "SET" || $2 == "GET" { printf "%s%s %.0f/s", sep, $2, $4; sep = ", " }' \
      "$T_WORK/redis-bench-$label")
    [ "$(grep -c -E '^"(SET|GET)"' "$T_WORK/redis-bench-$label")" = 2 ] || out="fails (benchmark incomplete)"
  fi
  [ "$out" = works ] || t_why "redis $label: $(tail -n 3 "$log")"
  stop "$srv"
}
