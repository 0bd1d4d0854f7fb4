#!/bin/bash
# t_nginx: nginx as Debian ships it: a master that daemonizes, 2 workers as
# www-data (user www-data; worker_processes 2; sendfile on), wrk as root.
# wrk -c50 and -c400 against a 4 KiB file for 3 s each: no errors and no
# non-2xx replies, in every mode.  In [both], sampled mid-run with fabsock
# stat, at least 95% (-c50) and 99% (-c400) of the connections on each side
# on ${FABSOCK_EXPECT_FABRIC:-the expected fabric}, none failing with
# resources or protocol: the listener belongs to the master, the workers
# accept, and they run as another user (docs/design.md 1.3).  A connection
# still pending at the sample is left out of the share: nginx closes a
# keep-alive connection after 1000 requests and wrk opens a new one, so a
# few are always fresh.
# Then curl fetches a 3 MiB file twice on one connection: both copies
# intact (sendfile from a file: the kernel's own while tx is on TCP, a
# peer without libfabsock included; through the ring once on a fabric,
# with nginx's tcp_nopush corking around it).
# In [both], a keep-alive connection upgraded and then left idle: the worker
# holding it makes no system call but its epoll sleeps for 1 s (strace -c;
# it read /proc/loadavg and spun after every 20 ms safety-net slice).
# In [client] and [both], wrk with a connection per request under strace:
# no getpeername for a connect that epoll reported done, no getsockname for
# a connection that never upgrades (its own address is learned when its
# upgrade is due), no getpid per connection, and no more epoll_ctl per
# connection than the same wrk unpreloaded.  In [server] and [both], the
# workers under strace meanwhile: no getsockname per accepted connection
# either (nginx listens on a wildcard address, as Debian's default site
# does; the worker's own address is learned when a peer's rendezvous names
# the connection), nor getpid (a thread's mark of each connection it reads
# asked it: engine/door.c).
# In [both], the same nginx in the foreground (`daemon off`, as in
# containers and Type=simple units): its root master, alive, serves the
# rendezvous name for connections its www-data workers accepted; wrk -c20
# 2 s at least 95% on the expected fabric (all were not-owner: the client
# took the master for a squatter).
# Requests/s are measured by bench/servers.sh, not here.
. "$(dirname "$0")/lib.sh"
require_cmd nginx wrk
[ "$(id -u)" = 0 ] || skip_all "needs root (nginx's master runs as root, its workers as www-data)"
id www-data >/dev/null 2>&1 || skip_all "no user www-data"
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-30}

# The workers must read the files: a directory www-data can reach.
NG=$(mktemp -d /tmp/fabsock-nginx.XXXXXX) && chmod 755 "$NG" || skip_all "mktemp failed"
trap 'rm -rf "$NG"' EXIT
mkdir -p "$NG/www" "$NG/logs"
head -c 4096 /dev/urandom >"$NG/www/f4k"
head -c $((3 << 20)) /dev/urandom >"$NG/www/f3m"
big_sum=$(sha256sum <"$NG/www/f3m" | cut -d' ' -f1)
chmod -R a+rX "$NG/www"

for MODE in $(it_modes); do
  port=$(pick_port)
  cat >"$NG/nginx.conf" <<CONF
user www-data;
worker_processes 2;
pid $NG/nginx.pid;
error_log $NG/logs/error.log;
events { worker_connections 768; }
http {
  sendfile on;
  tcp_nopush on;
  access_log off;
  server { listen $port; root $NG/www; }
}
CONF
  rm -f "$NG/nginx.pid"
  pre_for server
  if ! "${PRE[@]}" nginx -c "$NG/nginx.conf" -p "$NG" >"$NG/logs/start.log" 2>&1 || ! wait_port "$port" "" 20; then
    tap_not_ok "nginx master + 2 workers [$MODE]" "nginx did not start: $(head -c 300 "$NG/logs/start.log")" "$NG/logs/error.log"
    continue
  fi
  nginx_pid=$(cat "$NG/nginx.pid" 2>/dev/null)
  for conns in 50 400; do
    name="nginx (master, 2 workers as www-data), wrk -c$conns 3 s"
    out=$IT_TMP/wrk.$conns.$MODE
    pre_for client
    "${PRE[@]}" timeout 60 wrk -t2 -c$conns -d3s "http://127.0.0.1:$port/f4k" >"$out" 2>&1 &
    wpid=$!
    wrk_share "$port" "$([ $conns = 50 ] && echo 95 || echo 99)"
    wait "$wpid"
    wrk_verdict "$out" $?
    tap_result $? "$name [$MODE]" "$WRK_DETAIL" "$out" "$NG/logs/error.log"
    wrk_share_report "$name"
  done
  if command -v curl >/dev/null; then
    fetch_twice "nginx sendfile 3 MiB twice, one connection" "http://127.0.0.1:$port/f3m" "$big_sum"
  fi
  # A client's non-blocking connect that epoll reported done (EPOLLOUT, no
  # error) needs no getpeername: it took one per connection, and one per
  # epoll_wait pass until the connect was done.
  # The calls strace -c counted for one system call name.
  count() { awk -v c="$1" '$NF == c && $4 ~ /^[0-9]+$/ { print $4 }' "$2"; }
  name="wrk, a connection per request: no getpeername once epoll said connected, no getsockname, no getpid"
  if { [ "$MODE" = client ] || [ "$MODE" = both ]; } && command -v strace >/dev/null; then
    pre_for client
    out=$IT_TMP/wrkc.$MODE
    # No upgrade: a rendezvous asks getpeername of its own (upgrade-point
    # runs start one at every connect).
    timeout 60 strace -f -c -e trace=connect,getpeername,getsockname,getpid,epoll_ctl -o "$IT_TMP/wrkc.strace" \
      env FABSOCK_UPGRADE_BYTES=1073741824 "${PRE[@]}" wrk -t1 -c4 -d1s -H 'Connection: close' \
      "http://127.0.0.1:$port/f4k" >"$out" 2>&1
    nconn=$(count connect "$IT_TMP/wrkc.strace") npeer=$(count getpeername "$IT_TMP/wrkc.strace")
    nctl=$(count epoll_ctl "$IT_TMP/wrkc.strace") nsock=$(count getsockname "$IT_TMP/wrkc.strace")
    npid=$(count getpid "$IT_TMP/wrkc.strace")
    nconn=${nconn:-0} npeer=${npeer:-0} nctl=${nctl:-0} nsock=${nsock:-0} npid=${npid:-0}
    if ! grep -q 'Requests/sec' "$out" || [ "$nconn" -lt 20 ]; then
      tap_not_ok "$name [$MODE]" "wrk under strace: $nconn connects; $(tail -n 2 "$out" | tr '\n' ' ')"
    elif [ $((npeer * 10)) -lt "$nconn" ] && [ $((nsock * 10)) -lt "$nconn" ] && [ $((npid * 10)) -lt "$nconn" ]; then
      tap_ok "$name [$MODE]" "$npeer getpeername, $nsock getsockname, $npid getpid for $nconn connects"
    else
      tap_not_ok "$name [$MODE]" "$npeer getpeername, $nsock getsockname, $npid getpid for $nconn connects"
    fi
    # The same wrk unpreloaded: epoll_ctl per connection is no more than its
    # (a plain registration passes its calls on, an unchanged MOD not even
    # that; entries made a DEL at every close).  Per connection, with 2%
    # slack: the preloaded side usually makes 4.0 to plain's 6.0, but in 1
    # of 8 runs here it made plain's 6.0 (7054 calls for 1178 connects
    # against 6907 for 1154), and then the connections cut off when the
    # second ends (-c4) decide.  A regression of one call per connection
    # is 17%.
    name="wrk, a connection per request: no more epoll_ctl per connection than plain"
    timeout 60 strace -f -c -e trace=connect,epoll_ctl -o "$IT_TMP/wrkp.strace" \
      wrk -t1 -c4 -d1s -H 'Connection: close' "http://127.0.0.1:$port/f4k" >"$out.plain" 2>&1
    pconn=$(count connect "$IT_TMP/wrkp.strace") pctl=$(count epoll_ctl "$IT_TMP/wrkp.strace")
    pconn=${pconn:-0} pctl=${pctl:-0}
    if [ "$pconn" -lt 20 ] || [ "$nconn" -lt 20 ]; then
      tap_not_ok "$name [$MODE]" "too few connects: $nconn preloaded, $pconn plain"
    elif [ $((50 * nctl * pconn)) -le $((51 * pctl * nconn)) ]; then
      tap_ok "$name [$MODE]" "$nctl for $nconn connects, plain $pctl for $pconn"
    else
      tap_not_ok "$name [$MODE]" "$nctl for $nconn connects, plain $pctl for $pconn"
    fi
  elif [ "$MODE" = client ] || [ "$MODE" = both ]; then
    tap_skip "$name [$MODE]" "no strace"
    tap_skip "wrk, a connection per request: no more epoll_ctl per connection than plain [$MODE]" "no strace"
  fi
  # The accepting end's own address: one getsockname per connection, the one
  # system call nginx made more than without the library (no rendezvous
  # here: the client never upgrades).
  name="nginx workers, a connection per request: no getsockname or getpid per accepted connection"
  if { [ "$MODE" = server ] || [ "$MODE" = both ]; } && command -v strace >/dev/null; then
    pre_for client
    FABSOCK_UPGRADE_BYTES=1073741824 "${PRE[@]}" timeout 60 wrk -t1 -c4 -d3s -H 'Connection: close' \
      "http://127.0.0.1:$port/f4k" >"$IT_TMP/wrka.$MODE" 2>&1 &
    wpid=$!
    sleep 0.5
    wpids=$(pgrep -f "nginx: worker" -P "$nginx_pid" | sed 's/^/-p /' | tr '\n' ' ')
    timeout -s INT 1 strace -f -c -e trace=accept4,getsockname,getpid -o "$IT_TMP/wrka.strace" $wpids >/dev/null 2>&1
    wait "$wpid"
    nacc=$(count accept4 "$IT_TMP/wrka.strace")
    nsock=$(count getsockname "$IT_TMP/wrka.strace")
    npid=$(count getpid "$IT_TMP/wrka.strace")
    nacc=${nacc:-0} nsock=${nsock:-0} npid=${npid:-0}
    if [ "$nacc" -lt 20 ]; then
      tap_not_ok "$name [$MODE]" "too few accepts under strace: $nacc; $(tail -n 2 "$IT_TMP/wrka.$MODE" | tr '\n' ' ')"
    elif [ $((nsock * 10)) -lt "$nacc" ] && [ $((npid * 10)) -lt "$nacc" ]; then
      tap_ok "$name [$MODE]" "$nsock getsockname, $npid getpid for $nacc accept4"
    else
      tap_not_ok "$name [$MODE]" "$nsock getsockname, $npid getpid for $nacc accept4"
    fi
  elif [ "$MODE" = server ] || [ "$MODE" = both ]; then
    tap_skip "$name [$MODE]" "no strace"
  fi
  # An idle worker holding an upgraded keep-alive connection sleeps in the
  # 20 ms safety-net slices and nothing else: it also read /proc/loadavg
  # and spun 50 us after every slice (5 system calls per slice).
  name="nginx worker idle with an upgraded connection: only its epoll sleeps"
  if [ "$MODE" = both ] && command -v strace >/dev/null; then
    pre_for client
    real_python
    "${PRE[@]}" "$IT_PYTHON" -c '
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
for _ in range(3):
    s.sendall(b"GET /f4k HTTP/1.1\r\nHost: x\r\n\r\n")
    got = b""
    while len(got) < 4096:
        b = s.recv(65536)
        if not b: sys.exit("early EOF")
        got += b
open(sys.argv[2], "w").write("1")
time.sleep(4)
' "$port" "$IT_TMP/idle.ready" >"$IT_TMP/idle.$MODE" 2>&1 &
    ipid=$!
    if wait_file "$IT_TMP/idle.ready" "$ipid" 10 && expect_fabric "$port" "$(fabric_expected)"; then
      sleep 0.5
      wpids=$(pgrep -f "nginx: worker" -P "$nginx_pid" | sed 's/^/-p /' | tr '\n' ' ')
      # The workers' own threads (no -f): the library's agent thread gives
      # idle rings' pages back once a second, a few madvise calls.
      timeout -s INT 1 strace -c -o "$IT_TMP/idle.strace" $wpids >/dev/null 2>&1
      other=$(awk '$NF ~ /^[a-z_0-9]+$/ && $NF !~ /^(epoll_wait|epoll_pwait|epoll_pwait2|total|syscall)$/ && $4 ~ /^[0-9]+$/ { n += $4 } END { print n + 0 }' "$IT_TMP/idle.strace")
      calls=$(grep -v total "$IT_TMP/idle.strace" | sort -k4 -n -r | awk '$4 ~ /^[0-9]+$/ {print $NF "=" $4}' | head -n 4 | tr '\n' ' ')
      if [ "$other" -le 3 ]; then tap_ok "$name [$MODE]" "$other other system calls in 1 s ($calls)"
      else tap_not_ok "$name [$MODE]" "$other other system calls in 1 s: $calls"; fi
    else
      tap_not_ok "$name [$MODE]" "the idle connection did not reach $(fabric_expected): ${FABRIC_DETAIL:-} $(head -c 200 "$IT_TMP/idle.$MODE")"
    fi
    kill "$ipid" 2>/dev/null; wait "$ipid" 2>/dev/null
  elif [ "$MODE" = both ]; then
    tap_skip "$name [$MODE]" "no strace"
  fi
  [ -n "$nginx_pid" ] && kill -TERM "$nginx_pid" 2>/dev/null
  for i in $(seq 50); do kill -0 "$nginx_pid" 2>/dev/null || break; sleep 0.1; done
  name="nginx in the foreground (daemon off), wrk -c20 2 s"
  if [ "$MODE" = both ] && fabric_enabled && [ -n "$(fabric_expected)" ]; then
    pre_for server
    rm -f "$NG/nginx.pid"
    "${PRE[@]}" nginx -c "$NG/nginx.conf" -p "$NG" -g 'daemon off;' >"$NG/logs/fg.log" 2>&1 &
    fgpid=$!
    if wait_port "$port" "$fgpid" 20; then
      pre_for client
      "${PRE[@]}" timeout 60 wrk -t2 -c20 -d2s "http://127.0.0.1:$port/f4k" >"$IT_TMP/wrkfg.$MODE" 2>&1 &
      wpid=$!
      wrk_share "$port" 95 1
      wait "$wpid"
      wrk_verdict "$IT_TMP/wrkfg.$MODE" $?
      tap_result $? "$name [$MODE]" "$WRK_DETAIL" "$IT_TMP/wrkfg.$MODE"
      wrk_share_report "$name"
    else
      tap_not_ok "$name [$MODE]" "nginx -g 'daemon off;' did not start: $(head -c 300 "$NG/logs/fg.log")"
    fi
    kill -TERM "$fgpid" 2>/dev/null
    wait "$fgpid" 2>/dev/null
  fi
  log_clean "nginx error log clean" "$NG/logs/error.log" '\[(alert|crit|emerg)\]|Bad file descriptor' \
    "no alert, crit, emerg or EBADF"
done
it_done
