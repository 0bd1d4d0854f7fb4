# tests/integration/lib.sh: helpers for the integration tests (bash).
# shellcheck shell=bash disable=SC2034
#
# Each t_*.sh sources this file, then runs real, unmodified programs as a
# server and a client in every mode and compares the outcome with plain:
#   plain   nothing preloaded
#   client  only the client runs with LD_PRELOAD=$FABSOCK_LIB
#   server  only the server does
#   both    both do (the case a fabric can be used in)
# and reports TAP: "ok N - name [mode]", "not ok N - name [mode] # failed: ...",
# "ok N - name # SKIP reason" when a program is not installed, then
# "1..N" and "# N passed, N failed, N skipped".
#
# Environment (the Makefile sets the first four; all are optional):
#   FABSOCK_LIB           the preload library; unset/empty: preload modes run
#                         without a preload (tests the harness itself)
#   FABSOCK_BIN           the `fabsock` tool (for fabric checks)
#   top_srcdir, top_builddir
#   FABSOCK_IT_MODES      modes to run (default "plain client server both")
#   FABSOCK_IT_PROGS      where tests/progs binaries are ($top_builddir/tests/progs)
#   FABSOCK_IT_TIMEOUT    seconds for one client command (60; quick tests/progs
#                         clients use IT_CLIENT_TIMEOUT, 20-40, set per test)
#   FABSOCK_IT_POLL_MS    a tests/progs poll() that waits longer is a hang (15000)
#   FABSOCK_IT_DUPLEX_MIB size of the full-duplex transfer, each way (256)
#   FABSOCK_IT_KEEP=1     keep the scratch directory (logs, data) for a look
#   FABSOCK_IT_VERBOSE=1  echo the commands that are run (on stderr)
#   FABSOCK_EXPECT_FABRIC fabric a connection must use when both ends are
#                         preloaded (e.g. "shm"); unset: fabric checks are no-ops.
#                         With one end preloaded the expected fabric is "tcp".

set -u
set -o pipefail

IT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
IT_NAME=${IT_NAME:-$(basename "$0" .sh)}
: "${top_srcdir:=$(cd "$IT_DIR/../.." && pwd)}"
if [ -z "${top_builddir:-}" ]; then
  if [ -d "$PWD/tests/progs" ] && [ -f "$PWD/Makefile" ]; then top_builddir=$PWD; else top_builddir=$top_srcdir; fi
fi
: "${FABSOCK_LIB:=}"
: "${FABSOCK_BIN:=$top_builddir/fabsock}"
: "${FABSOCK_IT_PROGS:=$top_builddir/tests/progs}"
: "${FABSOCK_IT_TIMEOUT:=60}"
: "${FABSOCK_EXPECT_FABRIC:=}"
IT_SERVER_TIMEOUT=$((FABSOCK_IT_TIMEOUT * 3))
PROGS=$FABSOCK_IT_PROGS
export LC_ALL=C

IT_N=0 IT_PASS=0 IT_FAIL=0 IT_SKIP=0
IT_PIDS=()
MODE=plain

IT_TMP=$(mktemp -d "${TMPDIR:-/tmp}/fabsock-it.${IT_NAME}.XXXXXX") || { echo "Bail out! mktemp failed"; exit 1; }
export TMPDIR=$IT_TMP

# ---- cleanup -----------------------------------------------------------------
it_cleanup() {
  local p
  for p in "${IT_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${IT_PIDS[@]}"; do it_reap "$p"; done
  if [ "${FABSOCK_IT_KEEP:-0}" = 1 ]; then
    echo "# kept scratch directory $IT_TMP"
  else
    rm -rf "$IT_TMP"
  fi
}
trap it_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Wait (up to 5 s) for a background pid, then SIGKILL it (and its group).
it_reap() {
  local p=$1 i
  for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$p" 2>/dev/null; then
    kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null
  fi
  wait "$p" 2>/dev/null
  return 0
}

it_vlog() { [ "${FABSOCK_IT_VERBOSE:-0}" = 1 ] && echo "+ [$MODE] $*" >&2; return 0; }

# ---- TAP ---------------------------------------------------------------------
# IT_NAME_SUFFIX (run.sh, FABSOCK_IT_UPGRADE) ends every test's name.
tap_ok() { IT_N=$((IT_N + 1)); IT_PASS=$((IT_PASS + 1)); echo "ok $IT_N - $1${IT_NAME_SUFFIX:-}${2:+ # $2}"; }
tap_skip() { IT_N=$((IT_N + 1)); IT_SKIP=$((IT_SKIP + 1)); echo "ok $IT_N - $1${IT_NAME_SUFFIX:-} # SKIP $2"; }
# tap_not_ok NAME DETAILS [LOGFILE...]: details go on the line (never starting
# with a TAP directive word), the tail of each log file as diagnostics.
tap_not_ok() {
  local name=$1 details=$2 f
  shift 2
  IT_N=$((IT_N + 1)); IT_FAIL=$((IT_FAIL + 1))
  details=$(printf '%s' "$details" | tr '\n' ' ' | cut -c1-600)
  echo "not ok $IT_N - $name${IT_NAME_SUFFIX:-} # failed: $details"
  for f in "$@"; do
    [ -s "$f" ] || continue
    echo "#   --- $(basename "$f") (last lines)"
    tail -n 12 "$f" | sed 's/^/#   /'
  done
  it_print_hangs
}
# stream_run PROG TAG EARLY WAIT SARGS CARGS: one run of a one-way stream
# test program (tests/progs/splicer, uringio: -l/-c, -P, -p, -n, -H, -w as
# they document), 8 MiB from client to server; prints both ends' lines and
# "client exit N".  EARLY set: FABSOCK_UPGRADE_BYTES=0 should be in the
# environment, and the client is held after connect until the connection
# shows its fabric (a "note:" line when it does not).  STREAM_STAT gets a
# hook_stat.py snapshot taken while both ends hold after their last byte;
# WAIT "DIR REASON" (both ends preloaded only) waits for the DIR end to show
# REASON first, 10 s at most.  SARGS, CARGS: more arguments (word-split).
stream_run() {
  local prog=$1 tag=$2 early=$3 wait=$4 sargs=$5 cargs=$6 base hold=() pf port i
  base=$IT_TMP/$prog.$tag.$MODE
  pf=$base.port
  rm -f "$base".*
  [ -n "$early" ] && hold=(-H "$base.hold")
  # shellcheck disable=SC2086
  start_server "$prog-$tag" "$PROGS/$prog" -l -P "$pf" -w "$base.ends" $sargs
  if ! wait_file "$pf" "$SERVER_PID" 20; then echo "setup: server did not start"; stop_server; return; fi
  port=$(cat "$pf")
  # shellcheck disable=SC2086
  start_bg_client "$prog-$tag" "$PROGS/$prog" -c -p "$port" -n 8M "${hold[@]}" -w "$base.endc" $cargs
  local cpid=$BG_PID clog=$BG_LOG
  if [ -n "$early" ]; then
    wait_file "$base.hold.ready" "$cpid" 20 && expect_fabric "$port" "$(fabric_expected)" 10 ||
      echo "note: not on the fabric before the first byte: ${FABRIC_DETAIL:-client not held}"
    touch "$base.hold"
  fi
  STREAM_STAT=
  if wait_file "$base.endc.ready" "$cpid" 30 && wait_file "$base.ends.ready" "$SERVER_PID" 30 &&
    [ "$MODE" != plain ]; then
    for i in $(seq 50); do
      STREAM_STAT=$(timeout 10 "$FABSOCK_BIN" stat --json 2>&1 | "$IT_PYTHON" "$IT_DIR/hook_stat.py" "$port")
      [ -z "$wait" ] || [ "$MODE" != both ] && break
      [[ " $(grep -m1 "dir=${wait% *} " <<<"$STREAM_STAT") " == *" reason=${wait#* } "* ]] && break
      sleep 0.2
    done
  fi
  touch "$base.endc" "$base.ends"
  { wait "$cpid"; } 2>/dev/null
  echo "client exit $?"
  it_forget "$cpid"
  grep -h "^$prog:" "$clog" "$SERVER_LOG"
  for _ in $(seq 100); do server_alive || break; sleep 0.1; done
  stop_server
}

# stream_why OUT: for a one-way stream run whose output OUT holds "client
# exit N" and each end's "PROG: role=R bytes=N crc=X" line, WHY gets what is
# wrong (empty when the client exited 0 and both ends saw the same bytes and
# CRC); STREAM_SERVER gets the server's line.
stream_why() {
  local cl sv
  WHY=
  grep -qx 'client exit 0' "$1" || WHY="client: $(grep -m1 '^client exit' "$1")"
  cl=$(grep -m1 'role=client' "$1") sv=$(grep -m1 'role=server' "$1")
  if [ -z "$cl" ] || [ -z "$sv" ] || [ "${cl#*bytes=}" != "${sv#*bytes=}" ]; then
    WHY="${WHY:+$WHY; }bytes differ: client '${cl:-none}', server '${sv:-none}'"
  fi
  STREAM_SERVER=$sv
}

# ends_tcp_why STAT WANT [SKIPDIR]: append to WHY each preloaded end (its
# hook_stat.py line in STAT; dir=SKIPDIR ends left out) that is not on TCP,
# or, when WANT is set, does not show reason WANT.
ends_tcp_why() {
  local d who l
  for d in connect accept; do
    [ "$d" = "${3:-}" ] && continue
    who=client; [ $d = accept ] && who=server
    preloaded $who || continue
    l=" $(grep -m1 "dir=$d " <<<"$1") "
    if [[ $l != *" fabric=tcp "* || ( -n $2 && $l != *" reason=$2 "* ) ]]; then
      WHY="${WHY:+$WHY; }$who:${l:- not in fabsock stat}"
    fi
  done
}

# tap_result STATUS NAME DETAILS [LOGS...]: ok when STATUS is 0.
tap_result() {
  local st=$1 name=$2 details=$3
  shift 3
  if [ "$st" -eq 0 ]; then tap_ok "$name" "$details"; else tap_not_ok "$name" "$details" "$@"; fi
}
tap_diag() { echo "# $*"; }
# tap_todo NAME REASON DETAILS: a known, open bug (TAP TODO: reported, not
# counted as a failure).  The reason names the bug so it stays visible.
tap_todo() {
  IT_N=$((IT_N + 1))
  echo "not ok $IT_N - $1${IT_NAME_SUFFIX:-} # TODO $2 ($(printf '%s' "$3" | tr '\n' ' ' | cut -c1-320))"
}

it_done() {
  [ -n "${IT_UNDER_RUNNER:-}" ] || echo "1..$IT_N"
  echo "# $IT_NAME: $IT_PASS passed, $IT_FAIL failed, $IT_SKIP skipped"
  [ "$IT_FAIL" -eq 0 ]
  exit $?
}

# skip_all REASON [COUNT]: the whole script cannot run (a program is not
# installed): one SKIP line per mode so counts stay comparable.
skip_all() {
  local reason=$1 name=${2:-$IT_NAME} m
  for m in $(it_modes); do tap_skip "$name [$m]" "$reason"; done
  it_done
}

# need_cmd CMD...: 0 when all are installed, else sets IT_MISSING.
need_cmd() {
  local c
  IT_MISSING=
  for c in "$@"; do command -v "$c" >/dev/null 2>&1 || IT_MISSING="${IT_MISSING:+$IT_MISSING, }$c"; done
  [ -z "$IT_MISSING" ]
}
# need_progs NAME...: the tests/progs binaries.
need_progs() {
  local p
  IT_MISSING=
  for p in "$@"; do [ -x "$PROGS/$p" ] || IT_MISSING="${IT_MISSING:+$IT_MISSING, }$p"; done
  [ -z "$IT_MISSING" ]
}
require_cmd() { need_cmd "$@" || skip_all "$IT_MISSING not installed"; }
require_progs() { need_progs "$@" || skip_all "tests/progs not built ($IT_MISSING missing in $PROGS; run make check)"; }

# ---- modes and the preload ---------------------------------------------------
it_modes() { echo "${FABSOCK_IT_MODES:-plain client server both}"; }

# preloaded ROLE: is ROLE (client, server or any = a single-process test)
# preloaded in the current MODE?
preloaded() {
  case "$MODE:$1" in
    plain:*) return 1 ;;
    both:* | *:any) return 0 ;;
    client:client | server:server) return 0 ;;
    *) return 1 ;;
  esac
}
# Sets the array PRE to the command prefix that preloads ROLE in MODE.
pre_for() {
  PRE=()
  if [ -n "$FABSOCK_LIB" ] && preloaded "$1"; then
    PRE=(env "LD_PRELOAD=$FABSOCK_LIB${LD_PRELOAD:+:$LD_PRELOAD}")
  fi
}

# Checked once per script: a FABSOCK_LIB that is set must exist.
it_check_lib() {
  if [ -n "$FABSOCK_LIB" ] && [ ! -f "$FABSOCK_LIB" ]; then
    echo "Bail out! FABSOCK_LIB=$FABSOCK_LIB does not exist (build the library first)"
    exit 1
  fi
  if [ -z "$FABSOCK_LIB" ] && [ -z "${IT_UNDER_RUNNER:-}" ]; then
    echo "# FABSOCK_LIB is unset: every mode runs without a preload"
  fi
}
it_check_lib

# run_client CMD...: the client, in the foreground, preloaded per MODE, with
# a timeout (exit 124 when it ran out): $IT_CLIENT_TIMEOUT when a test sets
# a shorter one for quick clients, else $FABSOCK_IT_TIMEOUT.  Output goes
# where the caller says.
client_timeout() { echo "${IT_CLIENT_TIMEOUT:-$FABSOCK_IT_TIMEOUT}"; }
run_client() {
  pre_for client
  it_vlog "client: ${PRE[*]} $*"
  it_timeout "$(client_timeout)" "${PRE[@]}" "$@"
}
# run_single CMD...: a program that is client and server at once.
run_single() {
  pre_for any
  it_vlog "single: ${PRE[*]} $*"
  it_timeout "$(client_timeout)" "${PRE[@]}" "$@"
}

# ---- hangs -------------------------------------------------------------------
# it_timeout SECONDS CMD...: timeout -k 5, and a command still running 3 s
# before its time is up is a hang: it_hang_dump records the state of this
# test's processes first, and the next failure report prints it.
it_timeout() {
  local to=$1 rc watch=
  shift
  if [ "$to" -gt 5 ]; then
    ( trap 'kill "$!" 2>/dev/null; exit 0' TERM; sleep $((to - 3)) & wait $!; it_hang_dump ) &
    watch=$!
  fi
  timeout -k 5 "$to" "$@"
  rc=$?
  if [ -n "$watch" ]; then kill "$watch" 2>/dev/null; wait "$watch" 2>/dev/null; fi
  return $rc
}
# it_hang_dump: `fabsock stat`, then for every process below this script
# with the library loaded, its threads' stacks (gdb, when installed; else
# each thread's kernel wait channel), into $IT_TMP/hang.*.
it_hang_dump() {
  local f=$IT_TMP/hang.$BASHPID p lib
  lib=$(basename "${FABSOCK_LIB:-libfabsock.so}")
  {
    echo "hang dump at $(date +%T) [$MODE]; fabsock stat:"
    timeout 10 "$FABSOCK_BIN" stat 2>&1 | head -n 120
    for p in $(ps -e -o pid=,ppid= | awk -v top=$$ '{ par[$1] = $2 }
        END { for (p in par) for (q = par[p]; q > 1; q = par[q]) if (q == top) { print p; break } }'); do
      grep -q -F -- "$lib" "/proc/$p/maps" 2>/dev/null || continue
      echo "== pid $p: $(tr '\0' ' ' < "/proc/$p/cmdline" | cut -c1-100)"
      if command -v gdb > /dev/null; then
        timeout 20 gdb -p "$p" -batch -nx -ex 'thread apply all bt 12' 2>/dev/null |
          grep -E '^(Thread|#)' | sed -E 's/^(#[0-9]+) +0x[0-9a-f]+ in /\1 /; s/ \(.*\) (at|from) / \1 /' | cut -c1-150
      else
        for t in /proc/"$p"/task/*; do
          echo "  thread ${t##*/}: state $(cut -d' ' -f3 "$t/stat" 2>/dev/null), waits in $(cat "$t/wchan" 2>/dev/null)"
        done
      fi
    done
  } > "$f" 2>&1
}
# it_print_hangs: hang dumps not reported yet, as diagnostics.
it_print_hangs() {
  local f
  for f in "$IT_TMP"/hang.*; do
    [ -f "$f" ] || continue
    echo "#   --- state before the timeout"
    head -n 240 "$f" | sed 's/^/#   /'
    rm -f "$f"
  done
}
# start_server NAME CMD...: in the background, preloaded per MODE, output in
# $IT_TMP/NAME.MODE.log; sets SERVER_PID (the pid of its `timeout`, which
# runs the server in its own process group) and SERVER_LOG.
start_server() {
  local name=$1
  shift
  pre_for server
  SERVER_LOG=$IT_TMP/$name.$MODE.log
  it_vlog "server: ${PRE[*]} $*"
  timeout -k 5 "$IT_SERVER_TIMEOUT" "${PRE[@]}" "$@" >"$SERVER_LOG" 2>&1 </dev/null &
  SERVER_PID=$!
  IT_PIDS+=("$SERVER_PID")
}
# it_forget PID: a reaped pid leaves the cleanup list (its number may be reused).
it_forget() {
  local q keep=()
  for q in "${IT_PIDS[@]}"; do [ "$q" = "$1" ] || keep+=("$q"); done
  IT_PIDS=("${keep[@]}")
}
# stop_server [PID]: SIGTERM (timeout forwards it to the whole group), reap.
stop_server() {
  local p=${1:-$SERVER_PID}
  kill -TERM "$p" 2>/dev/null
  it_reap "$p"
  it_forget "$p"
}
# Start a background client like a server (for tests that need both running).
start_bg_client() {
  local name=$1
  shift
  pre_for client
  BG_LOG=$IT_TMP/$name.$MODE.client.log
  it_vlog "bg client: ${PRE[*]} $*"
  timeout -k 5 "$(client_timeout)" "${PRE[@]}" "$@" >"$BG_LOG" 2>&1 </dev/null &
  BG_PID=$!
  IT_PIDS+=("$BG_PID")
}

# ---- ports -------------------------------------------------------------------
IT_USED_PORTS=" "
# pick_port: a TCP port nobody uses (no socket in any state), below the
# ephemeral range so that client ports never collide with it.
pick_port() {
  local lo hi base span p i
  read -r lo hi </proc/sys/net/ipv4/ip_local_port_range
  if [ "$lo" -gt 12000 ]; then base=10000; span=$((lo - 10000)); else base=$((hi + 1)); span=$((65000 - hi)); fi
  for i in $(seq 100); do
    p=$((base + (RANDOM * 32768 + RANDOM) % span))
    case "$IT_USED_PORTS" in *" $p "*) continue ;; esac
    if [ -z "$(ss -Htan "( sport = :$p or dport = :$p )" 2>/dev/null)" ]; then
      IT_USED_PORTS="$IT_USED_PORTS$p "
      echo "$p"
      return 0
    fi
  done
  echo "pick_port: no free port found" >&2
  return 1
}

port_listening() {
  if command -v ss >/dev/null 2>&1; then
    [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]
  else
    (exec 3<>"/dev/tcp/${2:-127.0.0.1}/$1") 2>/dev/null
  fi
}
# wait_port PORT [PID] [SECONDS]: until something listens on PORT; fails
# early when PID (the server) has died.
wait_port() {
  local port=$1 pid=${2:-} secs=${3:-20} i
  for i in $(seq $((secs * 20))); do
    port_listening "$port" && return 0
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then return 1; fi
    sleep 0.05
  done
  return 1
}
# wait_file FILE [PID] [SECONDS]: until FILE exists (non-empty).
wait_file() {
  local f=$1 pid=${2:-} secs=${3:-20} i
  for i in $(seq $((secs * 20))); do
    [ -s "$f" ] && return 0
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then [ -s "$f" ]; return; fi
    sleep 0.05
  done
  return 1
}
# start_redis: redis-server on a free port (REDIS_PORT), no persistence, as
# SERVER_PID; where it does not start, reports "not ok" and returns 1.
start_redis() {
  REDIS_PORT=$(pick_port)
  start_server redis redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$IT_TMP" --protected-mode no --daemonize no --logfile ''
  wait_port "$REDIS_PORT" "$SERVER_PID" 20 && return 0
  server_status; tap_not_ok "redis [$MODE]" "redis-server did not start ($SRV_STATUS)" "$SERVER_LOG"; stop_server
  return 1
}
# start_prog_server NAME PROG ARGS...: a tests/progs server bound to port 0
# that writes its port with -P; sets SERVER_PORT (empty on failure).
start_prog_server() {
  local name=$1 prog=$2
  shift 2
  local pf=$IT_TMP/$name.$MODE.port
  rm -f "$pf"
  start_server "$name" "$PROGS/$prog" -P "$pf" "$@"
  SERVER_PORT=
  if wait_file "$pf" "$SERVER_PID" 20; then SERVER_PORT=$(cat "$pf"); fi
  [ -n "$SERVER_PORT" ]
}

# socat_server NAME PORT PROGRAM: socat on 127.0.0.1:PORT, forking per
# connection, exec'ing PROGRAM on each accepted socket itself (nofork: the
# program holds the connection); 1, with SRV_STATUS set, if it never listened.
socat_server() {
  start_server "$1" socat -t 10 "TCP-LISTEN:$2,bind=127.0.0.1,reuseaddr,fork" "EXEC:$3,nofork"
  wait_port "$2" "$SERVER_PID" 20 || { server_status; return 1; }
}
# release_bg HOLDFILE: the background client held at HOLDFILE goes on;
# wait for it and forget it.  1 (and "client failed; " added to detail)
# if it failed.
release_bg() {
  touch "$1"
  [ -n "${BG_PID:-}" ] || return 0
  local rc=0
  wait "$BG_PID" || { rc=1; detail+="client failed; "; }
  it_forget "$BG_PID"; BG_PID=
  return $rc
}
# held_pair_start TAG SCRIPT [CLIENT_ARGS...]: a Python test program in its
# two roles: `SCRIPT server PORTFILE` as the server, then `SCRIPT client
# PORT HOLDFILE CLIENT_ARGS...` in the background, held once it printed
# "exchanged ..." (past the upgrade threshold) until held_pair_end: the
# caller looks at the connection meanwhile.  Sets HELD_PORT (empty if the
# server did not start), and rc (1 on failure) and detail (why), as the
# tests that use it report them.
held_pair_start() {
  local tag=$1 script=$2 pf=$IT_TMP/$1.$MODE.port
  shift 2
  HELD_HOLD=$pf.hold HELD_PORT= rc=0 detail=
  rm -f "$pf" "$HELD_HOLD"
  real_python
  start_server "$tag" "$IT_PYTHON" "$script" server "$pf"
  if ! wait_file "$pf" "$SERVER_PID" 20; then
    server_status; rc=1; detail="server did not start ($SRV_STATUS); "
    return 1
  fi
  HELD_PORT=$(cat "$pf")
  start_bg_client "$tag" "$IT_PYTHON" "$script" client "$HELD_PORT" "$HELD_HOLD" "$@"
  wait_log '^exchanged' "$BG_LOG" "$BG_PID"
}
# held_pair_end: release the held client, wait for both; a failed client
# or a server exit other than 0 sets rc and says so in detail.
held_pair_end() {
  [ -n "$HELD_PORT" ] && { release_bg "$HELD_HOLD" || rc=1; }
  wait "$SERVER_PID"
  local src=$?
  it_forget "$SERVER_PID"
  [ "$src" -eq 0 ] || { rc=1; detail+="server exit $src; "; }
}
# wait_log PATTERN FILE PID [SECONDS]: until a line of FILE matches PATTERN
# (a program's cue); 1 once PID has exited or after SECONDS (default 20).
wait_log() {
  local i
  for i in $(seq $((${4:-20} * 20))); do
    grep -q "$1" "$2" 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# ---- data --------------------------------------------------------------------
# make_random FILE SIZE_MIB
make_random() { head -c "$(($2 * 1048576))" /dev/urandom >"$1"; }
sha() { sha256sum "$1" | cut -c1-64; }
# real_python: sets IT_PYTHON to the interpreter itself, not a pyenv shim
# (much faster to start).  Call it directly, not in a $(subshell).
real_python() {
  [ -n "${IT_PYTHON:-}" ] && return 0
  IT_PYTHON=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null)
  [ -n "$IT_PYTHON" ] && [ -x "$IT_PYTHON" ] || IT_PYTHON=python3
}
have_ipv6() { [ -r /proc/net/if_inet6 ] && grep -q ' lo$' /proc/net/if_inet6; }
ms_now() { date +%s%3N; }

# A server that prints "exchanged" once its first bytes went, then waits
# for a hold file, and its client (start_bg_client): it_exchanged_fabric
# PORT checks that the connection is on the expected fabric; it_release_reap
# HOLD lets the server go on and reaps both.  A failure sets rc=1 (and adds
# to detail); SRC: the server's exit status.
it_exchanged_fabric() {
  for _ in $(seq 200); do grep -q '^exchanged' "$SERVER_LOG" && break; sleep 0.05; done
  expect_fabric "$1" "$(fabric_expected)" 10 || { rc=1; detail+="$FABRIC_DETAIL; "; }
}
it_release_reap() {
  touch "$1"
  wait "$SERVER_PID"; SRC=$?; it_forget "$SERVER_PID"
  if [ -n "${BG_PID:-}" ]; then wait "$BG_PID" || rc=1; it_forget "$BG_PID"; BG_PID=; fi
  [ "$SRC" -eq 0 ] || rc=1
}

# ---- fabric checks (fabsock stat --json) ------------------------------------
# fabric_enabled: are fabric checks on (FABSOCK_EXPECT_FABRIC set, a preload)?
fabric_enabled() { [ -n "$FABSOCK_EXPECT_FABRIC" ] && [ -n "$FABSOCK_LIB" ] && [ "$MODE" != plain ]; }
# fabric_expected: what a connection must use in MODE ("" = nothing to check).
fabric_expected() {
  case "$MODE" in
    plain) echo "" ;;
    both) echo "$FABSOCK_EXPECT_FABRIC" ;;
    *) echo tcp ;;
  esac
}
# expect_fabric PORT|PID:FD FABRIC [SECONDS]: while the connection is alive,
# poll `fabsock stat --json` until every connection on PORT (local or peer
# port; or the one PID:FD) reports FABRIC, for up to SECONDS (default 5: an
# upgrade is asynchronous).  Sets FABRIC_DETAIL.  A no-op (0) unless
# fabric_enabled.
expect_fabric() {
  local key=$1 want=$2 secs=${3:-5} i out rc=2
  FABRIC_DETAIL=
  fabric_enabled || return 0
  [ -n "$want" ] || return 0
  if [ ! -x "$FABSOCK_BIN" ]; then FABRIC_DETAIL="fabsock tool $FABSOCK_BIN not found"; return 1; fi
  real_python
  local seen=()
  for i in $(seq $((secs * 5))); do
    out=$(timeout 10 "$FABSOCK_BIN" stat --json 2>&1 | "$IT_PYTHON" "$IT_DIR/fabric_check.py" "$key" "$want" 2>&1)
    rc=$?
    [ $rc -eq 0 ] && { FABRIC_DETAIL=$out; return 0; }
    # What each sample showed, once each, the last first: the last alone
    # says nothing of a connection that went elsewhere before it closed.
    local one=${out//[[:space:]]/_} s before=
    [[ " ${seen[*]:-} " == *" $one "* ]] || seen+=("$one")
    for s in "${seen[@]}"; do [ "$s" = "$one" ] || before+="${before:+|}${s//_/ }"; done
    FABRIC_DETAIL="$out${before:+ (earlier samples: $before)}"
    sleep 0.2
  done
  return 1
}
# conn_reasons PORT: "PROGRAM FABRIC/REASON " for each connection on PORT
# that `fabsock stat` lists now, sorted (a process's own view of why).
conn_reasons() {
  real_python
  timeout 10 "$FABSOCK_BIN" stat --json 2>/dev/null | "$IT_PYTHON" -c '
import sys
sys.path.insert(0, sys.argv[2])
from stat_json import connections, read_doc
doc = read_doc()
for p, c in connections(doc, sys.argv[1]) if doc else []:
    print("%s %s/%s" % (p.get("program"), c.get("fabric"), c.get("reason")))
' "$1" "$IT_DIR" 2>&1 | sort | tr '\n' ' '
}
# fabric_watch_start PORT [MIN] / fabric_watch_stop: for a third-party client
# that cannot be held open: sample `fabsock stat --json` in the background
# during the transfer; stop reports whether the expected fabric was seen on
# PORT.  When no sample saw a connection on PORT (it was over too soon), the
# counts of closed connections of the processes listening on PORT, before
# the client and after it (fabric_closed.py), say where at least MIN
# (default 1) of them went.
fabric_watch_start() {
  FABRIC_WATCH_PID=
  fabric_enabled || return 0
  local port=$1 want
  want=$(fabric_expected)
  FABRIC_WATCH_FILE=$IT_TMP/fabric-watch.$MODE.$port
  FABRIC_WATCH_PORT=$port FABRIC_WATCH_MIN=${2:-1}
  real_python
  : >"$FABRIC_WATCH_FILE"
  timeout 10 "$FABSOCK_BIN" stat --json >"$FABRIC_WATCH_FILE.before" 2>/dev/null
  (
    while :; do
      timeout 10 "$FABSOCK_BIN" stat --json 2>&1 | "$IT_PYTHON" "$IT_DIR/fabric_check.py" "$port" "$want" >>"$FABRIC_WATCH_FILE" 2>&1
      echo "rc=$?" >>"$FABRIC_WATCH_FILE"
      sleep 0.2
    done
  ) &
  FABRIC_WATCH_PID=$!
  IT_PIDS+=("$FABRIC_WATCH_PID")
}
fabric_watch_stop() {
  FABRIC_DETAIL=
  fabric_enabled || return 0
  [ -n "$FABRIC_WATCH_PID" ] || return 0
  kill "$FABRIC_WATCH_PID" 2>/dev/null
  wait "$FABRIC_WATCH_PID" 2>/dev/null
  it_forget "$FABRIC_WATCH_PID"
  if grep -q '^rc=0$' "$FABRIC_WATCH_FILE"; then
    FABRIC_DETAIL=$(grep -m1 -B1 '^rc=0$' "$FABRIC_WATCH_FILE" | head -n1)
    return 0
  fi
  if ! grep -q '^rc=1$' "$FABRIC_WATCH_FILE"; then
    # never a connection on the port in any sample, or only before its
    # upgrade could finish (rc=3): too short to observe live; its server
    # counted it when it closed
    local out rc
    timeout 10 "$FABSOCK_BIN" stat --json >"$FABRIC_WATCH_FILE.after" 2>/dev/null
    out=$("$IT_PYTHON" "$IT_DIR/fabric_closed.py" "$FABRIC_WATCH_FILE.before" "$FABRIC_WATCH_FILE.after" \
      "$FABRIC_WATCH_PORT" "$(fabric_expected)" "$FABRIC_WATCH_MIN" 2>&1)
    rc=$?
    [ $rc -eq 2 ] || { FABRIC_DETAIL=$out; return $rc; }
    FABRIC_DETAIL="connection not observed by fabsock stat (too short?): $(grep -v '^rc=' "$FABRIC_WATCH_FILE" | tail -n1); $out"
    return 2
  fi
  FABRIC_DETAIL="never saw $(fabric_expected): $(grep -v '^rc=' "$FABRIC_WATCH_FILE" | sort | uniq -c | sort -rn | head -n3 | tr -s ' \n' ' ')"
  return 1
}
# wrk_share PORT MIN [DELAY]: a third-party load (wrk) running against PORT,
# sampled once with `fabsock stat` after DELAY seconds (default 1.5): at
# least MIN% (100 where tcp is expected) of its connections on the expected
# fabric, on both ends in [both], none failing with resources or protocol;
# pending ones are left out (fabric_share.py).  Sets SHARE and SHARE_RC;
# a no-op (SHARE empty) unless fabric checks are on.
wrk_share() {
  SHARE= SHARE_RC=1
  fabric_enabled && [ -n "$(fabric_expected)" ] || return 0
  sleep "${3:-1.5}"
  real_python
  local want
  want=$(fabric_expected)
  SHARE=$(timeout 10 "$FABSOCK_BIN" stat --json 2>&1 |
    "$IT_PYTHON" "$IT_DIR/fabric_share.py" "$1" "$want" "$([ "$want" = tcp ] && echo 100 || echo "$2")" \
      "$([ "$MODE" = both ] && echo both || echo any)" resources protocol)
  SHARE_RC=$?
}
# wrk_share_report NAME: its TAP line, when fabric checks are on.
wrk_share_report() {
  fabric_enabled && [ -n "$(fabric_expected)" ] || return 0
  tap_result "$SHARE_RC" "$1 [$MODE] fabric=$(fabric_expected)" "$SHARE"
}
# wrk_verdict OUT RC: wrk's output (OUT) and exit status judged: a rate, no
# socket error, no non-2xx reply.  Sets WRK_DETAIL; returns 0 or 1.
wrk_verdict() {
  local reqs
  reqs=$(awk '/Requests\/sec/ {print $2}' "$1")
  if [ "$2" -ne 0 ] || [ -z "$reqs" ]; then WRK_DETAIL="wrk exit $2: $(tail -n 2 "$1" | tr '\n' ' ')"; return 1; fi
  if grep -q 'Non-2xx' "$1"; then WRK_DETAIL=$(grep 'Non-2xx' "$1"); return 1; fi
  if grep -q 'Socket errors' "$1"; then WRK_DETAIL=$(grep 'Socket errors' "$1"); return 1; fi
  WRK_DETAIL="$reqs requests/s"
}
# fetch_twice NAME URL SHA256: curl (preloaded as the client in MODE) gets
# URL twice on one connection; one TAP line: both copies intact.
fetch_twice() {
  local a=$IT_TMP/fetch.1 b=$IT_TMP/fetch.2
  rm -f "$a" "$b"
  pre_for client
  if ! "${PRE[@]}" timeout 60 curl -sS -o "$a" -o "$b" "$2" "$2" 2>"$IT_TMP/fetch.err"; then
    tap_not_ok "$1 [$MODE]" "curl: $(head -c 200 "$IT_TMP/fetch.err")"
  elif [ "$(sha256sum <"$a" | cut -d' ' -f1)" != "$3" ] || [ "$(sha256sum <"$b" | cut -d' ' -f1)" != "$3" ]; then
    tap_not_ok "$1 [$MODE]" "checksum differs ($(stat -c %s "$a" "$b" | tr '\n' ' ')bytes)"
  else
    tap_ok "$1 [$MODE]" "sha256 equal"
  fi
}
# log_clean NAME LOG REGEX WHAT: one TAP line: no line of a server's LOG
# matches REGEX (grep -E); WHAT says what that means.
log_clean() {
  if grep -E "$3" "$2" >"$IT_TMP/log_clean.hits" 2>/dev/null; then
    tap_not_ok "$1 [$MODE]" "$(head -n 2 "$IT_TMP/log_clean.hits" | tr '\n' ' ')"
  else
    tap_ok "$1 [$MODE]" "$4"
  fi
}
# fabric_report NAME STATUS: one TAP line for a fabric check (only when
# enabled); STATUS 2 (never observed) is a SKIP, not a failure.
fabric_report() {
  fabric_enabled || return 0
  [ -n "$(fabric_expected)" ] || return 0
  if [ "$2" = 2 ]; then tap_skip "$1 [$MODE] fabric=$(fabric_expected)" "$FABRIC_DETAIL"; return; fi
  tap_result "$2" "$1 [$MODE] fabric=$(fabric_expected)" "$FABRIC_DETAIL"
}
# hold_arg: "-w FILE" for tests/progs clients when fabric checks are on.
hold_args() {
  HOLD=()
  HOLD_FILE=
  if fabric_enabled; then
    HOLD_FILE=$IT_TMP/hold.$MODE.$RANDOM
    HOLD=(-w "$HOLD_FILE")
  fi
}
# run_held_client NAME PORT OUTFILE CMD...: run a tests/progs client given
# ${HOLD[@]}; when it holds its connections, run expect_fabric on PORT, then
# release it.  Returns the client's status; FABRIC_STATUS/DETAIL are set.
run_held_client() {
  local name=$1 port=$2 out=$3
  shift 3
  FABRIC_STATUS=0
  FABRIC_DETAIL=
  if [ -z "$HOLD_FILE" ]; then
    run_client "$@" >"$out" 2>&1
    return
  fi
  start_bg_client "$name" "$@"
  local pid=$BG_PID log=$BG_LOG
  if wait_file "$HOLD_FILE.ready" "$pid" "$(client_timeout)"; then
    expect_fabric "$port" "$(fabric_expected)"
    FABRIC_STATUS=$?
  else
    FABRIC_STATUS=1
    FABRIC_DETAIL="client never reached its hold point"
  fi
  touch "$HOLD_FILE"
  wait "$pid"
  local rc=$?
  it_forget "$pid"
  cp "$log" "$out"
  return $rc
}

# held_mtclient NAME TAG PORT OUTFILE ARGS...: tests/progs/mtclient -p PORT
# ARGS against the server of start_server, held for the fabric check
# (hold_args, run_held_client), then one TAP line for the echo: mtclient's
# last line, the server's state, "client timed out" on 124.  FABRIC_STATUS
# and FABRIC_DETAIL stay set for fabric_report.
held_mtclient() {
  local name=$1 tag=$2 port=$3 out=$4 rc detail
  shift 4
  hold_args
  run_held_client "$tag" "$port" "$out" "$PROGS/mtclient" -p "$port" "$@" "${HOLD[@]}"
  rc=$?
  detail=$(grep -v '^$' "$out" | tail -n 1)
  server_check || { rc=1; detail="$SRV_DETAIL; $detail"; }
  [ $rc -eq 124 ] && detail="client timed out; $detail"
  tap_result $rc "$name [$MODE]" "$detail" "$out" "$SERVER_LOG"
}

# server_alive [PID]: is the server started by start_server still running?
# (Its `timeout` exits, and turns zombie until reaped, when the server does.)
server_alive() {
  local line
  read -r line 2>/dev/null <"/proc/${1:-$SERVER_PID}/stat" || return 1
  line=${line##*) }
  case "$line" in Z* | X*) return 1 ;; esac
  return 0
}
# server_status [PID]: sets SRV_STATUS to "running", "exited with status N"
# or "died of signal N" (reaping an exited server).  Not in a $(subshell).
server_status() {
  local p=${1:-$SERVER_PID} rc
  if server_alive "$p"; then SRV_STATUS=running; return; fi
  wait "$p" 2>/dev/null
  rc=$?
  it_forget "$p"
  if [ "$rc" -gt 128 ] && [ "$rc" -lt 255 ]; then SRV_STATUS="died of signal $((rc - 128))"; else SRV_STATUS="exited with status $rc"; fi
}
# server_check: after a client run, a server that should still be running
# must be; else returns 1 with SRV_DETAIL set (for tap details).
server_check() {
  SRV_DETAIL=
  server_alive && return 0
  server_status
  SRV_DETAIL="server $SRV_STATUS during the test"
  return 1
}
# compare_ref NAME OUT: the output of a plain run is the reference for the
# other modes.  In plain mode OUT becomes the reference; otherwise diff it
# against the reference (DIFF holds the first differing lines).  The
# reference is produced by the caller's ref_producer when plain is not in
# the mode list (see ensure_ref).
ref_file() { echo "$IT_TMP/ref.$1"; }
compare_ref() {
  local name=$1 out=$2 ref
  ref=$(ref_file "$name")
  DIFF=
  if [ "$MODE" = plain ]; then cp "$out" "$ref"; return 0; fi
  if [ ! -f "$ref" ]; then DIFF="no plain reference"; return 1; fi
  DIFF=$(diff -u "$ref" "$out" | sed -n '3,$p' | grep '^[-+]' | head -n 6 | tr '\n' ' ')
  [ -z "$DIFF" ]
}
# ensure_ref NAME FUNC ARGS...: in a preloaded mode with no reference yet
# (plain not run first), run FUNC once in plain mode to produce the
# reference for NAME (FUNC prints it on stdout).
ensure_ref() {
  local name=$1 ref saved=$MODE
  shift
  ref=$(ref_file "$name")
  [ -f "$ref" ] && return 0
  [ "$MODE" = plain ] && return 0
  MODE=plain
  "$@" >"$ref" 2>&1
  MODE=$saved
}
