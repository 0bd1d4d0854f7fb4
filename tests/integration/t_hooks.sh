#!/bin/bash
# t_hooks: inline hooks (FABSOCK_HOOKS) end to end, tests/progs/hookio as
# both ends (client sends stream A, server verifies it and sends stream B
# back; every send and receive call in turn, MSG_PEEK included).  Modes as
# everywhere (lib.sh); "both" runs twice: on shm, and with
# FABSOCK_TRANSPORT=tcp (FABSOCK_IT_HOOKS_BOTH lists others: the rdma VM runs
# "rdma").  Plain runs the same transfers as the control:
# without the library nothing is closed and nothing is counted.
#   dpi close   a dpi pattern (action=close) 4 MiB into the stream: the first
#               preloaded end that receives it closes the connection: its
#               call fails (ECONNABORTED), it logs the hook, pattern, file:line
#               and exact offset, the application never gets the pattern,
#               `fabsock stat` shows reason "hook", and the peer sees the end
#               (EPIPE/ECONNRESET, then EOF) while the closing process still
#               holds its fd.  On shm the sender pauses after 1 MiB until
#               `fabsock stat` shows both ends on shm, so the pattern goes
#               through the fabric.
#   clean       the same dpi hook, clean streams: byte-identical (verified by
#               the receiver, CRC-32s equal to plain's) with random write
#               sizes (64 MiB each way) and fixed ones (100 B .. 1 MiB).
#   frame count frame:header=len32be,max=1024: well-formed frames pass and
#               `fabsock stat` counts them (tx_msgs/rx_msgs = frames, bytes =
#               bytes) on every preloaded end, on the expected fabric.
#   frame max   one frame announces 1025 bytes: refused (the first preloaded
#               end that sees it closes; log line with size, max and offset).
#   digest      a hook .so loaded by path (tests/progs/hook_digest.so) CRCs
#               what it is shown: equal to what the application sent and
#               received, so every byte was seen once and in order, whatever
#               call moved it (send, write, writev, sendmsg, sendto, sendfile;
#               recv, read, readv, recvmsg, recvfrom, MSG_PEEK + read,
#               MSG_WAITALL); and with two threads sending at once, in the
#               order the bytes went.  A hook slow to open on the accepting
#               end does not keep the connection off shm.
. "$(dirname "$0")/lib.sh"
require_progs hookio
[ -n "$FABSOCK_LIB" ] || skip_all "needs the preload library (FABSOCK_LIB)"
DIGEST_SO=$PROGS/.libs/hook_digest.so
[ -f "$DIGEST_SO" ] || skip_all "tests/progs/.libs/hook_digest.so not built (make check)"
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-60}
real_python

# FABSOCK_IT_HOOKS_TESTS: a subset (for working on one), default all.
HK_TESTS=${FABSOCK_IT_HOOKS_TESTS:-dpi clean frame framemax digest}

EVIL='EVIL-7f3a9c-PATTERN'
PAT=$IT_TMP/deny.txt
printf '# patterns for t_hooks\nnot-in-the-stream\n\\x00\\xffBINARY\\x01\n%s\n' "$EVIL" >"$PAT"
EVIL_LINE=4
EVIL_OFF=4194304
DPI="dpi:patterns=$PAT,action=close"
FRAME="frame:header=len32be,max=1024,action=close"

# ---- helpers ------------------------------------------------------------------
kv() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1" | head -n 1; }
hk_stat() {
  timeout 10 "$FABSOCK_BIN" stat --json 2>&1 | "$IT_PYTHON" "$IT_DIR/hook_stat.py" "$HK_PORT"
}
# hk_conn SNAPSHOT connect|accept: that end's line of a hk_stat snapshot.
hk_conn() { grep -m1 "dir=$2 " <<<"$1"; }
why() { WHY="${WHY:+$WHY; }$*"; }
# hk_digest_of DIR connect|accept WHO: the digest hook_digest wrote for that end
# of the HK_STAT_END snapshot, as " key=value ..." in DIGEST; 1 (and a why)
# when the end or its digest is missing.
hk_digest_of() {
  local l f
  DIGEST=
  l=$(hk_conn "$HK_STAT_END" "$2")
  [ -n "$l" ] || { why "$3 not in fabsock stat"; return 1; }
  f=$1/digest.$(kv " $l" pid).$(kv " $l" fd)
  [ -s "$f" ] || { why "$3: hook wrote no digest ($f)"; return 1; }
  DIGEST=" $(cat "$f")"
}

# Every test that asserts where a connection went pauses its client at
# HK_MID until the ends show it (hk_run): on a busy machine a whole stream,
# both FINs included, can otherwise end before the asynchronous rendezvous,
# which then finds the connection closed and leaves it on TCP (reason
# protocol) -- a race in the test, not a failure.
#
# hk_run TAG SPEC HOOKIO_ARGS...: one transfer, both ends preloaded per MODE
# with FABSOCK_HOOKS=SPEC (plus FABSOCK_TRANSPORT=tcp in [both,tcp]).  Sets
# CLI/SRV (result lines), CLI_LOG/SRV_LOG, HK_RC (client exit), SRV_STATUS,
# HK_PORT and stat snapshots: HK_STAT_MID (the client paused after $HK_MID
# bytes, when HK_MID is set), HK_STAT_HOOK (HK_HOOKWAIT=1: the first one that
# shows a connection closed by a hook; both ends hold their fds until it is
# taken), HK_STAT_END (HK_END=1: both ends
# paused before closing).  HK_PEERHOLD=OFF (with HK_HOOKWAIT): the server
# holds its stream after OFF bytes until that snapshot is taken, and the
# client its fd until the server has failed or ended: a server whose whole
# stream fit in the kernel's buffers (tcp_rmem's max is 32 MiB on some
# machines), both FINs exchanged before the client's hook saw the pattern,
# had nothing left to fail on -- a race in the test.
hk_run() {
  local tag=$1 spec=$2 s
  shift 2
  local env=(env "FABSOCK_HOOKS=$spec") base=$IT_TMP/$tag.$MODE.$VAR cx=() sx=()
  [ "$MODE" = both ] && [ "$VAR" != shm ] && env+=(FABSOCK_TRANSPORT=$VAR)
  rm -f "$base".*
  [ -n "${HK_MID:-}" ] && cx+=(-W "$base.mid@$HK_MID")
  if [ "${HK_END:-0}" = 1 ]; then cx+=(-w "$base.endc"); sx+=(-w "$base.ends"); fi
  if [ "${HK_HOOKWAIT:-0}" = 1 ]; then cx+=(-w "$base.hkc"); sx+=(-w "$base.hks"); fi
  [ -n "${HK_PEERHOLD:-}" ] && sx+=(-W "$base.peer@$HK_PEERHOLD")
  CLI='' SRV='' HK_PORT='' HK_STAT_MID='' HK_STAT_HOOK='' HK_STAT_END='' HK_RC=99
  start_server "hookio-$tag-$VAR" "${env[@]}" "$PROGS/hookio" -l -P "$base.port" "$@" "${sx[@]}"
  SRV_LOG=$SERVER_LOG
  if ! wait_file "$base.port" "$SERVER_PID" 20; then
    server_status
    SRV="server did not start ($SRV_STATUS)"
    stop_server
    return
  fi
  HK_PORT=$(cat "$base.port")
  start_bg_client "hookio-$tag-$VAR" "${env[@]}" "$PROGS/hookio" -p "$HK_PORT" "$@" "${cx[@]}"
  local cpid=$BG_PID
  CLI_LOG=$BG_LOG
  if [ -n "${HK_MID:-}" ]; then
    # The upgrade is asynchronous (an emulated rdma one can take seconds):
    # at the pause, give it up to 10 s to show every end on $VAR, as
    # expect_fabric does; hk_fabric then checks the snapshot.
    if wait_file "$base.mid.ready" "$cpid" 30; then
      for _ in $(seq 50); do
        HK_STAT_MID=$(hk_stat)
        [ -n "$HK_STAT_MID" ] && ! grep -qv " fabric=$VAR " <<<"$HK_STAT_MID" && break
        sleep 0.2
      done
    fi
    touch "$base.mid"
  fi
  if [ "${HK_HOOKWAIT:-0}" = 1 ]; then
    # The closer's row (reason hook) lives while it holds its fd: both ends
    # hold theirs at the end (-w) until it is seen, or until both hold and a
    # look after that still shows none.  A sample every 0.1 s within the 3 s
    # of -E missed it in VM runs, where one `fabsock stat` takes seconds.
    local held
    for _ in $(seq 150); do
      held=0
      [ -e "$base.hkc.ready" ] && [ -e "$base.hks.ready" ] && held=1
      s=$(hk_stat)
      if grep -q ' reason=hook ' <<<"$s"; then HK_STAT_HOOK=$s; break; fi
      [ $held = 1 ] && break
      sleep 0.1
    done
    if [ -n "${HK_PEERHOLD:-}" ]; then
      touch "$base.peer"
      wait_file "$base.hks.ready" "$SERVER_PID" 40
    fi
    touch "$base.hkc" "$base.hks"
  fi
  if [ "${HK_END:-0}" = 1 ]; then
    wait_file "$base.endc.ready" "$cpid" 40 && wait_file "$base.ends.ready" "$SERVER_PID" 20 &&
      HK_STAT_END=$(hk_stat)
    touch "$base.endc" "$base.ends"
  fi
  wait "$cpid"
  HK_RC=$?
  it_forget "$cpid"
  for _ in $(seq 100); do server_alive || break; sleep 0.1; done
  if server_alive; then SRV_STATUS="still running"; stop_server; else server_status; fi
  CLI=$(grep -m1 '^hookio:' "$CLI_LOG")
  SRV=$(grep -m1 '^hookio:' "$SRV_LOG")
}

# Who is preloaded, and which end closes when a hook refuses what it sees.
pre_c() { preloaded client; }
pre_s() { preloaded server; }

# hk_fabric SNAPSHOT: every preloaded end is in the snapshot, on $VAR.
hk_fabric() {
  local snap=$1 d who
  for d in connect accept; do
    who=client; [ $d = accept ] && who=server
    preloaded $who || continue
    local l
    l=$(hk_conn "$snap" $d)
    if [ -z "$l" ]; then why "$who not in fabsock stat${snap:+ ($(head -c 200 <<<"$snap"))}"; continue; fi
    [ "$(kv " $l" fabric)" = "$VAR" ] || why "$who on $(kv " $l" fabric) (reason $(kv " $l" reason), fabric bytes $(kv " $l" fabric_tx)/$(kv " $l" fabric_rx)), expected $VAR"
  done
}

# hk_ended_ok: both streams complete and verified, CRCs agree end to end.
hk_ended_ok() {
  [ "$HK_RC" = 0 ] || why "client exit $HK_RC"
  [ "$SRV_STATUS" = "exited with status 0" ] || why "server $SRV_STATUS"
  [ "$(kv "$CLI" tx_end)" = ok ] && [ "$(kv "$CLI" rx_end)" = eof ] || why "client: tx_end=$(kv "$CLI" tx_end) rx_end=$(kv "$CLI" rx_end)"
  [ "$(kv "$SRV" tx_end)" = ok ] && [ "$(kv "$SRV" rx_end)" = eof ] || why "server: tx_end=$(kv "$SRV" tx_end) rx_end=$(kv "$SRV" rx_end)"
  [ -n "$(kv "$CLI" tx_crc)" ] && [ "$(kv "$CLI" tx_crc)" = "$(kv "$SRV" rx_crc)" ] &&
    [ "$(kv "$SRV" tx_crc)" = "$(kv "$CLI" rx_crc)" ] || why "CRCs differ between the ends"
}

# hk_closed CLOSER ERRKEY PATTERN: CLOSER (client|server) failed with
# ECONNABORTED in ERRKEY (tx_end|rx_end) and logged PATTERN (grep -E); the
# peer saw an error (EPIPE/ECONNRESET sending, or receiving after a send
# that went whole, or EOF then one) before CLOSER closed
# its fd; stat showed the closer's connection with reason=hook on $VAR.
hk_closed() {
  local closer=$1 key=$2 pat=$3 peer=server cl pl log dir=connect
  [ "$closer" = server ] && { peer=client; dir=accept; }
  if [ "$closer" = client ]; then cl=$CLI pl=$SRV log=$CLI_LOG; else cl=$SRV pl=$CLI log=$SRV_LOG; fi
  [ "$(kv "$cl" "$key")" = ECONNABORTED ] || why "$closer $key=$(kv "$cl" "$key"), expected ECONNABORTED"
  grep -Eq "$pat" "$log" || why "no log line /$pat/ from the $closer: $(grep -m1 'fabsock\[' "$log")"
  # A client whose whole stream the server's buffers took before the hook
  # fired sees the reset on its receive instead.
  case "$(kv "$pl" tx_end)/$(kv "$pl" rx_end)" in
  EPIPE/* | ECONNRESET/* | ECONNABORTED/* | ok/ECONNRESET | ok/ECONNABORTED) ;;
  *) why "$peer tx_end=$(kv "$pl" tx_end) rx_end=$(kv "$pl" rx_end)" ;;
  esac
  case "$(kv "$pl" rx_end)" in eof | early-eof | ECONNRESET | ECONNABORTED) ;; *) why "$peer rx_end=$(kv "$pl" rx_end)" ;; esac
  local te tc
  te=$(kv "$pl" t_err) tc=$(kv "$cl" t_close)
  if [ -z "$te" ] || [ "$te" = 0 ] || [ -z "$tc" ] || [ "$te" -ge "$tc" ]; then
    why "$peer saw no error before the $closer closed its fd (t_err=$te, t_close=$tc)"
  fi
  local l
  l=$(hk_conn "$HK_STAT_HOOK" $dir)
  if [ -z "$l" ]; then why "fabsock stat never showed the $closer's connection closed by a hook"
  else [ "$(kv " $l" fabric)" = "$VAR" ] || why "$closer closed on $(kv " $l" fabric), expected $VAR"; fi
}

# ---- the tests ----------------------------------------------------------------
hk_dpi_close() {
  local name="dpi action=close: pattern ${EVIL_OFF} B in closes the connection"
  WHY=
  HK_MID=$([ "$MODE" != plain ] && echo 1M) HK_HOOKWAIT=$([ "$MODE" != plain ] && echo 1) \
    HK_PEERHOLD=$([ "$MODE" != plain ] && echo $((EVIL_OFF + 1048576))) hk_run dpi "$DPI" -n 16M -I "$EVIL@$EVIL_OFF" -E 3000
  if [ "$MODE" = plain ]; then
    hk_ended_ok
    ! grep -q 'dpi:' "$SRV_LOG" "$CLI_LOG" || why "a dpi log line without the library"
    name="dpi pattern passes without the library (control)"
  else
    [ -n "$HK_STAT_MID" ] || why "no fabsock stat at the pause"
    hk_fabric "$HK_STAT_MID"
    local closer=client key=rx_end
    pre_s && closer=server
    hk_closed $closer $key "warn: dpi: fd [0-9]+: pattern '$EVIL' \\($PAT:$EVIL_LINE\\) matched at recv offset $EVIL_OFF; closing"
    local cl=$CLI
    [ $closer = server ] && cl=$SRV
    [ "$(kv "$cl" rx)" -lt $((EVIL_OFF + ${#EVIL})) ] 2>/dev/null || why "the $closer's application got the pattern (rx=$(kv "$cl" rx))"
  fi
  tap_result "$([ -z "$WHY" ]; echo $?)" "$name [$LABEL]" "${WHY:-$(kv "$CLI" tx_end)/$(kv "$CLI" rx_end) client, $(kv "$SRV" tx_end)/$(kv "$SRV" rx_end) server}" "$CLI_LOG" "$SRV_LOG"
}

# The CRCs and lengths of a clean run (the streams are deterministic).
hk_crcs() { printf '%s %s %s %s\n' "$(kv "$CLI" tx_crc)" "$(kv "$CLI" rx_crc)" "$(kv "$CLI" tx)" "$(kv "$CLI" rx)"; }
hk_clean_ref() { hk_run "clean-$1" "$DPI" "${@:2}" >/dev/null 2>&1; hk_crcs; }

hk_clean() {
  local tag=$1 what=$2
  shift 2
  local name="dpi configured, clean streams byte-identical: $what"
  WHY=
  ensure_ref "clean.$tag" hk_clean_ref "$tag" "$@"
  HK_MID=$([ "$MODE" != plain ] && echo 256K) HK_END=$([ "$MODE" != plain ] && echo 1) hk_run "clean-$tag" "$DPI" "$@"
  hk_ended_ok
  grep -q 'dpi:' "$SRV_LOG" "$CLI_LOG" && why "dpi logged: $(grep -h -m1 'dpi:' "$SRV_LOG" "$CLI_LOG")"
  local crcs=$IT_TMP/clean.$tag.$MODE.$VAR.crc
  hk_crcs >"$crcs"
  compare_ref "clean.$tag" "$crcs" || why "differs from plain: $DIFF"
  [ "$MODE" = plain ] || hk_fabric "$HK_STAT_END"
  tap_result "$([ -z "$WHY" ]; echo $?)" "$name [$LABEL]" "${WHY:-$(cat "$crcs")}" "$CLI_LOG" "$SRV_LOG"
}

hk_frame_count() {
  local name="frame len32be max=1024: 8 MiB of frames pass, fabsock stat counts them"
  WHY=
  HK_MID=$([ "$MODE" != plain ] && echo 256K) HK_END=$([ "$MODE" != plain ] && echo 1) \
    hk_run fcount "$FRAME" -n 8M -F 1024
  hk_ended_ok
  grep -q 'frame:' "$SRV_LOG" "$CLI_LOG" && why "frame logged: $(grep -h -m1 'frame:' "$SRV_LOG" "$CLI_LOG")"
  local d who line l
  for d in connect accept; do
    who=client line=$CLI
    [ $d = accept ] && who=server line=$SRV
    preloaded $who || continue
    l=$(hk_conn "$HK_STAT_END" $d)
    [ -n "$l" ] || { why "$who not in fabsock stat"; continue; }
    [ "$(kv " $l" tx_msgs)" = "$(kv "$line" frames_tx)" ] && [ "$(kv " $l" rx_msgs)" = "$(kv "$line" frames_rx)" ] ||
      why "$who: stat msgs tx $(kv " $l" tx_msgs) rx $(kv " $l" rx_msgs), frames $(kv "$line" frames_tx)/$(kv "$line" frames_rx)"
    [ "$(kv " $l" tx_bytes)" = "$(kv "$line" tx)" ] && [ "$(kv " $l" rx_bytes)" = "$(kv "$line" rx)" ] ||
      why "$who: stat bytes tx $(kv " $l" tx_bytes) rx $(kv " $l" rx_bytes), moved $(kv "$line" tx)/$(kv "$line" rx)"
  done
  [ "$MODE" = plain ] || hk_fabric "$HK_STAT_END"
  [ "$MODE" = plain ] && name="framed streams pass without the library (control)"
  local frames
  frames="$(kv "$CLI" frames_tx)/$(kv "$CLI" frames_rx) frames"
  [ "$(kv "$CLI" frames_tx)" -gt 1000 ] 2>/dev/null || why "only $frames"
  tap_result "$([ -z "$WHY" ]; echo $?)" "$name [$LABEL]" "${WHY:-$frames each way}" "$CLI_LOG" "$SRV_LOG"
}

hk_frame_max() {
  local name="frame max=1024: a 1025-byte frame closes the connection"
  WHY=
  HK_MID=$([ "$MODE" != plain ] && echo 256K) HK_HOOKWAIT=$([ "$MODE" != plain ] && echo 1) \
    hk_run fmax "$FRAME" -n 16M -F 1024 -X 2000 -E 3000
  local at
  at=$(kv "$CLI" xframe_at)
  [ "${at:-0}" -gt 262144 ] 2>/dev/null || why "the oversized frame is at ${at:-?}, not past the pause"
  if [ "$MODE" = plain ]; then
    hk_ended_ok
    name="oversized frame passes without the library (control)"
  else
    hk_fabric "$HK_STAT_MID"
    if pre_c; then
      hk_closed client tx_end "warn: frame: fd [0-9]+: frame of 1025 bytes exceeds max 1024; closing \\(send, stream offset $at\\)"
    else
      hk_closed server rx_end "warn: frame: fd [0-9]+: frame of 1025 bytes exceeds max 1024; closing \\(recv, stream offset $at\\)"
      [ "$(kv "$SRV" rx)" -lt $((at + 4)) ] 2>/dev/null || why "the server's application got the oversized header (rx=$(kv "$SRV" rx))"
    fi
  fi
  tap_result "$([ -z "$WHY" ]; echo $?)" "$name [$LABEL]" "${WHY:-frame at $at; $(kv "$CLI" tx_end)/$(kv "$CLI" rx_end) client, $(kv "$SRV" tx_end)/$(kv "$SRV" rx_end) server}" "$CLI_LOG" "$SRV_LOG"
}

hk_digest() {
  local name="hook .so by path sees every byte once, in order, whatever the call (16 MiB each way)"
  local dd=$IT_TMP/digest.$MODE.$VAR
  rm -rf "$dd"
  mkdir -p "$dd"
  WHY=
  HK_MID=$([ "$MODE" != plain ] && echo 256K) HK_END=$([ "$MODE" != plain ] && echo 1) hk_run digest "$DIGEST_SO:$dd" -n 16M
  hk_ended_ok
  local d who line f n=0
  for d in connect accept; do
    who=client line=$CLI
    [ $d = accept ] && who=server line=$SRV
    preloaded $who || continue
    n=$((n + 1))
    hk_digest_of "$dd" $d "$who" || continue
    f=$DIGEST
    [ "$(kv "$f" send_bytes)" = "$(kv "$line" tx)" ] && [ "$(kv "$f" send_crc)" = "$(kv "$line" tx_crc)" ] ||
      why "$who send: hook saw $(kv "$f" send_bytes) B crc $(kv "$f" send_crc), sent $(kv "$line" tx) B crc $(kv "$line" tx_crc)"
    [ "$(kv "$f" recv_bytes)" = "$(kv "$line" rx)" ] && [ "$(kv "$f" recv_crc)" = "$(kv "$line" rx_crc)" ] ||
      why "$who recv: hook saw $(kv "$f" recv_bytes) B crc $(kv "$f" recv_crc), received $(kv "$line" rx) B crc $(kv "$line" rx_crc)"
  done
  [ "$(find "$dd" -type f -name 'digest.*' | wc -l)" = "$n" ] || why "$(find "$dd" -type f -name 'digest.*' | wc -l) digest files for $n preloaded ends"
  [ "$MODE" = plain ] || hk_fabric "$HK_STAT_END"
  [ "$MODE" = plain ] && name="no hook runs without the library: no digest (control)"
  tap_result "$([ -z "$WHY" ]; echo $?)" "$name [$LABEL]" "${WHY:-$n ends checked}" "$CLI_LOG" "$SRV_LOG"
}

# Two client threads send stream A at once (hookio -M): the order on the wire
# is whatever the library's lock makes it; the client's hook must have seen
# exactly that order (its send CRC = what the server received), as must the
# server's hook (recv CRC).
hk_digest_mt() {
  local name="two threads sending at once: the hook sees the bytes in the order they went (32 MiB)"
  local dd=$IT_TMP/digestmt.$MODE.$VAR
  rm -rf "$dd"
  mkdir -p "$dd"
  WHY=
  HK_MID=$([ "$MODE" != plain ] && echo 256K) HK_END=$([ "$MODE" != plain ] && echo 1) hk_run digestmt "$DIGEST_SO:$dd" -n 32M -M
  [ "$HK_RC" = 0 ] && [ "$SRV_STATUS" = "exited with status 0" ] || why "client exit $HK_RC, server $SRV_STATUS: $CLI / $SRV"
  [ "$(kv "$SRV" rx)" = 33554432 ] && [ "$(kv "$SRV" rx_end)" = eof ] || why "server received $(kv "$SRV" rx) B, $(kv "$SRV" rx_end)"
  local d f want
  want=$(kv "$SRV" rx_crc)
  for d in connect accept; do
    preloaded "$([ $d = connect ] && echo client || echo server)" || continue
    hk_digest_of "$dd" $d "$d end" || continue
    f=$DIGEST
    if [ $d = connect ]; then
      [ "$(kv "$f" send_bytes)" = 33554432 ] && [ "$(kv "$f" send_crc)" = "$want" ] ||
        why "client hook saw $(kv "$f" send_bytes) B crc $(kv "$f" send_crc), the server received crc $want"
    else
      [ "$(kv "$f" recv_bytes)" = 33554432 ] && [ "$(kv "$f" recv_crc)" = "$want" ] ||
        why "server hook saw $(kv "$f" recv_bytes) B crc $(kv "$f" recv_crc), the server received crc $want"
    fi
  done
  [ "$MODE" = plain ] || hk_fabric "$HK_STAT_END"
  [ "$MODE" = plain ] && name="two threads sending at once, no library (control)"
  tap_result "$([ -z "$WHY" ]; echo $?)" "$name [$LABEL]" "${WHY:-crc $want}" "$CLI_LOG" "$SRV_LOG"
}

# A hook whose open() takes 500 ms on the accepting end (as a dpi hook
# compiling a large pattern file does): the client asks for the upgrade
# while accept() is still opening the hooks; the request must wait, not be
# refused, so the connection still ends up on shm.
hk_slow_open() {
  local name="hook open() takes 500 ms on the accepting end: still upgraded, bytes intact"
  local dd=$IT_TMP/slowopen.$MODE.$VAR
  rm -rf "$dd"
  mkdir -p "$dd"
  WHY=
  HK_MID=$([ "$MODE" != plain ] && echo 256K) HK_END=$([ "$MODE" != plain ] && echo 1) hk_run slowopen "$DIGEST_SO:$dd,accept_delay_ms=500" -n 16M
  hk_ended_ok
  [ "$MODE" = plain ] || hk_fabric "$HK_STAT_END"
  [ "$MODE" = plain ] && name="slow hook open, no library (control)"
  tap_result "$([ -z "$WHY" ]; echo $?)" "$name [$LABEL]" "${WHY:-$(grep -c . <<<"$HK_STAT_END") ends in stat}" "$CLI_LOG" "$SRV_LOG"
}

for MODE in $(it_modes); do
  case $MODE in
    plain) variants=none ;;
    both) variants=${FABSOCK_IT_HOOKS_BOTH:-shm tcp} ;;
    *) variants=tcp ;;
  esac
  for VAR in $variants; do
    LABEL=$MODE
    [ "$MODE" = both ] && LABEL="both,$VAR"
    for t in $HK_TESTS; do
      case $t in
        dpi) hk_dpi_close ;;
        clean)
          hk_clean random "random sizes, 64 MiB each way" -n 64M
          hk_clean s100 "100-byte calls, 2 MiB" -n 2M -s 100
          hk_clean s4k "4 KiB calls, 8 MiB" -n 8M -s 4K
          hk_clean s64k "64 KiB calls, 16 MiB" -n 16M -s 64K
          hk_clean s1m "1 MiB calls, 32 MiB" -n 32M -s 1M
          ;;
        frame) hk_frame_count ;;
        framemax) hk_frame_max ;;
        digest) hk_digest; hk_digest_mt; hk_slow_open ;;
        *) echo "Bail out! unknown test '$t' in FABSOCK_IT_HOOKS_TESTS"; exit 1 ;;
      esac
    done
  done
done
it_done
