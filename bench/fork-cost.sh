#!/usr/bin/env bash
# fork-cost.sh: what a fork costs under the library (bench/fork-loop), side by
# side in alternating rounds: a process holding a TCP socket (a server that
# forks per connection) plain, preloaded, and preloaded with FABSOCK_STAT=0
# (no stat table: the child's own table is much of the cost); and a process
# that never made a socket (a shell) plain and preloaded.  Prints the median
# us per fork+exit+wait and page faults per child of each, what the library
# adds, and JSON.
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
  "$prog" "$forks" --no-socket >>"$tmp/plain_nosock" || exit 1
  LD_PRELOAD=$lib "$prog" "$forks" --no-socket >>"$tmp/lib_nosock" || exit 1
done
median() { # FIELD < lines
  awk -v f="$1" '{print $f}' | sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'
}
minus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a - b }'; }
printf '%-36s %9s %9s %9s %9s
' "fork+exit+wait, $forks per round" "us" "added" "faults" "added"
row() { # NAME FILE BASEFILE
  local u f bu bf
  u=$(median 1 <"$tmp/$2") f=$(median 2 <"$tmp/$2") bu=$(median 1 <"$tmp/$3") bf=$(median 2 <"$tmp/$3")
  if [ "$2" = "$3" ]; then
    printf '%-36s %9s %9s %9s %9s\n' "$1" "$u" "-" "$f" "-"
  else
    printf '%-36s %9s %9s %9s %9s\n' "$1" "$u" "$(minus "$u" "$bu")" "$f" "$(minus "$f" "$bf")"
  fi
}
row "socket held: plain" plain plain
row "socket held: libfabsock" lib plain
row "socket held: libfabsock, FABSOCK_STAT=0" nostat plain
row "no socket: plain" plain_nosock plain_nosock
row "no socket: libfabsock" lib_nosock plain_nosock
j() { printf '"%s_us": %s, "%s_faults": %s' "$1" "$(median 1 <"$tmp/$1")" "$1" "$(median 2 <"$tmp/$1")"; }
echo "{\"rounds\": $rounds, \"forks\": $forks, $(j plain), $(j lib), $(j nostat), $(j plain_nosock), $(j lib_nosock)}"
