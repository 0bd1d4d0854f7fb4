#!/bin/bash
# t_splice: splice() on an accelerated connection, at both ends, half way
# through a stream (tests/progs/splicer).  The kernel serves splice from the
# kernel socket alone, so the library must bring the connection back to TCP
# first, byte-exact: the bytes arrive intact (same count and CRC as sent),
# nothing hangs, each preloaded end ends on TCP, and one that was on the
# fabric shows reason kernel-io.  Run also
# with the connection upgraded before its first byte (FABSOCK_UPGRADE_BYTES=0,
# the client held until both ends show the fabric), where every byte before
# the splice sits in a ring.
. "$(dirname "$0")/lib.sh"
require_progs splicer
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-30} # a hang must not eat the budget

real_python
for MODE in $(it_modes); do
  for tag in threshold early; do
    early=; [ "$tag" = early ] && early=1
    name="splice at both ends half way through 8 MiB${early:+ (upgraded before the first byte)}: intact, back on TCP"
    out=$IT_TMP/sp-out.$tag.$MODE
    if [ -n "$early" ]; then FABSOCK_UPGRADE_BYTES=0 stream_run splicer "$tag" 1 "" "" "-s 3M" >"$out"
    else stream_run splicer "$tag" "" "" "" "-s 3M" >"$out"; fi
    printf '%s\n' "$STREAM_STAT" >>"$out"
    stream_why "$out"
    # Each preloaded end is on TCP at the end.  Where it surely was on the
    # fabric before the splice (both ends, upgraded first) the reason says
    # why it left; otherwise an earlier reason (peer-no-fabsock, or a
    # rendezvous the splice overtook) may stand.
    if [ "$MODE" != plain ]; then
      want=
      [ "$MODE" = both ] && [ -n "$early" ] && want=kernel-io
      ends_tcp_why "$STREAM_STAT" "$want"
    fi
    tap_result "$([ -z "$WHY" ]; echo $?)" "$name [$MODE]" "${WHY:-${STREAM_SERVER#splicer: }}" "$out"
  done
done
it_done
