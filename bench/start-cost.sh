#!/usr/bin/env bash
# start-cost.sh: what libfabsock adds to a process start, against the floor
# of preloading anything: PROGRAM (default /bin/true) started N times plain,
# with an empty library preloaded (bench/libstart-floor.so) and with LIB,
# interleaved start by start (bench/start-loop).  The empty library's row is
# what LD_PRELOAD itself costs; LIB's row less that one is what the
# library's own load and constructors cost.
#
# usage: bench/start-cost.sh [LIB[,LIB...]] [N] [PROGRAM [ARG...]]
#   LIB  libfabsock.so (default: $FABSOCK_LIB, else <source>/build/.libs/libfabsock.so);
#        several, comma-separated, are each a side (two builds in one run)
#   N    starts per side (default 2000)
# Prints p50/p99/mean us per side and page faults per start (deterministic
# where the times are not), then JSON on the last line.
set -u
here=$(cd "$(dirname "$0")" && pwd)
lib=${1:-${FABSOCK_LIB:-$here/../build/.libs/libfabsock.so}}
n=${2:-2000}
shift 2 2>/dev/null || shift $#
[ $# -gt 0 ] || set -- /bin/true

IFS=, read -ra libs <<<"$lib"
bdir=
for l in "${libs[@]}"; do # the build tree of the first library that has one
  [ -x "$(dirname "$l")/../bench/start-loop" ] && { bdir=$(dirname "$l")/../bench; break; }
done
prog=${START_LOOP:-$bdir/start-loop}
floor=${START_FLOOR:-$bdir/.libs/libstart-floor.so}
[ -x "$prog" ] && [ -f "$floor" ] ||
  { echo "start-cost: need bench/start-loop and bench/.libs/libstart-floor.so in a build tree of $lib (make)" >&2; exit 1; }
sides=(none "$(readlink -f "$floor")")
for l in "${libs[@]}"; do
  [ -f "$l" ] || { echo "start-cost: no library at $l" >&2; exit 1; }
  sides+=("$(readlink -f "$l")")
done
env -u LD_PRELOAD "$prog" -n "$n" --json "${sides[@]}" -- "$@"
