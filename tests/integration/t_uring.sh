#!/bin/bash
# t_uring: io_uring on accelerated connections (tests/progs/uringio).  A
# ring's recv, send and accept go to the kernel socket without any call the
# library sees, so a process that sets one up must have every connection
# back on TCP, byte-exact, and keep new ones there (stat reason io-uring).
#   switch   both ends send/recv half way, then switch to a ring made with
#            syscall(SYS_io_uring_setup) (libuv, Rust's libc crate);
#            connection upgraded before its first byte (FABSOCK_UPGRADE_BYTES=0,
#            the client held until both ends show the fabric)
#   liburing the same with a ring made by liburing (io_uring_queue_init),
#            whose set-up system call bypasses libc: a ring the library
#            follows (preload/uring.c), so the socket its SQEs name goes
#            back to TCP for good (reason kernel-io) before they go
#   files    a liburing ring for file reads alone (a scratch file by fd and
#            registered, InnoDB's way) at both ends, before the connection
#            and after the stream; the stream is send()/recv()'s: in [both]
#            both ends stay on the fabric (they went to TCP, io-uring)
#   accept   the server makes its ring first, accepts and reads through it;
#            the client sends with send() only: its rendezvous with a
#            process that takes no channel is refused at once, not held
#   acceptlib the same with a liburing ring, which is followed: the accepted
#            socket is the kernel's (never tracked), the client stays on TCP
# Each: bytes and CRC intact, nothing hangs; but for files, each preloaded
# end ends on TCP with reason io-uring (kernel-io: liburing) where it was
# surely on the fabric (or asked for it).
. "$(dirname "$0")/lib.sh"
require_progs uringio
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-30} # a hang must not eat the budget

real_python
probe=$IT_TMP/uring.probe
if "$PROGS/uringio" -l -A -P "$probe" >/dev/null 2>"$probe.err" & ppid=$!; wait_file "$probe" "$ppid" 10; then
  kill "$ppid" 2>/dev/null
else
  wait "$ppid"
  [ $? -eq 77 ] && skip_all "this kernel refuses io_uring: $(cat "$probe.err")"
fi
wait "$ppid" 2>/dev/null

for MODE in $(it_modes); do
  for tag in switch liburing accept acceptlib files; do
    why=io-uring
    case $tag in
      switch) sargs='' cargs='' early=1 want=accept name="both ends switch to io_uring (syscall) half way through 8 MiB, upgraded before the first byte" ;;
      liburing) sargs=-L cargs=-L early=1 want=accept why=kernel-io name="both ends switch to io_uring (liburing) half way through 8 MiB, upgraded before the first byte" ;;
      accept) sargs=-A cargs="-s 8M" early='' want=connect name="server accepts and reads 8 MiB through io_uring, client plain send()" ;;
      acceptlib) sargs="-A -L" cargs="-s 8M" early='' want='' why= name="server accepts and reads 8 MiB through a liburing ring, client plain send()" ;;
      files) sargs=-F cargs=-F early='' want='' why= name="a liburing ring for files at both ends (InnoDB's way), 8 MiB by send/recv: the fabric kept" ;;
    esac
    if { [ "$tag" = liburing ] || [ "$tag" = acceptlib ] || [ "$tag" = files ]; } &&
      [ "$("$PROGS/uringio" -V)" != liburing=yes ]; then
      tap_skip "$name [$MODE]" "tests/progs/uringio built without liburing (install liburing-dev, re-run configure)"
      continue
    fi
    out=$IT_TMP/ur-out.$tag.$MODE
    if [ -n "$early" ]; then FABSOCK_UPGRADE_BYTES=0 stream_run uringio "$tag" 1 "$want $why" "$sargs" "$cargs" >"$out"
    else stream_run uringio "$tag" "" "${want:+$want $why}" "$sargs" "$cargs" >"$out"; fi
    printf '%s\n' "$STREAM_STAT" >>"$out"
    stream_why "$out"
    # Every preloaded end is on TCP at the end.  Where both ends are
    # preloaded the reason is io-uring: each end made a ring after the
    # connection reached the fabric (switch, liburing), or the server's
    # process refused the client's rendezvous (accept, where the ring
    # accepted the server's end: never tracked).
    if [ "$tag" = files ]; then
      # Both ends on the fabric at the end of the stream, the rings notwithstanding.
      if [ "$MODE" = both ] && fabric_enabled; then
        for d in connect accept; do
          l=" $(grep -m1 "dir=$d " <<<"$STREAM_STAT") "
          [[ $l == *" fabric=$(fabric_expected) "* ]] || WHY="${WHY:+$WHY; }dir=$d:$l"
        done
      fi
    elif [ "$MODE" != plain ]; then
      skip=; [ "$tag" = accept ] || [ "$tag" = acceptlib ] && skip=accept
      ends_tcp_why "$STREAM_STAT" "$([ "$MODE" = both ] && echo "$why")" $skip
    fi
    tap_result "$([ -z "$WHY" ]; echo $?)" "$name [$MODE]" "${WHY:-${STREAM_SERVER#uringio: }}" "$out"
  done
done
it_done
