#!/bin/bash
# t_idletrim: idle rings give their pages back (docs/design.md 2.2, "Idle
# rings give their pages back"; tests/integration/idletrim.py).
#   N connections, each past the threshold, then a burst of 256 KiB each
#   way on each: both ends preloaded, the rings' pages are resident in
#   both processes; idle, each end's agent gives its tx rings' pages
#   back, every one of an empty ring, so each process keeps a connection's
#   control page and nothing of its rings (4 KiB per connection, 32 KiB
#   more for the process's own pages; a ring kept the page holding its
#   tail: 12 KiB per connection).  Every
#   mode: the stream is exact and the process ends with what it began with.
#   And a slow reader (both ends preloaded): the first connection's client
#   reads 64 KiB more 3 s late, so the server's idle passes find them
#   unread; once read, their pages go too (they stayed until the next
#   write: the connection counted as trimmed).
. "$(dirname "$0")/lib.sh"
require_cmd python3
N=16 BYTES=262144

idle_case() { # NAME: runs the pair in MODE and reports
  local name=$1 b i e log who pf port
  pf=$IT_TMP/idletrim.$MODE.$RANDOM.port rc=0 detail=
  real_python
  start_server idletrim "$IT_PYTHON" "$IT_DIR/idletrim.py" server "$pf" "$N" "$BYTES"
  if ! wait_file "$pf" "$SERVER_PID" 20; then
    server_status; rc=1; detail="server did not start ($SRV_STATUS)"; stop_server
  else
    port=$(cat "$pf")
    rm -f "$IT_TMP/hold"
    IT_HOLD=$IT_TMP/hold start_bg_client idletrim "$IT_PYTHON" "$IT_DIR/idletrim.py" client "$port" "$N" "$BYTES"
    wait_log '^burst' "$BG_LOG" "$BG_PID" 60 || true
    expect_fabric "$port" "$(fabric_expected)" 10 || { rc=1; detail="$FABRIC_DETAIL; "; }
    wait_log '^idle' "$BG_LOG" "$BG_PID" 90 || true
    touch "$IT_TMP/hold"
    wait "$BG_PID"; e=$?
    [ $e -eq 0 ] || { rc=1; detail+="client exit $e; "; }
    it_forget "$BG_PID"
    wait "$SERVER_PID"; e=$?
    [ $e -eq 0 ] || { rc=1; detail+="server exit $e; "; }
    it_forget "$SERVER_PID"
    for log in "$BG_LOG" "$SERVER_LOG"; do
      b=$(sed -n 's/^burst \([0-9-]*\)$/\1/p' "$log") i=$(sed -n 's/^idle \([0-9-]*\) .*/\1/p' "$log")
      who=client; [ "$log" = "$SERVER_LOG" ] && who=server
      detail+="$who: burst ${b:-?} KiB, $(grep '^idle' "$log" || echo 'no idle line'); "
      [ -n "$b" ] && [ -n "$i" ] && [ "$i" -le $((N * 4 + 32)) ] || rc=1
      # On a fabric the burst filled ring pages (more than a page per
      # connection): the measure sees them, so the idle figure means
      # something.  (The slow reader's client measures after its 3 s, its
      # own rings given back meanwhile.)
      [ -n "${IT_SLOW_READ:-}" ] && [ $who = client ] && continue
      [ "$(fabric_expected)" = shm ] && { [ -n "$b" ] && [ "$b" -ge $((N * 16)) ] || rc=1; }
    done
  fi
  tap_result $rc "$name [$MODE]" "$detail" "$SERVER_LOG"
}

for MODE in $(it_modes); do
  idle_case "$N connections idle after a burst: the rings' pages given back"
  [ "$MODE" = both ] || continue
  IT_SLOW_READ=65536 idle_case "$N connections idle after a burst, 64 KiB read 3 s late: their pages given back once read"
done
it_done
