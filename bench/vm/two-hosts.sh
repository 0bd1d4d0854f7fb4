#!/bin/sh
# Two hosts: raw verbs (perftest), kernel TCP, libfabsock's preload (auto mode: it chooses rdma
# by itself) and rsocket's preload between two Soft-RoCE guests joined by one link, in ONE run
# (tests/vm/run-two-hosts.sh boots them; tests/vm/t2_hosts.sh measures, sections verbs and
# across).  sockperf 64 B ping-pong p50 / p99 (half a round trip, as ib_send_lat reports it) and
# iperf3 one stream; libfabsock's rows are checked to be on rdma at both ends.
#
# Usage: bench/vm/two-hosts.sh [--json FILE]
# Environment: FABSOCK_LIB, FABSOCK_BIN (`make bench-vm-two` sets them), SOCKPERF_TIME,
#   IPERF3_TIME (6 s each), FABSOCK_VM_CPUS (vCPUs per guest, default 1 here: two guests share
#   this machine's cores), FABSOCK_BENCH_TIMEOUT (default 900 s).
# Exit status: run-two-hosts.sh's (77 with "# SKIP" when this machine cannot run the VMs).
# Under TCG emulation only the rows of one run compare; see README for why raw verbs across
# the link trail TCP there.
set -eu
here=$(cd "$(dirname "$0")" && pwd -P)
json=
case ${1:-} in
  --json) json=${2:?usage: two-hosts.sh [--json FILE]} ;;
  "") ;;
  *) echo "usage: two-hosts.sh [--json FILE]" >&2; exit 2 ;;
esac
out=$(mktemp "${TMPDIR:-/tmp}/two-hosts.XXXXXX")
trap 'rm -f "$out" "$out.st" "$out.json"' EXIT
FABSOCK_VM_CPUS=${FABSOCK_VM_CPUS:-1} FABSOCK_T2_ONLY="verbs across" FABSOCK_T2_JSON=$out.json
export FABSOCK_VM_CPUS FABSOCK_T2_ONLY FABSOCK_T2_JSON
t2=$here/../../tests/vm/t2_hosts.sh
{ st=0; "$here/../../tests/vm/run-two-hosts.sh" "$t2" "$t2" "${FABSOCK_BENCH_TIMEOUT:-900}" || st=$?
  echo "$st" > "$out.st"; } | tee "$out"
st=$(cat "$out.st")
[ "$st" != 77 ] || exit 77
[ -s "$out.json" ] || { echo "two-hosts: no figures (the guests failed)" >&2; exit 1; }
echo "--- json"
cat "$out.json"
echo "--- end"
[ -z "$json" ] || cp "$out.json" "$json"
! grep -q '^not ok' "$out"
