#!/bin/bash
# t_errnos: tests/progs/errnos calls the socket API with bad descriptors, a
# pipe (ENOTSOCK), bad arguments (EINVAL, EAFNOSUPPORT, ...), an unconnected
# socket (ENOTCONN, EPIPE), a refused connect (ECONNREFUSED), non-blocking
# reads (EAGAIN), a double connect (EISCONN), bad buffers (EFAULT),
# shutdown/half-close, dup, epoll errors, vectors the kernel refuses
# (IOV_MAX + 1 or -1 buffers: EINVAL, EMSGSIZE) and discarding receives
# (MSG_TRUNC, NULL buffer) on a pair that moved 1 MiB each way (on a fabric
# where preloaded: it took 1025 buffers, and read "0 bytes" for -1), and
# checks that successful calls leave errno alone.  One process; the preloaded transcript must be
# identical to the plain one.
. "$(dirname "$0")/lib.sh"
require_progs errnos
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-20} # quick clients: a hang must not eat the budget

er_run() { run_single "$PROGS/errnos" 2>&1; echo "exit: $?"; }

for MODE in $(it_modes); do
  [ "$MODE" = server ] && continue # one process: client/both/server preload alike
  name="errno fidelity transcript identical to plain"
  out=$IT_TMP/errnos.$MODE.out
  ensure_ref errnos er_run
  er_run >"$out"
  rc=0
  grep -qx 'exit: 0' "$out" || rc=1
  lines=$(grep -c ': ' "$out")
  if compare_ref errnos "$out"; then detail="$lines lines"; else rc=1; detail="differs from plain: $DIFF"; fi
  if [ $rc -ne 0 ]; then
    tap_not_ok "$name [$MODE]" "$detail"
    diff -u "$(ref_file errnos)" "$out" | sed -n '3,$p' | grep '^[-+]' | head -n 20 | sed 's/^/#   /'
  else
    tap_ok "$name [$MODE]" "$detail"
  fi
done
it_done
