#!/usr/bin/env bash
# libs-ab.sh: the same servers as servers.sh (nginx as Debian ships it, a
# daemon master and 2 workers as www-data; PostgreSQL's postmaster and a
# backend per connection), run under several builds of the library in
# alternating rounds, so that builds (not only plain vs one build) compare
# within one run on this noisy machine.  Both ends of every connection run
# under the same LIB.  Per round and LIB: wrk -t2 -c50 (requests/s) and
# pgbench -S -c 8 -j 2 (tps); then the median per LIB, and its ratio to the
# first LIB, as a table and as JSON on the last line.
#
# usage: bench/libs-ab.sh [-r ROUNDS] [-s SECONDS] LIB...
#   LIB      a libfabsock.so, or "plain" for no library
#   ROUNDS   rounds (default 3); SECONDS per run (default 5)
# Needs root, nginx, wrk and postgresql; a workload whose programs are
# missing is left out.
set -u
rounds=3 secs=5
while getopts r:s: o; do
  case $o in
  r) rounds=$OPTARG ;;
  s) secs=$OPTARG ;;
  *) echo "usage: $0 [-r ROUNDS] [-s SECONDS] LIB..." >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [-r ROUNDS] [-s SECONDS] LIB..." >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "libs-ab: needs root (nginx workers as www-data, postgres as postgres)" >&2; exit 1; }
libs=()
for l in "$@"; do
  if [ "$l" = plain ]; then libs+=(plain); continue; fi
  [ -f "$l" ] || { echo "libs-ab: no library at $l" >&2; exit 1; }
  libs+=("$(readlink -f "$l")")
done
tmp=$(mktemp -d /tmp/fabsock-libs-ab.XXXXXX) && chmod 755 "$tmp" || exit 1
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
cleanup() {
  [ -s "$tmp/nginx.pid" ] && kill "$(cat "$tmp/nginx.pid")" 2>/dev/null
  [ -n "$PGBIN" ] && [ -d "$tmp/pg" ] && runuser -u postgres -- "$PGBIN/pg_ctl" -D "$tmp/pg" -m immediate stop >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
pre() { if [ "$1" = plain ]; then echo env; else echo "env LD_PRELOAD=$1"; fi; }

have_nginx=0; command -v nginx >/dev/null && command -v wrk >/dev/null && id www-data >/dev/null 2>&1 && have_nginx=1
have_pg=0; [ -n "$PGBIN" ] && [ -x "$PGBIN/pgbench" ] && id postgres >/dev/null 2>&1 && have_pg=1
if [ $have_nginx = 1 ]; then
  mkdir -p "$tmp/www" "$tmp/logs"; head -c 4096 /dev/urandom >"$tmp/www/f4k"; chmod -R a+rX "$tmp/www"
  cat >"$tmp/nginx.conf" <<CONF
user www-data;
worker_processes 2;
pid $tmp/nginx.pid;
error_log $tmp/logs/error.log;
events { worker_connections 768; }
http { sendfile on; tcp_nopush on; access_log off; server { listen 127.0.0.1:18096; root $tmp/www; } }
CONF
fi
if [ $have_pg = 1 ]; then
  chown postgres "$tmp"
  (cd / && runuser -u postgres -- "$PGBIN/initdb" -D "$tmp/pg" -A trust >/dev/null 2>&1) || have_pg=0
fi
pg_start() { (cd / && runuser -u postgres -- $(pre "$1") "$PGBIN/pg_ctl" -D "$tmp/pg" -l "$tmp/pg.log" -w \
  -o "-c listen_addresses=127.0.0.1 -p 18097 -k $tmp -c max_connections=30" start >/dev/null); }
pg_stop() { (cd / && runuser -u postgres -- "$PGBIN/pg_ctl" -D "$tmp/pg" -m fast -w stop >/dev/null); }
if [ $have_pg = 1 ]; then
  pg_start plain && "$PGBIN/pgbench" -h 127.0.0.1 -p 18097 -U postgres -i -s 10 postgres >/dev/null 2>&1; pg_stop
fi
[ $have_nginx = 1 ] || [ $have_pg = 1 ] || { echo "# SKIP libs-ab: neither nginx + wrk nor postgresql is installed"; exit 77; }

for r in $(seq "$rounds"); do
  for i in "${!libs[@]}"; do
    lib=${libs[$i]}; line="round $r $(basename "$lib"):"
    if [ $have_nginx = 1 ]; then
      rm -f "$tmp/nginx.pid"
      $(pre "$lib") nginx -c "$tmp/nginx.conf" -p "$tmp" && sleep 0.5
      v=$($(pre "$lib") wrk -t2 -c50 -d${secs}s http://127.0.0.1:18096/f4k 2>/dev/null | awk '/Requests\/sec/ {print $2}')
      echo "${v:-nan}" >>"$tmp/wrk.$i"; line="$line wrk-c50 ${v:-?}/s"
      kill "$(cat "$tmp/nginx.pid")"; sleep 0.5
    fi
    if [ $have_pg = 1 ] && pg_start "$lib"; then
      v=$($(pre "$lib") "$PGBIN/pgbench" -h 127.0.0.1 -p 18097 -U postgres -S -c 8 -j 2 -T "$secs" postgres 2>/dev/null |
        awk '/^tps/ {print $3}')
      echo "${v:-nan}" >>"$tmp/pgbench.$i"; line="$line pgbench ${v:-?} tps"
      pg_stop
    fi
    echo "$line"
  done
done

printf '\n%-10s %-40s %14s %8s\n' workload lib median "vs first"
json="{\"rounds\": $rounds, \"seconds\": $secs, \"results\": ["
sep=
for w in wrk pgbench; do
  [ -e "$tmp/$w.0" ] || continue
  first=$(median <"$tmp/$w.0")
  for i in "${!libs[@]}"; do
    m=$(median <"$tmp/$w.$i")
    ratio=$(awk -v p="$first" -v q="$m" 'BEGIN { if (p > 0 && q == q + 0) printf "%.2f", q / p; else print "nan" }')
    printf '%-10s %-40s %14s %7sx\n' "$w" "${libs[$i]}" "$m" "$ratio"
    json="$json$sep{\"workload\": \"$w\", \"lib\": \"${libs[$i]}\", \"median\": $m, \"vs_first\": $ratio}"
    sep=", "
  done
done
echo "$json]}"
