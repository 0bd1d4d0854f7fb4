#!/bin/bash
# Guest script, by hand (not in the suite): `closeall -m MODE` (tests/progs/closeall: a program
# that closes every descriptor from 3 up while its connection upgrades) with the client alone
# preloaded over rdma, LOOPS times, each library in FABSOCK_LIBS in turn (an A/B in one VM):
# the race that found rdma-core's files at the number the program had just closed (the rdma
# probe loading rdma-core on the agent thread) failed about 1 run in 4 before the library's
# descriptor windows (base/fdreg.h).  The echo server is plain; its connections stay tcp (the
# rdma connect finds no rdma listener), the probe runs all the same.
#
#   FABSOCK_LIBS="old/.libs/libfabsock.so build/.libs/libfabsock.so" LOOPS=20 \
#     tests/vm/run-in-vm.sh tests/vm/loop-closeall.sh
#
# Environment: FABSOCK_LIBS (required; tests/progs are taken from beside the last one), LOOPS
# (default 20), MODES (default "loop closefrom").  Prints the failures as they come, then
# "LIB: N passed, N failed" per library; exit 1 if the last library failed any.
. "$(dirname "$0")/lib.sh"
set -- ${FABSOCK_LIBS:?set FABSOCK_LIBS}
libs=()
for l in "$@"; do libs+=("$(readlink -f "$l")"); done
progs=$(dirname "$(dirname "${libs[-1]}")")/tests/progs
[ -x "$progs/closeall" ] && [ -x "$progs/echosrv" ] || { echo "no tests/progs beside ${libs[-1]}" >&2; exit 2; }
export IT_HOST=$VM_IP FABSOCK_TRANSPORT=rdma
"$progs/echosrv" -e -H "$VM_IP" -P "$TMPDIR/closeall.port" >"$TMPDIR/echosrv.log" 2>&1 &
srv=$!
for _ in $(seq 100); do [ -s "$TMPDIR/closeall.port" ] && break; sleep 0.1; done
port=$(cat "$TMPDIR/closeall.port")
declare -A pass fail
for i in $(seq "${LOOPS:-20}"); do
  for lib in "${libs[@]}"; do
    for mode in ${MODES:-loop closefrom}; do
      out=$(LD_PRELOAD=$lib timeout 60 "$progs/closeall" -p "$port" -m "$mode" 2>&1)
      if [ $? -eq 0 ]; then
        pass[$lib]=$((${pass[$lib]:-0} + 1))
      else
        fail[$lib]=$((${fail[$lib]:-0} + 1))
        echo "# $lib $mode: $(grep -v '^ *fd [0-2]:' <<<"$out" | tr '\n' ' ' | cut -c1-300)"
      fi
    done
  done
done
kill $srv 2>/dev/null
for lib in "${libs[@]}"; do echo "$lib: ${pass[$lib]:-0} passed, ${fail[$lib]:-0} failed"; done
[ "${fail[${libs[-1]}]:-0}" -eq 0 ]
