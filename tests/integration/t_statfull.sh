#!/bin/bash
# t_statfull: the stat directory full, as a container's 64 MB /dev/shm is
# once the application's own segments fill it.  Each process's table is a
# sparse file there; a store into one of its holes raised SIGBUS and killed
# redis-benchmark at its 31st socket.  Here the
# directory is a 64 KiB tmpfs (a mount namespace of the test's own, so root
# only) with room for the first page of two tables: redis-benchmark -c 50
# against redis-server must complete with no error, the server must live on,
# a 64 KiB value must round-trip, and (both ends preloaded) the server's
# library must say that sockets are not listed for want of room.
# Into a mount namespace of its own first (before lib.sh makes its scratch
# directory, which an exec would leave behind).
if [ -z "${IT_STATFULL_NS:-}" ] && [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
  IT_STATFULL_NS=1 exec unshare -m --propagation private "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"
require_cmd redis-server redis-cli redis-benchmark mount
[ -n "${IT_STATFULL_NS:-}" ] || skip_all "needs root and unshare (a tmpfs in a mount namespace of its own)"

dir=$IT_TMP/statdir
mkdir -p "$dir"
mount -t tmpfs -o size=64k,mode=1777 tmpfs "$dir" || skip_all "cannot mount a tmpfs here"
export FABSOCK_STATDIR=$dir FABSOCK_LOG=info
# 15 of the 16 pages: one for the server's table's header (and its first
# 30 slots), made at its listen(), no room for its second page.  A client
# makes its file only at its first upgrade attempt (base/stat.h), by then
# into a full directory: it stays unlisted (logged), and runs on.
head -c $((15 * 4096)) /dev/zero >"$dir/fill"

head -c 65536 /dev/urandom >"$IT_TMP/value"
want=$(sha "$IT_TMP/value")

for MODE in $(it_modes); do
  start_redis || continue
  port=$REDIS_PORT

  name="redis-benchmark -n 20000 -c 50 -t get,set, stat directory full"
  out=$IT_TMP/bench.$MODE
  run_client redis-benchmark -p "$port" -n 20000 -c 50 -t get,set --csv >"$out" 2>"$out.err"
  rc=$?
  if [ $rc -ne 0 ]; then detail="exit $rc: $(head -c 200 "$out.err")"
  elif grep -qi 'error' "$out"; then rc=1; detail="errors: $(grep -hi -m1 error "$out")"
  elif ! grep -q '"SET"' "$out" || ! grep -q '"GET"' "$out"; then rc=1; detail="no SET/GET result in the output"
  else detail="completed"; fi
  server_check || { rc=1; detail="$SRV_DETAIL; $detail"; }
  tap_result $rc "$name [$MODE]" "$detail" "$out.err" "$SERVER_LOG"

  name="redis-cli SET/GET of a 64 KiB value, stat directory full"
  key="fabsock:$MODE:$RANDOM"
  rc=0
  set_out=$(run_client redis-cli -p "$port" -x SET "$key" <"$IT_TMP/value" 2>"$out.cli.err") || rc=1
  run_client redis-cli -p "$port" --raw GET "$key" >"$out.get" 2>>"$out.cli.err" || rc=1
  head -c -1 "$out.get" >"$out.value" # redis-cli adds a newline
  if [ $rc -ne 0 ] || [ "$set_out" != OK ]; then rc=1; detail="SET said '$set_out'"
  elif [ "$(sha "$out.value")" != "$want" ]; then rc=1; detail="GET returned different bytes"
  else detail="sha256 ok"; fi
  tap_result $rc "$name [$MODE]" "$detail" "$out.cli.err" "$SERVER_LOG"

  # Both ends preloaded, the server lists all 50 connections (with a plain
  # client it lists only those it may upgrade, a few at a time).
  if [ "$MODE" = both ] && [ -n "$FABSOCK_LIB" ]; then
    name="the server says its sockets are not listed for want of room"
    if grep -q 'stat: no room in' "$SERVER_LOG"; then tap_ok "$name [$MODE]"
    else tap_not_ok "$name [$MODE]" "no such line in its log" "$SERVER_LOG"; fi
  fi
  stop_server
done
umount "$dir"
it_done
