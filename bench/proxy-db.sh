#!/usr/bin/env bash
# proxy-db.sh: two servers the library once left on TCP whole, run under
# several builds of the library in alternating rounds (as libs-ab.sh), both
# ends of every connection under the same LIB:
#   haproxy   HAProxy as Debian configures it (master-worker, a worker
#             chrooted to /var/lib/haproxy as user haproxy, RLIMIT_NPROC 0)
#             in front of nginx as Debian's unit starts it (a daemon: the
#             process that listen()s exits; a root master, 2 workers as
#             www-data); wrk -t2 -c50 through it for a 4 KiB file
#             (requests/s): two hops per request
#   mariadb   MariaDB (InnoDB on io_uring, as user mysql); mysqlslap -c 8,
#             a point SELECT on a 4096-row table, SECONDS x 4000 queries
#             (queries/s)
# Per workload and LIB the median of the rounds, its ratio to the first
# LIB's, and the median of the per-round ratios, as a table and as JSON on
# the last line.
#
# usage: bench/proxy-db.sh [-r ROUNDS] [-s SECONDS] LIB...
#   LIB      a libfabsock.so, or "plain" for no library; LIB,VAR=VALUE[,...]
#            runs it with those environment variables (as libs-ab.sh)
# Needs root, haproxy + nginx + wrk, mariadb-server + mariadb-client; a
# workload whose programs are missing is left out.
set -u
# shellcheck source=bench/ab-common.sh
. "$(cd "$(dirname "$0")" && pwd)/ab-common.sh"
ab_parse "$0" "$@"
[ "$(id -u)" = 0 ] || { echo "proxy-db: needs root (haproxy's chroot, www-data, mysql)" >&2; exit 1; }
tmp=$(mktemp -d /tmp/fabsock-proxy-db.XXXXXX) && chmod 755 "$tmp" || exit 1
stop_pidfile() {
  local p
  p=$(cat "$1" 2>/dev/null) && [ -n "$p" ] || return 0
  kill "$p" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.05; done
  kill -9 "$p" 2>/dev/null
}
cleanup() {
  stop_pidfile "$tmp/haproxy.pid"; stop_pidfile "$tmp/nginx.pid"; stop_pidfile "$tmp/run/my.pid"
  rm -rf "$tmp"
}
trap cleanup EXIT
wait_port() { for _ in $(seq 600); do ss -Hltn "sport = :$1" | grep -q . && return 0; sleep 0.05; done; return 1; }

FPORT=18811 BPORT=18812 MPORT=18813
have_proxy=0
command -v haproxy >/dev/null && command -v nginx >/dev/null && command -v wrk >/dev/null && id haproxy >/dev/null 2>&1 &&
  id www-data >/dev/null 2>&1 && [ -d /var/lib/haproxy ] && have_proxy=1
have_db=0
command -v mariadbd >/dev/null && command -v mysqlslap >/dev/null && id mysql >/dev/null 2>&1 && have_db=1
[ $have_proxy = 1 ] || [ $have_db = 1 ] || { echo "# SKIP proxy-db: neither haproxy + nginx + wrk nor MariaDB"; exit 77; }

if [ $have_proxy = 1 ]; then
  mkdir -p "$tmp/www" "$tmp/logs"; head -c 4096 /dev/urandom >"$tmp/www/f4k"; chmod -R a+rX "$tmp/www"
  cat >"$tmp/nginx.conf" <<CONF
user www-data;
worker_processes 2;
pid $tmp/nginx.pid;
error_log $tmp/logs/error.log;
events { worker_connections 768; }
http { access_log off; server { listen 127.0.0.1:$BPORT; root $tmp/www; } }
CONF
  cat >"$tmp/haproxy.cfg" <<CONF
global
	chroot /var/lib/haproxy
	user haproxy
	group haproxy
	daemon
defaults
	mode http
	timeout connect 5000
	timeout client 50000
	timeout server 50000
frontend fe
	bind 127.0.0.1:$FPORT
	default_backend be
backend be
	server s1 127.0.0.1:$BPORT
CONF
fi
if [ $have_db = 1 ]; then
  mkdir -p "$tmp/data" "$tmp/run"; chown mysql:mysql "$tmp/data" "$tmp/run"
  TMPDIR=$tmp/run mariadb-install-db --user=mysql --datadir="$tmp/data" >/dev/null 2>&1 || have_db=0
fi
db_start() {
  $(ab_pre "$1") mariadbd --no-defaults --user=mysql --datadir="$tmp/data" --port=$MPORT --bind-address=127.0.0.1 \
    --socket="$tmp/run/my.sock" --pid-file="$tmp/run/my.pid" --skip-grant-tables --tmpdir="$tmp/run" \
    --log-error="$tmp/run/err.log" >/dev/null 2>&1 &
  wait_port $MPORT
}
if [ $have_db = 1 ] && db_start plain; then
  mariadb --no-defaults -h 127.0.0.1 -P $MPORT -e "CREATE DATABASE t; USE t;
    CREATE TABLE x (id INT PRIMARY KEY, v VARCHAR(200)) ENGINE=InnoDB;
    INSERT INTO x SELECT seq, LPAD(seq, 200, '0') FROM seq_1_to_4096;" || have_db=0
  stop_pidfile "$tmp/run/my.pid"
fi

# One LIB's turn in a round: each workload, a figure each in $tmp/W.I.
one() {
  local lib=$1 i=$2 r=$3 v t q line
  line="round $r $(basename "$lib"):"
  if [ $have_proxy = 1 ]; then
    $(ab_pre "$lib") nginx -c "$tmp/nginx.conf" -p "$tmp" >/dev/null 2>&1
    wait_port $BPORT && $(ab_pre "$lib") haproxy -W -f "$tmp/haproxy.cfg" -p "$tmp/haproxy.pid" >/dev/null 2>&1 &&
      wait_port $FPORT
    v=$($(ab_pre "$lib") wrk -t2 -c50 -d"${secs}s" "http://127.0.0.1:$FPORT/f4k" 2>/dev/null | awk '/Requests\/sec/ {print $2}')
    echo "${v:-nan}" >>"$tmp/haproxy.$i"; line="$line haproxy ${v:-?}/s"
    stop_pidfile "$tmp/haproxy.pid"; stop_pidfile "$tmp/nginx.pid"
  fi
  if [ $have_db = 1 ] && db_start "$lib"; then
    q=$((secs * 4000))
    t=$($(ab_pre "$lib") mysqlslap --no-defaults -h 127.0.0.1 -P $MPORT --concurrency=8 --iterations=1 \
      --number-of-queries=$q --create-schema=t --no-drop --query="SELECT v FROM x WHERE id=1234" 2>/dev/null |
      awk '/Average number of seconds/ {print $(NF-1)}')
    v=$(awk -v q=$q -v t="${t:-0}" 'BEGIN { if (t > 0) printf "%.0f", q / t; else print "nan" }')
    echo "$v" >>"$tmp/mariadb.$i"; line="$line mariadb $v q/s"
    stop_pidfile "$tmp/run/my.pid"
  fi
  echo "$line"
}
ab_rounds one

ab_report haproxy mariadb
