#!/bin/bash
# t_haproxy: HAProxy as Debian ships it in front of python3's http.server.
# Debian's global section: a master that daemonizes (-W, master-worker, as
# the unit runs it), a worker that chroots to /var/lib/haproxy, runs as
# user haproxy and then forbids itself new threads (RLIMIT_NPROC 0, HAProxy's
# guard against forks unless insecure-fork-wanted).  The worker could not
# start the library's agent thread: every connection stayed on TCP (reason
# resources) with a warning per connection.
# curl fetches a 16 MiB file through it twice on one connection (intact, in
# every mode); in [both] a download held slow (--limit-rate) shows both hops
# on the expected fabric: curl to haproxy, and haproxy (in its chroot) to
# the backend.
. "$(dirname "$0")/lib.sh"
require_cmd haproxy curl python3
real_python
[ "$(id -u)" = 0 ] || skip_all "needs root (haproxy's worker chroots and becomes user haproxy)"
id haproxy >/dev/null 2>&1 || skip_all "no user haproxy"
[ -d /var/lib/haproxy ] || skip_all "no /var/lib/haproxy (haproxy's chroot)"
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-60}

W=$IT_TMP/www
mkdir -p "$W"
head -c $((16 << 20)) /dev/urandom >"$W/big"
sum=$(sha256sum <"$W/big" | cut -d' ' -f1)

for MODE in $(it_modes); do
  fport=$(pick_port) bport=$(pick_port)
  start_server backend "$IT_PYTHON" -m http.server "$bport" --bind 127.0.0.1 --directory "$W"
  bpid=$SERVER_PID blog=$SERVER_LOG
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
    ! FABSOCK_LOG=warn "${PRE[@]}" haproxy -W -f "$IT_TMP/haproxy.cfg" -p "$IT_TMP/haproxy.pid" >"$hlog" 2>&1 ||
    ! wait_port "$fport" "" 20; then
    tap_not_ok "haproxy (master-worker, chroot, user haproxy) [$MODE]" "did not start" "$hlog" "$blog"
    kill "$(cat "$IT_TMP/haproxy.pid" 2>/dev/null)" 2>/dev/null
    stop_server "$bpid"
    continue
  fi
  fetch_twice "haproxy (chroot, user haproxy, RLIMIT_NPROC 0) to http.server, 16 MiB twice" \
    "http://127.0.0.1:$fport/big" "$sum"
  # Both hops have a preloaded end at each side only in [both].
  if [ "$MODE" = both ] && fabric_enabled; then
    name="haproxy: a held download, both hops"
    start_bg_client slow curl -sS --limit-rate 1M -o /dev/null "http://127.0.0.1:$fport/big"
    rc=0 detail=
    expect_fabric "$fport" "$(fabric_expected)" 10 || { rc=1; detail="curl-haproxy: $FABRIC_DETAIL; "; }
    expect_fabric "$bport" "$(fabric_expected)" 10 || { rc=1; detail+="haproxy-backend: $FABRIC_DETAIL"; }
    kill "$BG_PID" 2>/dev/null
    it_reap "$BG_PID"; it_forget "$BG_PID"
    tap_result $rc "$name [$MODE] fabric=$(fabric_expected)" "${detail:-$FABRIC_DETAIL}" "$hlog"
  fi
  kill "$(cat "$IT_TMP/haproxy.pid" 2>/dev/null)" 2>/dev/null
  stop_server "$bpid"
done
it_done
