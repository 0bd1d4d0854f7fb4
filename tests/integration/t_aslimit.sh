#!/bin/bash
# t_aslimit: an address-space limit (ulimit -v; a batch system's vmem or
# h_vmem) must not make the application run out where plain TCP did not.
# An echo server and a client (aslimit.py), each under ulimit -v 512 MiB,
# move 2 MiB each way on each of 48 connections (4 MiB rings: 8 MiB mapped
# per connection in each process, 384 MiB in all: with the application's
# own, past the limit), check every
# byte, then each allocates a fifth of the limit.  Rings took whatever was
# left, and the client failed with MemoryError; now connections whose rings
# would leave the application less than half of its limit stay on TCP
# (reason resources), which the library says once.  Half: at 0 bytes the
# rings are mapped at connect, before the client's thread (72 MiB of
# address space) and its fifth; with a quarter kept, that order ran out.
# The library's own threads count too: its aside thread's first malloc
# (opendir) reserved a glibc arena, 64 MiB, and the client preloaded
# against a plain server (no rings at all) ran out once; it mallocs no more
# (check_fdreg t_aside_scan_mallocs_nothing).
. "$(dirname "$0")/lib.sh"
real_python

# 512, not 384: with half kept, 384 left room for one connection's rings
# where the client had its thread already (some on shm is checked too).
limit=$((512 << 20)) conns=48
export FABSOCK_SHM_RING=4M FABSOCK_LOG=debug
under_limit=(bash -c 'ulimit -v "$1" && shift && exec "$@"' ulimit $((limit >> 10)))

for MODE in $(it_modes); do
  pf=$IT_TMP/port.$MODE
  start_server aslimit "${under_limit[@]}" "$IT_PYTHON" "$IT_DIR/aslimit.py" server "$pf" $conns $limit
  if ! wait_file "$pf" "$SERVER_PID" 20; then
    tap_not_ok "aslimit server [$MODE]" "no port file" "$SERVER_LOG"; stop_server; continue
  fi
  name="$conns connections echoing 2 MiB under ulimit -v $((limit >> 20)) MiB, then a fifth of it allocated"
  out=$IT_TMP/client.$MODE
  run_client "${under_limit[@]}" "$IT_PYTHON" "$IT_DIR/aslimit.py" client "$(cat "$pf")" $conns $limit >"$out" 2>&1
  rc=$?
  it_reap "$SERVER_PID"; it_forget "$SERVER_PID"
  if [ $rc -ne 0 ]; then detail="client: exit $rc: $(grep -v '^fabsock' "$out" | tail -n 1 | head -c 200)"
  elif ! grep -q '^client: allocated' "$out"; then rc=1; detail="client: no allocation reported"
  elif ! grep -q '^server: allocated' "$SERVER_LOG"; then rc=1; detail="server: $(grep -v '^fabsock' "$SERVER_LOG" | tail -n 1 | head -c 200)"
  else detail="every byte back; both allocated $((limit / 5 >> 20)) MiB"; fi
  tap_result $rc "$name [$MODE]" "$detail" "$out" "$SERVER_LOG"
  if [ "$MODE" = both ] && [ -n "$FABSOCK_LIB" ]; then
    name="some connections on shm, and the library says why the rest stay on tcp"
    on=$(grep -c 'debug: fd [0-9]* on shm' "$out")
    if ! grep -q 'address space: .* (RLIMIT_AS) in use' "$out" "$SERVER_LOG"; then
      tap_not_ok "$name [$MODE]" "no such line in either log" "$out" "$SERVER_LOG"
    elif [ "$on" -lt 1 ] || [ "$on" -ge $conns ]; then
      tap_not_ok "$name [$MODE]" "$on of $conns connections on shm" "$out"
    else tap_ok "$name [$MODE]" "$on of $conns on shm"; fi
  fi
done
it_done
