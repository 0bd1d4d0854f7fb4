#!/bin/bash
# t_forkcost: what a fork costs a child, in page faults (bench/fork-loop:
# fork, _exit at once, wait; faults per child from wait4).  Counted, not
# timed: a fault is what a fork adds here (5-20 us each in a VM), and the
# count does not move with the machine's load.
#   a process that never made a socket (a shell): preloaded, its children
#   take at most 4 faults more than plain ones (0-2 today).  They took 10
#   more: the child's wake pool lock was reset with pthread_mutex_init, a
#   lazy binding in every child (docs/design.md 1.6, base/lock.h), and the
#   connection pool's lock was read on a page the parent never touched;
#   a process holding a TCP socket: reported (the child's own stat table is
#   most of it), at most 30 more than plain (17-20 today);
#   the children of a process with connections that send, make an epoll
#   set and end: no function of the library's bound lazily in them.
# One pass whatever FABSOCK_IT_MODES says: the program is its own peer.
. "$(dirname "$0")/lib.sh"
LOOP=${FABSOCK_FORK_LOOP:-$top_builddir/bench/fork-loop}
[ -x "$LOOP" ] || skip_all "no $LOOP (make)"
[ -f "$FABSOCK_LIB" ] || skip_all "no library at $FABSOCK_LIB"

faults() { # [--no-socket] [preload]: faults per child, 200 forks
  local out
  if [ "${2:-}" = preload ]; then out=$(LD_PRELOAD=$FABSOCK_LIB "$LOOP" 200 $1); else out=$("$LOOP" 200 $1); fi
  set -- $out
  echo "${2:-}"
}
check() { # NAME FLAG MAX_MORE
  local p l
  p=$(faults "$2") l=$(faults "$2" preload)
  if [ -z "$p" ] || [ -z "$l" ]; then
    tap_not_ok "$1" "fork-loop failed: plain '$p', preloaded '$l'"
  elif awk -v p="$p" -v l="$l" -v m="$3" 'BEGIN { exit !(l <= p + m) }'; then
    tap_ok "$1" "faults per child: plain $p, preloaded $l"
  else
    tap_not_ok "$1" "faults per child: plain $p, preloaded $l (more than $3 added)"
  fi
}
check "fork of a process that never made a socket: at most 4 page faults more per child" --no-socket 4
check "fork of a process holding a TCP socket: at most 30 page faults more per child" "" 30

# Lazy bindings of the library's in the children of a process with
# connections (forkbind.py): none.  A PostgreSQL backend bound seven
# (pwrite and unlink for its stat table, dl_iterate_phdr, strncmp and
# strstr for the driver probe at its first send, pthread_mutex_init for
# its epoll set, free), about 0.3 ms of a 20 ms connection here.
bindings() {
  local out lib pid n
  if ! out=$(LD_PRELOAD=$FABSOCK_LIB LD_DEBUG=bindings LD_DEBUG_OUTPUT=$IT_TMP/ld \
               timeout 60 python3 "$IT_DIR/forkbind.py" 2>"$IT_TMP/forkbind.err"); then
    tap_not_ok "$1" "forkbind.py failed: $(tail -n 2 "$IT_TMP/forkbind.err" | tr '\n' ' ')"
    return
  fi
  pid=$(echo "$out" | head -n 1)
  lib=$(basename "$FABSOCK_LIB")
  # One file per image (ld.so names it by the pid it starts in: timeout's
  # is another); children write to their parent's, each line led by its
  # own pid.
  n=$(cat "$IT_TMP/ld.$pid" 2>/dev/null | awk -v pid="$pid" -v lib="/$lib " '
    { p = $1; sub(/:$/, "", p) }
    p != pid && index($0, "binding file ") && index($0, lib "[0] to ") { sub(/.*normal symbol /, ""); print }' |
    sort | uniq -c | tr -s ' \n' ' ')
  if [ "$(echo "$out" | tail -n 1)" != ok ]; then
    tap_not_ok "$1" "forkbind.py did not finish: $out"
  elif [ -z "$n" ]; then
    tap_ok "$1" "no lazy binding of $lib's in the children"
  else
    tap_not_ok "$1" "bound lazily in the children:$n"
  fi
}
bindings "children of a process with connections bind none of the library's functions lazily"
it_done
