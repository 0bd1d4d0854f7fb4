#!/bin/bash
# t_apache: Apache httpd as Debian ships it (/etc/apache2 copied, only the
# port, the document root and the run directories changed): a master as
# root, children as www-data, the listener inherited across fork.  Both
# MPMs: event (Debian's default: threads, epoll) and prefork (a process
# per connection, blocking I/O in each child).  wrk as root for 3 s, then
# curl fetching a 3 MiB file twice on one connection: no socket error, no
# non-2xx reply, both copies intact.  In [both], sampled mid-run with
# fabsock stat, at least 95% of the connections on each side on
# ${FABSOCK_EXPECT_FABRIC:-the expected fabric} (pending ones left out: a
# prefork child takes the next connection only when its last one ends),
# none failing with resources or protocol.  The error log must show no
# crashed child (AH00052) and no alert, crit or emerg.
# Two changes to Debian's configuration, the same with and without the
# library: MaxKeepAliveRequests 0 (scripts/apache-conf.sh: Debian's 100 ends
# each keep-alive connection after 100 requests, and wrk counts the resets
# of those that close under a request already sent: 5-262 "read" errors a
# run on plain TCP), and wrk runs below what Debian's MPM settings serve at once: event
# -c20 (2 children of 25 threads; at -c50 Apache closes keep-alive
# connections as it runs short of them: 120 "read" errors on plain TCP even
# with MaxKeepAliveRequests 0), prefork -c4 (5 idle children; with more,
# connections wait in the backlog for a child and wrk times them out).
# Requests/s are measured by bench/servers.sh.
. "$(dirname "$0")/lib.sh"
require_cmd apache2 wrk curl
[ "$(id -u)" = 0 ] || skip_all "needs root (Apache's master runs as root, its children as www-data)"
id www-data >/dev/null 2>&1 || skip_all "no user www-data"
[ -f /etc/apache2/apache2.conf ] && [ -f /etc/apache2/mods-available/mpm_prefork.load ] ||
  skip_all "no Debian /etc/apache2 (apache2 package)"
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-30}

AP=$(mktemp -d /tmp/fabsock-apache.XXXXXX) && chmod 755 "$AP" || skip_all "mktemp failed"
stop_apache() {
  [ -f "$AP/etc/envvars.fs" ] || return 0
  (. "$AP/etc/envvars.fs" && apache2 -d "$AP/etc" -f "$AP/etc/apache2.conf" -k stop) >/dev/null 2>&1
  local pid
  pid=$(cat "$AP/run/apache2.pid" 2>/dev/null)
  for _ in $(seq 50); do [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
}
trap 'stop_apache; rm -rf "$AP"' EXIT
mkdir -p "$AP/www"
head -c 4096 /dev/urandom >"$AP/www/f4k"
head -c $((3 << 20)) /dev/urandom >"$AP/www/f3m"
big_sum=$(sha256sum <"$AP/www/f3m" | cut -d' ' -f1)
chmod -R a+rX "$AP/www"

# Debian's tree, this port and root, MPM enabled (scripts/apache-conf.sh).
apache_conf() { bash "$IT_DIR/../../scripts/apache-conf.sh" "$AP" "$1" "$2" "$AP/www" >"$AP/conf.log" 2>&1; }

for MODE in $(it_modes); do
  for mpm in event prefork; do
    port=$(pick_port)
    what="apache2 mpm_$mpm (master, children as www-data)"
    if ! apache_conf "$mpm" "$port"; then
      tap_not_ok "$what [$MODE]" "scripts/apache-conf.sh: $(head -c 200 "$AP/conf.log")"
      continue
    fi
    pre_for server
    if ! (. "$AP/etc/envvars.fs" && "${PRE[@]}" apache2 -d "$AP/etc" -f "$AP/etc/apache2.conf" -k start) \
      >"$AP/start.log" 2>&1 || ! wait_port "$port" "" 20; then
      tap_not_ok "$what [$MODE]" "apache2 did not start: $(head -c 300 "$AP/start.log")" "$AP/log/error.log"
      stop_apache
      continue
    fi
    conns=$([ $mpm = event ] && echo 20 || echo 4)
    name="$what, wrk -c$conns 3 s"
    out=$IT_TMP/apache.$mpm.$MODE
    pre_for client
    "${PRE[@]}" timeout 60 wrk -t2 -c$conns -d3s "http://127.0.0.1:$port/f4k" >"$out" 2>&1 &
    wpid=$!
    wrk_share "$port" 95
    wait "$wpid"
    wrk_verdict "$out" $?
    tap_result $? "$name [$MODE]" "$WRK_DETAIL" "$out" "$AP/log/error.log"
    wrk_share_report "$name"
    fetch_twice "$what, a 3 MiB file twice on one connection" "http://127.0.0.1:$port/f3m" "$big_sum"
    stop_apache
    log_clean "$what error log clean" "$AP/log/error.log" 'AH00052|\[[a-z_]*:(alert|crit|emerg)\]|Bad file descriptor' \
      "no crashed child, alert, crit, emerg or EBADF"
  done
done
it_done
