#!/bin/bash
# t_haproxy: HAProxy as Debian ships it in front of nginx started both ways
# people run it: in the foreground, as containers and Type=simple units do
# (`daemon off`: its root master, which called listen(), serves the
# listener's rendezvous name; 2 workers as www-data accept), and as
# Debian's own unit starts it (`daemon on`: the process that called
# listen() forks the master and exits, so nobody served that name).
# HAProxy, Debian's global section: a master that daemonizes (-W,
# master-worker, as the unit runs it), a worker that chroots to
# /var/lib/haproxy, runs as user haproxy and then forbids itself new threads
# (RLIMIT_NPROC 0, its guard against forks unless insecure-fork-wanted).
# The worker could not start the library's agent thread: every connection
# stayed on TCP (reason resources), a warning per connection.  And from its
# chroot it cannot read the stat tables in /dev/shm that name the www-data
# worker holding its backend connection: it asks the process serving the
# listener's name (holder query, fabric/shm/rdv.h); it stayed on TCP
# (peer-no-fabsock), and behind a daemonized nginx it still did until a
# worker took the unserved name over (engine/inherit.h; the worker's end
# read `pending` meanwhile).
# curl fetches a 16 MiB file through it twice on one connection (intact, in
# every mode); in [both] three downloads held slow (--limit-rate) show both
# hops on the expected fabric: curl to haproxy, and haproxy (in its chroot)
# to nginx's workers (whichever accepted each).
. "$(dirname "$0")/lib.sh"
require_cmd haproxy curl nginx
[ "$(id -u)" = 0 ] || skip_all "needs root (haproxy's worker chroots and becomes user haproxy)"
id haproxy >/dev/null 2>&1 || skip_all "no user haproxy"
id www-data >/dev/null 2>&1 || skip_all "no user www-data"
[ -d /var/lib/haproxy ] || skip_all "no /var/lib/haproxy (haproxy's chroot)"
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-60}

# nginx's workers must read the file: a directory www-data can reach.
NG=$(mktemp -d /tmp/fabsock-haproxy.XXXXXX) && chmod 755 "$NG" || skip_all "mktemp failed"
trap 'rm -rf "$NG"' EXIT
mkdir -p "$NG/www" "$NG/logs"
head -c $((16 << 20)) /dev/urandom >"$NG/www/big"
chmod -R a+rX "$NG/www"
sum=$(sha256sum <"$NG/www/big" | cut -d' ' -f1)

# haproxy_stop: its master and workers, gone before the next mode.
haproxy_stop() {
  local p i
  p=$(cat "$IT_TMP/haproxy.pid" 2>/dev/null) && [ -n "$p" ] || return 0
  kill "$p" 2>/dev/null
  for i in $(seq 100); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.05; done
  kill -9 "$p" 2>/dev/null
}

# nginx_stop: a daemonized nginx (by its pid file), gone before the next run.
nginx_stop() {
  local p i
  p=$(cat "$NG/nginx.pid" 2>/dev/null) && [ -n "$p" ] || return 0
  kill "$p" 2>/dev/null
  for i in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
  kill -9 "$p" 2>/dev/null
  rm -f "$NG/nginx.pid"
}

for MODE in $(it_modes); do
  for NGINX in foreground daemon; do
  fport=$(pick_port) bport=$(pick_port)
  daemon="daemon off;"
  [ $NGINX = daemon ] && daemon=
  cat >"$NG/nginx.conf" <<CONF
user www-data;
worker_processes 2;
$daemon
pid $NG/nginx.pid;
error_log $NG/logs/error.log;
events { worker_connections 768; }
http { access_log off; server { listen 127.0.0.1:$bport; root $NG/www; } }
CONF
  blog=$IT_TMP/nginx.$NGINX.$MODE.log bpid=
  if [ $NGINX = foreground ]; then
    start_server nginx nginx -c "$NG/nginx.conf" -p "$NG"
    bpid=$SERVER_PID blog=$SERVER_LOG
  else
    pre_for server
    "${PRE[@]}" nginx -c "$NG/nginx.conf" -p "$NG" >"$blog" 2>&1 </dev/null
  fi
  cat >"$IT_TMP/haproxy.cfg" <<CONF
global
	chroot /var/lib/haproxy
	stats socket $IT_TMP/admin.sock mode 660 level admin
	stats timeout 30s
	user haproxy
	group haproxy
	daemon
defaults
	mode	http
	option	dontlognull
	timeout connect 5000
	timeout client  50000
	timeout server  50000
frontend fe
	bind 127.0.0.1:$fport
	default_backend be
backend be
	server s1 127.0.0.1:$bport
CONF
  hlog=$IT_TMP/haproxy.$MODE.log
  rm -f "$IT_TMP/haproxy.pid"
  pre_for server
  if ! wait_port "$bport" "$bpid" 20 ||
    ! "${PRE[@]}" haproxy -W -f "$IT_TMP/haproxy.cfg" -p "$IT_TMP/haproxy.pid" >"$hlog" 2>&1 ||
    ! wait_port "$fport" "" 20; then
    tap_not_ok "haproxy (master-worker, chroot, user haproxy) to nginx ($NGINX) [$MODE]" "did not start" "$hlog" "$blog"
    haproxy_stop
    [ -n "$bpid" ] && stop_server "$bpid"
    nginx_stop
    continue
  fi
  fetch_twice "haproxy (chroot, user haproxy, RLIMIT_NPROC 0) to nginx ($NGINX, www-data), 16 MiB twice" \
    "http://127.0.0.1:$fport/big" "$sum"
  # Both hops have a preloaded end at each side only in [both].
  if [ "$MODE" = both ] && fabric_enabled; then
    name="haproxy to nginx ($NGINX): held downloads, both hops"
    pids=()
    for i in 1 2 3; do
      start_bg_client "slow$i" curl -sS --limit-rate 1M -o /dev/null "http://127.0.0.1:$fport/big"
      pids+=("$BG_PID")
    done
    rc=0 detail=
    expect_fabric "$fport" "$(fabric_expected)" 10 || { rc=1; detail="curl-haproxy: $FABRIC_DETAIL; "; }
    expect_fabric "$bport" "$(fabric_expected)" 10 || { rc=1; detail+="haproxy-nginx: $FABRIC_DETAIL"; }
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; it_reap "$p"; it_forget "$p"; done
    tap_result $rc "$name [$MODE] fabric=$(fabric_expected)" "${detail:-$FABRIC_DETAIL}" "$hlog" "$blog"
  fi
  haproxy_stop
  [ -n "$bpid" ] && stop_server "$bpid"
  nginx_stop
  done
done
it_done
