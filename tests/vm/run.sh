#!/bin/bash
# Soft-RoCE VM tests: boots ONE VM (run-in-vm.sh) and runs every tests/vm/t_rdma_*.sh in it
# (guest-suite.sh), then two VMs as two hosts (run-two-hosts.sh, t2_hosts.sh).  Prints one TAP stream, then "# N passed, N failed (N todo, N skipped)".
# Exit 0 when nothing failed (TODO points do not count), 1 otherwise; a machine that cannot run
# the VM prints "1..0 # SKIP reason" and exits 0.
#
# Before booting it starts, on this machine (10.0.2.2 from the guest, which has no RDMA):
#   a plain echo server         -> FABSOCK_VM_HOST_PLAIN=10.0.2.2:PORT
#   an echo server preloaded with $FABSOCK_LIB (when built) -> FABSOCK_VM_HOST_FABSOCK=10.0.2.2:PORT
# and checks after the run that both are still alive.
#
# Environment: FABSOCK_LIB, FABSOCK_BIN (libfabsock.so and the fabsock tool; `make check-vm`
#   sets them; without them the libfabsock tests skip), FABSOCK_VM_TIMEOUT (whole VM, default
#   2100 s), FABSOCK_VM_TESTS, FABSOCK_VM_TEST_TIMEOUT (see guest-suite.sh), and those of
#   run-in-vm.sh.
set -u
dir=$(cd "$(dirname "$0")" && pwd -P)
work=$(mktemp -d "${TMPDIR:-/tmp}/fabsock-vmrun.XXXXXX")
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
t0=$SECONDS
python=$(command -v /usr/bin/python3 || command -v python3)
host_points=()
started=()

# start_echo NAME VAR [LIB]: an echo server on 0.0.0.0:any port, exported as VAR=10.0.2.2:PORT.
start_echo() {
  local name=$1 var=$2 lib=${3:-}
  env ${lib:+LD_PRELOAD=$lib} "$python" "$dir/vmtool.py" echo-server --bind 0.0.0.0 \
    --port-file "$work/$name.port" > "$work/$name.log" 2>&1 < /dev/null &
  pids+=($!)
  eval "${name}_pid=$!"
  local i
  for i in $(seq 100); do [ -s "$work/$name.port" ] && break; sleep 0.1; done
  if [ -s "$work/$name.port" ]; then
    export "$var=10.0.2.2:$(cat "$work/$name.port")"
    host_points+=("ok - host: $name echo server listening on 0.0.0.0:$(cat "$work/$name.port")")
    started+=("$name")
  else
    host_points+=("not ok - host: $name echo server did not start: $(tail -n 2 "$work/$name.log" | tr '\n' ' ')")
  fi
}
start_echo plain FABSOCK_VM_HOST_PLAIN
if [ -n "${FABSOCK_LIB:-}" ] && [ -f "$FABSOCK_LIB" ]; then
  start_echo preloaded FABSOCK_VM_HOST_FABSOCK "$FABSOCK_LIB"
fi

# The files exist before the tails start: a `tail -f` that finds no file gives up at once, and
# then the guest's whole TAP went missing from the log (the count at the end still read it).
: > "$work/out"
: > "$work/two"
"$dir/run-in-vm.sh" "$dir/guest-suite.sh" "${FABSOCK_VM_TIMEOUT:-2100}" > "$work/out" 2> "$work/err" &
vm=$!
pids+=($vm)
tail -n +1 -f --pid=$vm "$work/out" 2> /dev/null | grep --line-buffered -v '^1\.\.[0-9]*$' &
tailpid=$!
wait $vm
vst=$?
wait $tailpid
[ -s "$work/err" ] && sed 's/^\([^#]\)/# \1/' "$work/err"

if [ $vst = 77 ]; then
  echo "1..0 $(grep -m1 '^# SKIP' "$work/out")"
  exit 0
fi

# Two hosts (run-two-hosts.sh: two guests, one link, a Soft-RoCE device each): t2_hosts.sh in
# both, its points numbered after the single guest's.  FABSOCK_VM_TWO=0 leaves it out.
n=$(grep -c -E '^(not )?ok ' "$work/out")
tst=0
if [ "${FABSOCK_VM_TWO:-1}" != 0 ]; then
  echo "# ---- t2_hosts (two guests)"
  # One vCPU per guest (FABSOCK_VM_TWO_CPUS): two guests of two would put four vCPU threads on
  # a 2-core machine (in CI: libfabsock's p50 2.3-2.6x raw verbs', 1.2-1.5x with one each).
  FABSOCK_VM_CPUS=${FABSOCK_VM_TWO_CPUS:-1} \
    "$dir/run-two-hosts.sh" "$dir/t2_hosts.sh" "$dir/t2_hosts.sh" "${FABSOCK_VM_TWO_TIMEOUT:-1200}" \
    >> "$work/two" 2>&1 &
  vm=$!
  pids+=($vm)
  tail -n +1 -f --pid=$vm "$work/two" 2> /dev/null | awk -v n="$n" -v out="$work/out" '
    /^(not )?ok / { v = ($1 == "not") ? "not ok" : "ok"; sub(/^(not )?ok [0-9]+ -? ?/, "")
                    line = sprintf("%s %d - t2_hosts: %s", v, ++n, $0)
                    print line; print line >> out; fflush(); next }
    /^1\.\.[0-9]+$/ { next }
    /^#/ { print; fflush(); next }
    { print "# " $0; fflush() }' &
  tailpid=$!
  wait $vm
  tst=$?
  wait $tailpid
  n=$(grep -c -E '^(not )?ok ' "$work/out")
fi
after=("${host_points[@]}")
for var in "${started[@]}"; do
  eval "p=\$${var}_pid"
  if kill -0 "$p" 2> /dev/null; then after+=("ok - host: $var echo server survived the guest's connections")
  else after+=("not ok - host: $var echo server died: $(tail -n 3 "$work/$var.log" | tr '\n' ' ')"); fi
done
case $tst in
  0 | 77) ;;
  124) after+=("not ok - two-host VM run timed out after ${FABSOCK_VM_TWO_TIMEOUT:-1200}s") ;;
  *) grep -q -E '^(not )?ok ' "$work/two" || after+=("not ok - two-host VM run failed (run-two-hosts.sh exit $tst)") ;;
esac
case $vst in
  0) ;;
  124) after+=("not ok - VM run timed out after ${FABSOCK_VM_TIMEOUT:-2100}s") ;;
  *) after+=("not ok - VM run failed (run-in-vm.sh exit $vst)") ;;
esac
for line in "${after[@]}"; do
  n=$((n + 1))
  echo "$line" | sed -E "s/^(not )?ok -/\1ok $n -/" | tee -a "$work/out"
done
echo "1..$n"

awk '
  /^ok / && / # SKIP/ { skip++; next }
  /^ok / && / # TODO/ { pass++; xpass++; next }
  /^ok /               { pass++; next }
  /^not ok / && / # TODO/ { todo++; next }
  /^not ok /           { fail++ }
  END {
    printf "# %d passed, %d failed (%d todo, %d skipped", pass, fail, todo, skip
    if (xpass) printf ", %d TODO passed unexpectedly", xpass
    printf ")\n"
    exit fail > 0
  }' "$work/out"
st=$?
echo "# wall time $((SECONDS - t0))s"
exit $st
