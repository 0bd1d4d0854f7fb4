#!/bin/sh
# Compare kernel TCP, rsocket's preload, libfabsock's preload and raw verbs on ONE Soft-RoCE
# device, in ONE VM run (tests/vm/run-in-vm.sh boots it; guest-compare.sh measures).
#
# Usage: bench/vm/rdma-compare.sh [--json FILE]
# Prints the guest's progress, a table and the JSON; --json also writes the JSON to FILE.
# Environment: FABSOCK_LIB, FABSOCK_BIN (`make bench-vm` sets them), FABSOCK_BENCH_PROG
#   (fabsock-bench), FABSOCK_BENCH_TRANSPORT, FB_ROUNDS, SOCKPERF_TIME, IPERF3_TIME (see
#   guest-compare.sh), FABSOCK_LIB_B (another build, one more column: see guest-compare.sh),
#   FABSOCK_BENCH_TIMEOUT (whole VM, default 1200 s), FABSOCK_VM_APPEND (guest kernel
#   arguments, default idle=poll; see below).
# Exit status: run-in-vm.sh's (77 with "# SKIP" when this machine cannot run the VM).
#
# Everything runs under TCG emulation: absolute numbers mean little and move with this machine's
# load (recorded in the JSON); compare rows of the same run only.
set -eu
here=$(cd "$(dirname "$0")" && pwd -P)
json=
case ${1:-} in
  --json) json=${2:?usage: rdma-compare.sh [--json FILE]} ;;
  "") ;;
  *) echo "usage: rdma-compare.sh [--json FILE]" >&2; exit 2 ;;
esac
FABSOCK_BENCH_HOST_LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
# idle=poll: a halted vCPU under TCG is sometimes woken only at the next timer tick, which turns
# a cross-CPU wake-up into ~4 ms and makes blocking ping-pong bimodal (seen: p50 90 us or 4 ms
# from one run to the next).  Polling idle vCPUs costs host CPU but makes rows comparable.
FABSOCK_VM_APPEND=${FABSOCK_VM_APPEND-idle=poll}
export FABSOCK_BENCH_HOST_LOAD FABSOCK_VM_APPEND
out=$(mktemp "${TMPDIR:-/tmp}/rdma-compare.XXXXXX")
trap 'rm -f "$out" "$out.st"' EXIT
{ st=0; "$here/../../tests/vm/run-in-vm.sh" "$here/guest-compare.sh" "${FABSOCK_BENCH_TIMEOUT:-1200}" || st=$?
  echo "$st" > "$out.st"; } | tee "$out"
st=$(cat "$out.st")
[ "$st" != 77 ] || exit 77
if [ -n "$json" ]; then
  sed -n '/^--- json$/,/^--- end$/p' "$out" | sed '1d;$d' > "$json"
  [ -s "$json" ] || { echo "rdma-compare: no JSON in the guest's output" >&2; exit 1; }
fi
grep -q '^--- end$' "$out" || exit 1
exit "$st"
