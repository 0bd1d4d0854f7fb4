#!/usr/bin/env bash
# calls-ab.sh: system calls per request, and requests/s, under several builds
# of the library in alternating rounds (each round starts one LIB later),
# both ends of every connection under the same LIB:
#   close     nginx in one process (master_process off, as instr-cost.sh),
#             wrk -t1 -c4 with "Connection: close" against a 4 KiB file (a
#             connection per request): requests/s
#   close.sc  system calls per request, machine-wide (perf stat -a -e
#             raw_syscalls:sys_enter over the wrk run / its requests)
#   pgbench   PostgreSQL (servers-common.sh's cluster), pgbench -S -c 8: tps
#   pgbench.sc  system calls per transaction, machine-wide
# Then per workload the median per LIB, its ratio to the first LIB's and the
# median of the per-round ratios (ab-common.sh), as a table and JSON.
#
# usage: bench/calls-ab.sh [-r ROUNDS] [-s SECONDS] LIB...
#   LIB  a libfabsock.so, or "plain"; LIB,VAR=VALUE[,...] adds variables
# Needs root, nginx, wrk and perf (postgresql for pgbench); a workload whose
# programs are missing is left out ("# SKIP" and 77 when none can run).
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/ab-common.sh
. "$here/ab-common.sh"
ab_default_secs=3
ab_parse "$0" "$@"
[ "$(id -u)" = 0 ] || { echo "calls-ab: needs root (postgres runs as postgres)" >&2; exit 1; }
command -v perf >/dev/null && perf stat -a -e raw_syscalls:sys_enter -x, true >/dev/null 2>&1 ||
  { echo "# SKIP calls-ab: perf cannot count raw_syscalls:sys_enter here"; exit 77; }
tmp=$(mktemp -d /tmp/fabsock-calls-ab.XXXXXX) && chmod 755 "$tmp" || exit 1
NGINX_PORT=18196 PG_PORT=18197
pre() { ab_pre "$1"; }
# shellcheck source=bench/servers-common.sh
. "$here/servers-common.sh"
[ $have_nginx = 1 ] || [ $have_pg = 1 ] || { echo "# SKIP calls-ab: neither nginx + wrk nor postgresql"; exit 77; }
cat >"$tmp/single.conf" <<CONF
master_process off;
daemon off;
worker_processes 1;
pid $tmp/single.pid;
error_log $tmp/logs/error.log;
events { worker_connections 768; }
http { sendfile on; tcp_nopush on; access_log off; server { listen 127.0.0.1:$NGINX_PORT; root $tmp/www; } }
CONF

# calls FILE: the count perf stat -x, wrote for raw_syscalls:sys_enter.
calls() { awk -F, '/raw_syscalls:sys_enter/ {print $1; exit}' "$1"; }
per() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == a + 0 && b + 0 > 0) printf "%.2f", a / b; else print "nan" }'; }

one() {
  local lib=$1 i=$2 r=$3 v n c line="round $r $(basename "${1%%,*}"):" npid
  if [ $have_nginx = 1 ]; then
    $(pre "$lib") nginx -c "$tmp/single.conf" -p "$tmp" >/dev/null 2>&1 &
    npid=$!
    sleep 0.8
    perf stat -a -e raw_syscalls:sys_enter -x, -o "$tmp/perf" $(pre "$lib") \
      wrk -t1 -c4 -d"${secs}s" -H 'Connection: close' "http://127.0.0.1:$NGINX_PORT/f4k" >"$tmp/wrk.out" 2>&1
    kill "$npid" 2>/dev/null; wait "$npid" 2>/dev/null
    v=$(awk '/Requests\/sec/ {print $2}' "$tmp/wrk.out")
    n=$(awk '/requests in/ {print $1}' "$tmp/wrk.out")
    c=$(per "$(calls "$tmp/perf")" "${n:-0}")
    echo "${v:-nan}" >>"$tmp/close.$i"; echo "$c" >>"$tmp/close.sc.$i"
    line="$line close ${v:-?}/s $c calls/request"
  fi
  if [ $have_pg = 1 ] && pg_start "$lib"; then
    perf stat -a -e raw_syscalls:sys_enter -x, -o "$tmp/perf" $(pre "$lib") \
      "$PGBIN/pgbench" -h 127.0.0.1 -p "$PG_PORT" -U postgres -S -c 8 -T "$secs" postgres >"$tmp/pg.out" 2>&1
    pg_stop
    v=$(awk '/^tps/ {print $3}' "$tmp/pg.out")
    n=$(awk '/number of transactions actually processed/ {print $NF}' "$tmp/pg.out")
    c=$(per "$(calls "$tmp/perf")" "${n:-0}")
    echo "${v:-nan}" >>"$tmp/pgbench.$i"; echo "$c" >>"$tmp/pgbench.sc.$i"
    line="$line pgbench ${v:-?} tps $c calls/transaction"
  fi
  echo "$line"
}
ab_rounds one

ab_report close close.sc pgbench pgbench.sc
