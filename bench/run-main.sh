#!/usr/bin/env bash
# run-main.sh: the "main job".  Builds libfabsock if needed, then runs real,
# unmodified program pairs side by side, plain TCP and with libfabsock
# preloaded, on this machine, and prints the speed-ups:
#   1. fabsock-bench compare   (latency, bandwidth, connection rate, raw shm floor)
#   2. redis-benchmark against redis-server, GET and SET, 50 clients, -n 100000,
#      plain pair vs. both preloaded, alternating rounds
#   3. `fabsock stat` captured while the preloaded redis pair is connected
# Exits non-zero when something fails to run; never because it is not faster.
#
# usage: bench/run-main.sh [BUILD_DIR] [options] [-- fabsock-bench compare options]
#   BUILD_DIR        build tree (default: <source>/build; configured and built if needed)
#   --no-build       use BUILD_DIR as it is
#   --no-redis       skip the redis part (it is otherwise required)
#   --quick          shorter runs (smoke test: ~15 s of benchmarks)
#   --redis-rounds N rounds per side for redis (default 2, median shown)
# Environment: FABSOCK_LIB, FABSOCK_BIN override the build's library and tool;
# other FABSOCK_* variables reach the preloaded programs; OUT=dir keeps the
# raw results (default BUILD_DIR/bench-results).
set -u

here=$(cd "$(dirname "$0")" && pwd)
srcdir=$(cd "$here/.." && pwd)
build=
do_build=1
do_redis=1
quick=0
redis_rounds=2
compare_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --no-build) do_build=0 ;;
    --no-redis) do_redis=0 ;;
    --quick) quick=1 ;;
    --redis-rounds) shift; redis_rounds=${1:?}; ;;
    --) shift; compare_args=("$@"); break ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run-main.sh: unknown option $1" >&2; exit 2 ;;
    *) [ -z "$build" ] || { echo "run-main.sh: one build dir only" >&2; exit 2; }; build=$1 ;;
  esac
  shift
done
build=${build:-$srcdir/build}
fail=0
failures=()
note_fail() { fail=1; failures+=("$*"); echo "run-main.sh: FAILED: $*" >&2; }

# ---------------------------------------------------------------- build
if [ $do_build = 1 ]; then
  jobs=$(nproc 2>/dev/null || echo 2)
  if [ ! -f "$build/Makefile" ]; then
    if [ ! -x "$srcdir/configure" ]; then
      (cd "$srcdir" && autoreconf -fi) || { echo "run-main.sh: autoreconf failed" >&2; exit 1; }
    fi
    mkdir -p "$build" && (cd "$build" && "$srcdir/configure" -q) ||
      { echo "run-main.sh: configure failed" >&2; exit 1; }
  fi
  make -C "$build" -j"$jobs" -s >"$build/run-main-build.log" 2>&1 ||
    { tail -40 "$build/run-main-build.log" >&2; echo "run-main.sh: build failed (see $build/run-main-build.log)" >&2; exit 1; }
fi
build=$(cd "$build" && pwd)
LIB=${FABSOCK_LIB:-$build/.libs/libfabsock.so}
BIN=${FABSOCK_BIN:-$build/fabsock}
BENCH=$build/bench/fabsock-bench
OUT=${OUT:-$build/bench-results}
mkdir -p "$OUT" || exit 1
for f in "$LIB" "$BENCH"; do
  [ -e "$f" ] || { echo "run-main.sh: $f is missing (build it, or set FABSOCK_LIB)" >&2; exit 1; }
done
export FABSOCK_LIB=$LIB

echo "== libfabsock main job: $(uname -sr), $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "   library: $LIB"
env | grep '^FABSOCK_' | grep -v '^FABSOCK_LIB=' | sed 's/^/   /'

# ---------------------------------------------------------------- 1. fabsock-bench
echo
echo "== 1. fabsock-bench compare (plain TCP vs LD_PRELOAD=libfabsock.so, same host)"
qargs=()
[ $quick = 1 ] && qargs=(--rounds 1 --pp-time 0.5 --time 0.5 --sizes 64,64k --msg 64k)
"$BENCH" compare --lib "$LIB" --json "$OUT/compare.json" "${qargs[@]}" "${compare_args[@]}" \
  2> >(tee "$OUT/compare.log" >&2)
rc=$?
[ $rc = 0 ] || note_fail "fabsock-bench compare exited with $rc (see $OUT/compare.log)"

# ---------------------------------------------------------------- 2. redis
# Below the ephemeral range (32768+), where TIME_WAIT and outgoing sockets
# from earlier runs would make bind fail.
free_port() {
  local p
  for _ in $(seq 50); do
    p=$(( 20000 + RANDOM % 12000 ))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo $p; return 0; }
  done
  return 1
}

# redis_round SIDE ROUND: one redis-server + redis-benchmark pair; SIDE is plain or fabsock.
redis_round() {
  local side=$1 round=$2 port pid bpid i pre=() csv="$OUT/redis-$1-$2.csv" log="$OUT/redis-server-$1-$2.log"
  [ "$side" = fabsock ] && pre=(env "LD_PRELOAD=$LIB")
  local try
  for try in 1 2 3 4 5; do # a port can still be taken between the probe and bind
    port=$(free_port) || { note_fail "no free TCP port for redis"; return 1; }
    env -u LD_PRELOAD "${pre[@]}" redis-server --port "$port" --bind 127.0.0.1 --save '' \
      --appendonly no --protected-mode no --daemonize no --logfile "$log" >/dev/null 2>&1 &
    pid=$!
    for i in $(seq 100); do
      [ "$(env -u LD_PRELOAD redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && break
      kill -0 $pid 2>/dev/null || break
      sleep 0.1
    done
    kill -0 $pid 2>/dev/null && break
    wait $pid 2>/dev/null
  done
  if [ "$(env -u LD_PRELOAD redis-cli -p "$port" ping 2>/dev/null)" != PONG ]; then
    note_fail "redis-server ($side) did not start (see $log)"
    kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
    return 1
  fi
  if [ "$side" = fabsock ] && ! grep -q "$(readlink -f "$LIB")" /proc/$pid/maps 2>/dev/null; then
    note_fail "libfabsock is not loaded in the preloaded redis-server"
  fi
  env -u LD_PRELOAD "${pre[@]}" redis-benchmark -h 127.0.0.1 -p "$port" -t get,set \
    -c 50 -n "$redis_n" --csv >"$csv" 2>"$OUT/redis-benchmark-$side-$round.err" &
  bpid=$!
  if [ "$side" = fabsock ] && [ -z "$stat_done" ]; then
    # fabsock stat while the preloaded pair is connected: keep the fullest
    # snapshot (the latest of those: its byte counts are the largest)
    local best=-1 n=0 k=0 ok=0
    while kill -0 $bpid 2>/dev/null; do
      if [ $k = 0 ]; then sleep 0.1; else sleep 0.3; fi
      kill -0 $bpid 2>/dev/null || break
      k=$((k + 1))
      if "$BIN" stat >"$OUT/stat.all" 2>&1; then
        ok=1
        # this pair only (the table lists every process running libfabsock),
        # the connections only (the closed counts follow a blank line)
        awk -v a=$pid -v b=$bpid 'NF == 0 { exit } NR == 1 || $1 == a || $1 == b' "$OUT/stat.all" >"$OUT/stat.try"
        n=$(wc -l <"$OUT/stat.try")
        [ "$n" -ge "$best" ] && { best=$n; cp "$OUT/stat.try" "$OUT/stat.txt"; }
      else
        cp "$OUT/stat.all" "$OUT/stat.err"
      fi
    done
    rm -f "$OUT/stat.try" "$OUT/stat.all"
    stat_done=1
    if [ $k = 0 ]; then stat_status="redis-benchmark ended before fabsock stat could run"
    elif [ $best -le 1 ]; then stat_status="fabsock stat listed no socket of the preloaded redis pair"
    elif [ $ok = 0 ]; then stat_status="fabsock stat failed"
    else stat_status=ok; fi
  fi
  wait $bpid
  local brc=$?
  env -u LD_PRELOAD redis-cli -p "$port" shutdown nosave >/dev/null 2>&1
  for i in $(seq 50); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  if kill -0 $pid 2>/dev/null; then
    note_fail "redis-server ($side) did not shut down"
    kill -9 $pid 2>/dev/null
  fi
  wait $pid 2>/dev/null
  if [ $brc != 0 ] || ! grep -q '^"SET"' "$csv" || ! grep -q '^"GET"' "$csv"; then
    note_fail "redis-benchmark ($side, round $round) failed: $(tail -c 300 "$OUT/redis-benchmark-$side-$round.err")"
    return 1
  fi
  echo "   round $round $side: $(awk -F, '{gsub(/"/,""); if ($1=="SET"||$1=="GET") printf "%s %s rps  ", $1, $2}' "$csv")" >&2
}

# median of the numbers on stdin
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# field TEST COLUMN SIDE: median over rounds of one CSV column (2 = rps, 5 = p50 ms)
field() {
  cat "$OUT"/redis-"$3"-*.csv 2>/dev/null |
    awk -F, -v t="$1" -v c="$2" '{gsub(/"/,"")} $1==t {print $c}' | median
}

stat_done=
stat_status="not run"
if [ $do_redis = 1 ]; then
  echo
  echo "== 2. redis-benchmark vs redis-server, GET/SET, 50 clients (plain pair vs both preloaded)"
  redis_n=100000
  [ $quick = 1 ] && { redis_n=20000; redis_rounds=1; }
  if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null ||
     ! command -v redis-cli >/dev/null; then
    note_fail "redis-server/redis-benchmark/redis-cli not installed (use --no-redis to skip)"
  else
    rm -f "$OUT"/redis-*.csv "$OUT"/stat.txt "$OUT"/stat.err
    for r in $(seq "$redis_rounds"); do
      if [ $((r % 2)) = 1 ]; then order="plain fabsock"; else order="fabsock plain"; fi
      for side in $order; do redis_round "$side" "$r"; done
    done
    printf '   %-6s %-26s %-26s %s\n' test "plain rps (p50 ms)" "fabsock rps (p50 ms)" "fabsock vs plain"
    for t in SET GET; do
      pr=$(field $t 2 plain); fr=$(field $t 2 fabsock)
      pl=$(field $t 5 plain); fl=$(field $t 5 fabsock)
      awk -v t=$t -v pr="$pr" -v fr="$fr" -v pl="$pl" -v fl="$fl" 'BEGIN {
        s = "-"
        if (pr > 0 && fr > 0) { r = fr / pr; s = (r >= 1) ? sprintf("x%.2f faster", r) : sprintf("x%.2f slower", 1 / r) }
        printf "   %-6s %-26s %-26s %s\n", t, sprintf("%.0f (%s)", pr, pl), sprintf("%.0f (%s)", fr, fl), s }'
    done
  fi

  # ------------------------------------------------------------ 3. stat
  echo
  echo "== 3. fabsock stat while the preloaded redis pair was connected"
  if [ -s "$OUT/stat.txt" ]; then
    # the header and the first 8 sockets of each process
    awk 'NR == 1 || ++seen[$1] <= 8 { print "   " $0; next } { more++ }
         END { if (more) printf "   ... %d more sockets in the full table\n", more }' "$OUT/stat.txt"
    # connections per fabric, from the FABRIC column
    awk 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "FABRIC") c = i; next }
         c && $c != "" { n[$c]++ } END { s = ""; for (f in n) s = s sprintf("%s%d on %s", s == "" ? "" : ", ", n[f], f); if (s != "") print "   sockets by fabric: " s }' "$OUT/stat.txt"
  fi
  if [ "$stat_status" != ok ]; then
    [ -f "$OUT/stat.err" ] && sed 's/^/   /' "$OUT/stat.err"
    note_fail "$stat_status ($BIN)"
  fi
fi

echo
echo "raw results: $OUT (compare.json, redis-*.csv, stat.txt, logs)"
if [ $fail != 0 ]; then
  printf 'run-main.sh: %d failure(s):\n' "${#failures[@]}" >&2
  printf '  - %s\n' "${failures[@]}" >&2
  exit 1
fi
exit 0
