#!/bin/bash
# Guest script, by hand (not in the suite): the forksrv shape that caught the late re-send
# (t_forksrv's 4 client threads x 25 sequential connections of 16 KiB in 1 KiB writes, both ends
# preloaded, FABSOCK_TRANSPORT=rdma) run LOOPS times in a row, to count the rare failures a
# single suite run shows once in several CI runs.
#
#   FABSOCK_LIB=build/.libs/libfabsock.so LOOPS=40 tests/vm/run-in-vm.sh tests/vm/loop-forksrv.sh
#
# Environment: FABSOCK_LIB (required; tests/progs built beside it), LOOPS (default 40),
# FABSOCK_LOG (default info; debug changes the timing: it failed more often there), OUT (a
# directory on this machine: the logs of failed iterations are copied there; default
# $PWD/loop-forksrv.out).  Prints one line per iteration and "failures N of M"; exit 1 if any.
. "$(dirname "$0")/lib.sh"
lib=$(readlink -f "${FABSOCK_LIB:?set FABSOCK_LIB}")
progs=$(dirname "$(dirname "$lib")")/tests/progs
[ -x "$progs/forksrv" ] && [ -x "$progs/mtclient" ] || { echo "no tests/progs beside $lib" >&2; exit 2; }
out=${OUT:-$PWD/loop-forksrv.out}
mkdir -p "$out"
export FABSOCK_TRANSPORT=rdma FABSOCK_LOG=${FABSOCK_LOG:-info}
fail=0 n=${LOOPS:-40} i=0
while [ $i -lt "$n" ]; do
  i=$((i + 1))
  pf=$TMPDIR/port.$i
  LD_PRELOAD=$lib "$progs/forksrv" -H "$VM_IP" -p 0 -P "$pf" >"$TMPDIR/srv.$i.log" 2>&1 &
  sp=$!
  for _ in $(seq 100); do [ -s "$pf" ] && break; sleep 0.1; done
  LD_PRELOAD=$lib timeout 120 "$progs/mtclient" -H "$VM_IP" -p "$(cat "$pf")" -t 4 -r 25 -n 16K -c 1K \
    >"$TMPDIR/cli.$i.log" 2>&1
  rc=$?
  kill $sp 2>/dev/null
  wait $sp 2>/dev/null
  if [ $rc -ne 0 ]; then
    fail=$((fail + 1))
    cp "$TMPDIR/cli.$i.log" "$TMPDIR/srv.$i.log" "$out/"
  fi
  echo "iteration $i: rc $rc: $(grep -v '^fabsock' "$TMPDIR/cli.$i.log" | tail -n 1)"
done
echo "failures $fail of $n"
[ $fail -eq 0 ]
