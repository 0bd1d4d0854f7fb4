#!/usr/bin/env bash
# gpu.sh: GPU device memory through a socket, side by side in one run:
#   tcp/stage    plain kernel TCP, the application stages through pinned memory
#   fabsock/stage  the same program preloaded (shm)
#   fabsock/direct device pointers handed to send()/recv() under libfabsock
#   tcp/direct   the kernel's answer to a device pointer (EFAULT expected)
#   copies       the device copies alone, no socket (the floor of staging)
# then a table of GB/s and round trips with ratios against tcp/stage, and
# `fabsock stat` sampled while fabsock/direct ran (the fabric it used).
#
# usage: bench/gpu.sh [LIB] [OUT_DIR] [ROUNDS]
#   LIB      libfabsock.so (default: $FABSOCK_LIB, else <source>/build/.libs/libfabsock.so)
#   OUT_DIR  where gpu.json goes (default .)
#   ROUNDS   measured rounds per stream size, median reported (default 3)
# GPU_BENCH_ARGS adds gpu-stream options (e.g. "--sizes 1m,64m --bytes 4g").
# Exit 77 with "# SKIP ..." without a CUDA driver or device.
set -u
here=$(cd "$(dirname "$0")" && pwd)
lib=${1:-${FABSOCK_LIB:-$here/../build/.libs/libfabsock.so}}
out=${2:-.}
rounds=${3:-3}
top=$(cd "$(dirname "$lib")/.." && pwd)
bin=$top/bench/gpu-stream
fabsock=$top/fabsock
[ -f "$lib" ] && [ -x "$bin" ] || { echo "gpu.sh: need $lib and $bin (make)" >&2; exit 1; }
mkdir -p "$out" || exit 1
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2206
extra=(${GPU_BENCH_ARGS:-})

one() { # LABEL PRELOAD(0|1) MODE [ARGS...]
  local label=$1 pre=$2 mode=$3
  shift 3
  if [ "$pre" = 1 ]; then
    LD_PRELOAD=$lib${LD_PRELOAD:+:$LD_PRELOAD} "$bin" --mode "$mode" --label "$label" \
      --rounds "$rounds" --json "${extra[@]}" "$@"
  else
    "$bin" --mode "$mode" --label "$label" --rounds "$rounds" --json "${extra[@]}" "$@"
  fi
}

: >"$tmp/all.json"
one tcp/stage 0 stage >>"$tmp/all.json" 2>"$tmp/err"
rc=$?
if [ $rc = 77 ] || grep -q '# SKIP' "$tmp/all.json"; then
  grep '# SKIP' "$tmp/all.json" | sed 's/^1\.\.0 //'
  exit 77
fi
[ $rc = 0 ] || { echo "gpu.sh: tcp/stage failed ($rc)"; cat "$tmp/err"; exit 1; }
one copies 0 floor >>"$tmp/all.json" 2>>"$tmp/err" ||
  { echo "gpu.sh: copies failed"; cat "$tmp/err"; exit 1; }
one fabsock/stage 1 stage >>"$tmp/all.json" 2>>"$tmp/err" ||
  { echo "gpu.sh: fabsock/stage failed"; cat "$tmp/err"; exit 1; }

# fabsock/direct, with fabsock stat sampled while it runs
one fabsock/direct 1 direct >>"$tmp/all.json" 2>>"$tmp/err" &
pid=$!
: >"$tmp/stat"
while kill -0 $pid 2>/dev/null; do
  s=$("$fabsock" stat 2>/dev/null | awk 'NF == 0 { exit } NR == 1 || /gpu-stream/') # the connections, not the closed counts below them
  [ "$(printf '%s\n' "$s" | wc -l)" -gt 1 ] && printf '%s\n' "$s" >"$tmp/stat"
  sleep 0.3
done
wait $pid || { echo "gpu.sh: fabsock/direct failed"; cat "$tmp/err"; exit 1; }

"$bin" --mode direct --label tcp/direct --sizes 64k --pp-sizes 64 --rounds 1 >/dev/null 2>"$tmp/plain-direct"
prc=$?
case $prc in
3) kernel="the kernel refused the device pointer: $(grep -m1 "Bad address" "$tmp/plain-direct")" ;;
0) kernel="plain TCP accepted a device pointer (unexpected)" ;;
*) kernel="tcp/direct exited $prc: $(tail -1 "$tmp/plain-direct")" ;;
esac

python3 - "$tmp/all.json" "$out/gpu.json" "$kernel" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
json.dump({"results": rows, "tcp_direct": sys.argv[3]}, open(sys.argv[2], "w"), indent=1)
def get(label, test, size):
    for r in rows:
        if r["label"] == label and r["test"] == test and r["size"] == size:
            return r
def sz(n):
    for u, s in ((1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= u and n % u == 0:
            return "%d %s" % (n // u, s)
    return "%d B" % n
labels = ("tcp/stage", "fabsock/stage", "fabsock/direct", "copies")
print("stream, device to device (GB/s, median; x = against tcp/stage)")
print("%-8s %10s %14s %15s %8s %8s %8s" % ("size", *labels[:3], "stage x", "direct x", labels[3]))
for size in sorted({r["size"] for r in rows if r["test"] == "stream"}):
    v = [get(l, "stream", size) for l in labels]
    g = [x["gbps"] if x else float("nan") for x in v]
    print("%-8s %10.2f %14.2f %15.2f %7.2fx %7.2fx %8.2f" % (sz(size), *g[:3], g[1] / g[0], g[2] / g[0], g[3]))
print("\nping-pong, device to device (round trip us, p50 / p99; x = p50 against tcp/stage)")
print("%-8s %16s %16s %16s %8s %8s %16s" % ("size", *labels[:3], "stage x", "direct x", labels[3]))
for size in sorted({r["size"] for r in rows if r["test"] == "pingpong"}):
    v = [get(l, "pingpong", size) for l in labels]
    c = ["%7.1f / %7.1f" % (x["p50_us"], x["p99_us"]) if x else "-" for x in v]
    print("%-8s %16s %16s %16s %7.2fx %7.2fx %16s" % (sz(size), *c[:3], v[0]["p50_us"] / v[1]["p50_us"],
                                                      v[0]["p50_us"] / v[2]["p50_us"], c[3]))
print("\ntcp/direct:", sys.argv[3])
EOF
echo
echo "fabsock stat while fabsock/direct ran:"
cat "$tmp/stat"
