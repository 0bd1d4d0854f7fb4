#!/usr/bin/env bash
# doorbell.sh: FABSOCK_DOORBELL=1 against the same library without it and
# against plain TCP, side by side in alternating rounds (each round starts
# with the next variant: the second of two runs is often slower whatever it
# runs).  Per round and variant, both ends under it:
#   - sockperf ping-pong, 64 B, SECONDS (its server waits in epoll: with
#     doorbells its peer rings the set's doorbell; the client blocks in
#     recv, and its peer rings the process's doorbell; --mps: see
#     tests/integration/t_sockperf.sh):
#     p50 and p99 in us;
#   - redis-benchmark -c 50 GET against redis-server (both ae, epoll):
#     requests/s, and the descriptors each process holds meanwhile.
# Then the median per variant and the ratio of medians to plain, as a
# table and as JSON on the last line.
#
# usage: bench/doorbell.sh [-r ROUNDS] [-s SECONDS] LIB
set -u
# shellcheck source=bench/ab-common.sh
. "$(cd "$(dirname "$0")" && pwd)/ab-common.sh"
ab_default_secs=4 ab_parse "$0" "$@"
[ ${#libs[@]} -eq 1 ] && [ "${libs[0]}" != plain ] || { echo "usage: $0 [-r ROUNDS] [-s SECONDS] LIB" >&2; exit 2; }
lib=${libs[0]}
for p in sockperf redis-server redis-benchmark; do
  command -v $p >/dev/null || { echo "# SKIP doorbell: $p not installed"; exit 77; }
done
tmp=$(mktemp -d /tmp/fabsock-doorbell.XXXXXX) || exit 1
trap 'pkill -P $$ 2>/dev/null; rm -rf "$tmp"' EXIT
variants=(plain wakefd doorbell)
libs=(plain "$lib,FABSOCK_DOORBELL=0" "$lib,FABSOCK_DOORBELL=1") # ab_rounds alternates them
fds() { find /proc/"$1"/fd -mindepth 1 2>/dev/null | wc -l; }
port=$((20000 + $$ % 10000))

# One variant's turn in a round (ab_rounds: LIB I ROUND).
one() {
  local v=${variants[$2]} r=$3 pre sp rs rb p50 p99 sfd cfd rps
  pre=$(ab_pre "$1")
  port=$((port + 1))
  $pre sockperf sr --tcp -i 127.0.0.1 -p $port >/dev/null 2>&1 &
  sp=$!
  sleep 0.5
  $pre sockperf pp --tcp -i 127.0.0.1 -p $port -t "$secs" -m 64 --mps 4000000 2>&1 |
    sed 's/\x1b\[[0-9;]*m//g' | awk '/percentile 50.000 =/ { p50 = $NF } /percentile 99.000 =/ { p99 = $NF }
      END { print (p50 == "" ? "nan" : p50), (p99 == "" ? "nan" : p99) }' >"$tmp/sp"
  kill $sp 2>/dev/null; wait $sp 2>/dev/null
  read -r p50 p99 <"$tmp/sp"
  echo "$p50" >>"$tmp/p50.$v"; echo "$p99" >>"$tmp/p99.$v"
  port=$((port + 1))
  $pre redis-server --port $port --save '' --appendonly no >/dev/null 2>&1 &
  rs=$!
  sleep 0.5
  $pre redis-benchmark -p $port -c 50 -n 100000000 -t get -q >"$tmp/rb" 2>&1 &
  rb=$!
  sleep "$secs"
  sfd=$(fds "$(pgrep -P $rs -x redis-server || echo $rs)") cfd=$(fds $rb)
  kill $rb 2>/dev/null; wait $rb 2>/dev/null # (SIGINT is ignored in a background job)
  rps=$(tr '\r' '\n' <"$tmp/rb" | awk 'match($0, /rps=[0-9.]+ \(overall: [0-9.]+/) { v = substr($0, RSTART, RLENGTH); sub(/.*: /, "", v) } END { print (v == "" ? "nan" : v) }')
  kill $rs 2>/dev/null; wait $rs 2>/dev/null
  echo "$rps" >>"$tmp/rps.$v"; echo "$sfd" >>"$tmp/sfd.$v"; echo "$cfd" >>"$tmp/cfd.$v"
  echo "round $r $v: sockperf p50 $p50 us p99 $p99 us; redis GET $rps/s, fds server $sfd client $cfd"
}
ab_rounds one

python3 - "$tmp" "$rounds" "$secs" <<'PY'
import json, statistics, sys
tmp, rounds, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def med(name, v):
    xs = [float(x) for x in open('%s/%s.%s' % (tmp, name, v)).read().split() if x != 'nan']
    return statistics.median(xs) if xs else float('nan')
rows = [('sockperf p50 us', 'p50'), ('sockperf p99 us', 'p99'), ('redis GET /s', 'rps'),
        ('redis-server fds', 'sfd'), ('redis-benchmark fds', 'cfd')]
out = {'rounds': rounds, 'seconds': secs, 'results': []}
print('\n%-20s %12s %12s %12s %10s %10s' % ('median', 'plain', 'wakefd', 'doorbell', 'wakefd/pl', 'door/pl'))
for label, key in rows:
    m = {v: med(key, v) for v in ('plain', 'wakefd', 'doorbell')}
    rw, rd = m['wakefd'] / m['plain'], m['doorbell'] / m['plain']
    print('%-20s %12.2f %12.2f %12.2f %9.2fx %9.2fx' % (label, m['plain'], m['wakefd'], m['doorbell'], rw, rd))
    out['results'].append({'measure': label, **m, 'wakefd_vs_plain': round(rw, 3), 'doorbell_vs_plain': round(rd, 3)})
print(json.dumps(out))
PY
