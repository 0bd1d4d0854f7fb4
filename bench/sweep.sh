#!/usr/bin/env bash
# sweep.sh: latency and throughput against message size, kernel TCP,
# libfabsock (both ends preloaded, same host: shm) and the raw shared-memory
# floor, side by side in one run (fabsock-bench compare --floor-all), then
# a picture of it (bench/sweep-plot.py: SVG, no plotting package needed).
#
# usage: bench/sweep.sh [LIB] [OUT_DIR] [ROUNDS]
#   LIB      libfabsock.so (default: $FABSOCK_LIB, else <source>/build/.libs/libfabsock.so)
#   OUT_DIR  where sweep.json and sweep.svg go (default .)
#   ROUNDS   alternating rounds per side, median reported (default 3)
# SWEEP_SIZES / SWEEP_MSGS override the ping-pong / stream sizes.
# About 3 minutes on 2 CPUs; servers on CPU 0, clients on CPU 1 where the
# machine has two (rounds are then comparable: docs in bench/README.md).
set -u
here=$(cd "$(dirname "$0")" && pwd)
lib=${1:-${FABSOCK_LIB:-$here/../build/.libs/libfabsock.so}}
out=${2:-.}
rounds=${3:-3}
bench=$(dirname "$lib")/../bench/fabsock-bench
[ -x "$bench" ] || bench=$here/../build/bench/fabsock-bench
[ -f "$lib" ] && [ -x "$bench" ] || { echo "sweep: need $lib and bench/fabsock-bench (make)" >&2; exit 1; }
mkdir -p "$out" || exit 1
sizes=${SWEEP_SIZES:-64,256,1k,4k,16k,64k,256k,1m,4m}
msgs=${SWEEP_MSGS:-4k,16k,64k,256k,1m,4m}
cpus=()
[ "$(nproc)" -ge 2 ] && cpus=(--cpus 0,1)
"$bench" compare --lib "$lib" "${cpus[@]}" --tests pingpong,stream --sizes "$sizes" --msg "$msgs" \
  --floor-all --pp-time 2 --time 2 --rounds "$rounds" --json "$out/sweep.json" || exit 1
python3 "$here/sweep-plot.py" "$out/sweep.json" "$out/sweep.svg"
