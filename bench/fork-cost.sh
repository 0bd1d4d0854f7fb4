#!/usr/bin/env bash
# fork-cost.sh: what a fork costs under the library (bench/fork-loop), side by
# side in alternating rounds: plain, preloaded, and preloaded with
# FABSOCK_STAT=0 (no stat table: the child's own table is most of the cost).
# Prints the median us per fork+exit+wait of each, the added cost, and JSON.
#
# usage: bench/fork-cost.sh [LIB] [ROUNDS] [FORKS]
#   LIB      libfabsock.so (default: $FABSOCK_LIB, else <source>/build/.libs/libfabsock.so)
#   ROUNDS   alternating rounds (default 5); FORKS per round and side (default 1000)
set -u
here=$(cd "$(dirname "$0")" && pwd)
lib=${1:-${FABSOCK_LIB:-$here/../build/.libs/libfabsock.so}}
rounds=${2:-5} forks=${3:-1000}
prog=${FORK_LOOP:-$(dirname "$lib")/../bench/fork-loop}
[ -f "$lib" ] && [ -x "$prog" ] || { echo "fork-cost: need $lib and bench/fork-loop (make)" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
for r in $(seq "$rounds"); do
  "$prog" "$forks" >>"$tmp/plain" || exit 1
  LD_PRELOAD=$lib "$prog" "$forks" >>"$tmp/lib" || exit 1
  FABSOCK_STAT=0 LD_PRELOAD=$lib "$prog" "$forks" >>"$tmp/nostat" || exit 1
done
median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
p=$(median <"$tmp/plain") l=$(median <"$tmp/lib") s=$(median <"$tmp/nostat")
printf '%-34s %10s %10s\n' "fork+exit+wait, $forks per round" "us" "added"
printf '%-34s %10s %10s\n' "plain" "$p" "-"
printf '%-34s %10s %10s\n' "libfabsock" "$l" "$(awk -v a="$l" -v b="$p" 'BEGIN { printf "%.1f", a - b }')"
printf '%-34s %10s %10s\n' "libfabsock, FABSOCK_STAT=0" "$s" "$(awk -v a="$s" -v b="$p" 'BEGIN { printf "%.1f", a - b }')"
echo "{\"rounds\": $rounds, \"forks\": $forks, \"plain_us\": $p, \"lib_us\": $l, \"lib_nostat_us\": $s}"
