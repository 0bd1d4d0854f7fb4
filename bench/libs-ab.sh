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
  [ -f "${l%%,*}" ] || { echo "libs-ab: no library at ${l%%,*}" >&2; exit 1; }
  libs+=("$(readlink -f "${l%%,*}")${l#"${l%%,*}"}")
done
tmp=$(mktemp -d /tmp/fabsock-libs-ab.XXXXXX) && chmod 755 "$tmp" || exit 1
NGINX_PORT=18096 PG_PORT=18097
pre() { if [ "$1" = plain ]; then echo env; else echo "env LD_PRELOAD=${1%%,*} ${1#"${1%%,*}"}" | tr , ' '; fi; }
# shellcheck source=bench/servers-common.sh
. "$(cd "$(dirname "$0")" && pwd)/servers-common.sh"
[ $have_nginx = 1 ] || [ $have_pg = 1 ] || { echo "# SKIP libs-ab: neither nginx + wrk nor postgresql is installed"; exit 77; }

for r in $(seq "$rounds"); do
  # Each round starts one LIB later (round 2 of plain A B: A B plain): the
  # second of two runs is often slower whatever it runs (never-slower.sh).
  n=${#libs[@]}
  for k in $(seq 0 $((n - 1))); do
    i=$(((k + r - 1) % n))
    lib=${libs[$i]}; line="round $r $(basename "$lib"):"
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
  done
done

printf '\n%-10s %-40s %14s %8s %8s\n' workload lib median "vs first" "paired"
json="{\"rounds\": $rounds, \"seconds\": $secs, \"results\": ["
sep=
for w in wrk wrk400 wrkclose pgbench pgbenchC; do
  [ -e "$tmp/$w.0" ] || continue
  first=$(median <"$tmp/$w.0")
  for i in "${!libs[@]}"; do
    m=$(median <"$tmp/$w.$i")
    ratio=$(awk -v p="$first" -v q="$m" 'BEGIN { if (p > 0 && q == q + 0) printf "%.2f", q / p; else print "nan" }')
    paired=$(paste "$tmp/$w.0" "$tmp/$w.$i" | awk '$1 > 0 && $2 == $2 + 0 { printf "%.4f\n", $2 / $1 }' | median)
    paired=$(awk -v v="$paired" 'BEGIN { if (v == v + 0 && v != "") printf "%.2f", v; else print "nan" }')
    printf '%-10s %-40s %14s %7sx %7sx\n' "$w" "${libs[$i]}" "$m" "$ratio" "$paired"
    json="$json$sep{\"workload\": \"$w\", \"lib\": \"${libs[$i]}\", \"median\": $m, \"vs_first\": $ratio, \"paired\": $paired}"
    sep=", "
  done
done
echo "$json]}"
