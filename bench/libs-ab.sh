#!/usr/bin/env bash
# libs-ab.sh: the same servers as servers.sh (nginx as Debian ships it, a
# daemon master and 2 workers as www-data; PostgreSQL's postmaster and a
# backend per connection), run under several builds of the library in
# alternating rounds, so that builds (not only plain vs one build) compare
# within one run on this noisy machine.  Both ends of every connection run
# under the same LIB.  Per round and LIB: wrk -t2 -c50 and -c400 (requests/s),
# wrk -t2 -c8 with "Connection: close" (a connection per request, as ab
# without keep-alive; requests/s),
# pgbench -S -c 8 -j 2 (tps) and the same with -C, a connection per
# transaction (tps); then the median per LIB, its ratio to the first LIB's
# median, and the median of the per-round ratios to the first LIB (each
# round's builds run one after the other, so a round's ratio is paired: on
# this machine the speed of a whole round moves by tens of percent; each
# round starts with the next LIB, so that none is always first), as a table
# and as JSON on the last line.
#
# usage: bench/libs-ab.sh [-r ROUNDS] [-s SECONDS] LIB...
#   LIB      a libfabsock.so, or "plain" for no library; LIB,VAR=VALUE[,...]
#            runs it with those environment variables (FABSOCK_DOORBELL=1)
#   ROUNDS   rounds (default 3); SECONDS per run (default 5)
# Needs root, nginx, wrk and postgresql; a workload whose programs are
# missing is left out.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/ab-common.sh
. "$here/ab-common.sh"
ab_parse "$0" "$@"
[ "$(id -u)" = 0 ] || { echo "libs-ab: needs root (nginx workers as www-data, postgres as postgres)" >&2; exit 1; }
tmp=$(mktemp -d /tmp/fabsock-libs-ab.XXXXXX) && chmod 755 "$tmp" || exit 1
NGINX_PORT=18096 PG_PORT=18097
pre() { ab_pre "$1"; }
# shellcheck source=bench/servers-common.sh
. "$here/servers-common.sh"
[ $have_nginx = 1 ] || [ $have_pg = 1 ] || { echo "# SKIP libs-ab: neither nginx + wrk nor postgresql is installed"; exit 77; }

# One LIB's turn in a round: every workload, a figure each in $tmp/W.I.
one() {
  local lib=$1 i=$2 r=$3 v line
  line="round $r $(basename "$lib"):"
  if [ $have_nginx = 1 ]; then
    rm -f "$tmp/nginx.pid"
    $(pre "$lib") nginx -c "$tmp/nginx.conf" -p "$tmp" && sleep 0.5
    v=$($(pre "$lib") wrk -t2 -c50 -d${secs}s http://127.0.0.1:$NGINX_PORT/f4k 2>/dev/null | awk '/Requests\/sec/ {print $2}')
    echo "${v:-nan}" >>"$tmp/wrk.$i"; line="$line wrk-c50 ${v:-?}/s"
    v=$($(pre "$lib") wrk -t2 -c400 -d${secs}s http://127.0.0.1:$NGINX_PORT/f4k 2>/dev/null | awk '/Requests\/sec/ {print $2}')
    echo "${v:-nan}" >>"$tmp/wrk400.$i"; line="$line wrk-c400 ${v:-?}/s"
    v=$($(pre "$lib") wrk -t2 -c8 -d${secs}s -H 'Connection: close' http://127.0.0.1:$NGINX_PORT/f4k 2>/dev/null |
      awk '/Requests\/sec/ {print $2}')
    echo "${v:-nan}" >>"$tmp/wrkclose.$i"; line="$line wrk-close ${v:-?}/s"
    kill "$(cat "$tmp/nginx.pid")"; sleep 0.5
  fi
  if [ $have_pg = 1 ] && pg_start "$lib"; then
    v=$($(pre "$lib") "$PGBIN/pgbench" -h 127.0.0.1 -p "$PG_PORT" -U postgres -S -c 8 -j 2 -T "$secs" postgres 2>/dev/null |
      awk '/^tps/ {print $3}')
    echo "${v:-nan}" >>"$tmp/pgbench.$i"; line="$line pgbench ${v:-?} tps"
    v=$($(pre "$lib") "$PGBIN/pgbench" -h 127.0.0.1 -p "$PG_PORT" -U postgres -S -C -c 8 -j 2 -T "$secs" postgres \
      2>/dev/null | awk '/^tps/ {print $3}')
    echo "${v:-nan}" >>"$tmp/pgbenchC.$i"; line="$line pgbench-C ${v:-?} tps"
    pg_stop
  fi
  echo "$line"
}
ab_rounds one

ab_report wrk wrk400 wrkclose pgbench pgbenchC
