#!/usr/bin/env bash
# servers.sh: servers as Debian ships them, plain TCP and both ends
# preloaded, in alternating rounds on this machine; medians and speed-ups.
#   nginx    a daemon master and 2 workers as www-data, sendfile on; a 4 KiB
#            file: wrk -t2 -c50 and -c400 (keep-alive, requests/s), and ab
#            -c8 without keep-alive (a connection per request)
#   apache   Apache httpd as Debian ships it (scripts/apache-conf.sh: a root
#            master, children as www-data), the same file: event MPM (its
#            default) wrk -t2 -c20, prefork MPM wrk -t2 -c4 (keep-alive, below
#            what each serves at once: see tests/integration/t_apache.sh)
#   replies  1 MiB replies on keep-alive connections, wrk -t1 -c8: nginx
#            (sendfile) and aiohttp (python3-aiohttp: asyncio, one event
#            loop, non-blocking sends; Debian's /usr/bin/python3)
#   postgres PostgreSQL's postmaster forks a backend per connection:
#            pgbench -S -c 8 -j 2 (tps), and pgbench -S -C -c 8 (a new
#            connection per transaction)
# Prints one line per round, then a table (median plain, median fabsock,
# ratio) and the same as JSON on the last line.
#
# usage: bench/servers.sh [LIB] [ROUNDS] [SECONDS]
#   LIB      libfabsock.so (default: $FABSOCK_LIB, else <source>/build/.libs/libfabsock.so)
#   ROUNDS   rounds per side (default 3);  SECONDS per run (default 5)
# Needs root, nginx, wrk, ab (apache2-utils), apache2, python3-aiohttp and postgresql; a workload
# whose programs are missing is left out.
set -u
here=$(cd "$(dirname "$0")" && pwd)
lib=${1:-${FABSOCK_LIB:-$here/../build/.libs/libfabsock.so}}
rounds=${2:-3}
secs=${3:-5}
[ -f "$lib" ] || { echo "servers: no library at $lib" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "servers: needs root (nginx workers as www-data, postgres as postgres)" >&2; exit 1; }
lib=$(readlink -f "$lib")
tmp=$(mktemp -d /tmp/fabsock-servers.XXXXXX) && chmod 755 "$tmp" || exit 1
NGINX_PORT=18093 PG_PORT=18094 APACHE_PORT=18095 AIO_PORT=18096
pre() { if [ "$1" = fabsock ]; then echo "env LD_PRELOAD=$lib"; else echo env; fi; }
record() { echo "$3" >>"$tmp/$1.$2"; }   # record WORKLOAD SIDE VALUE
# shellcheck source=bench/servers-common.sh
. "$here/servers-common.sh"
have_aiohttp=0
command -v wrk >/dev/null && command -v curl >/dev/null && /usr/bin/python3 -c 'import aiohttp' 2>/dev/null && have_aiohttp=1
mkdir -p "$tmp/www" && head -c $((1 << 20)) /dev/urandom >"$tmp/www/f1m" && chmod a+rX "$tmp/www" "$tmp/www/f1m"

for r in $(seq "$rounds"); do
  # plain first in odd rounds, fabsock first in even ones: the second of
  # two runs is often slower whatever it runs (never-slower.sh).
  order="plain fabsock"; [ $((r % 2)) = 0 ] && order="fabsock plain"
  for side in $order; do
    line="round $r $side:"
    if [ $have_nginx = 1 ]; then
      rm -f "$tmp/nginx.pid"
      $(pre $side) nginx -c "$tmp/nginx.conf" -p "$tmp" && sleep 0.5
      for c in 50 400; do
        v=$($(pre $side) wrk -t2 -c$c -d${secs}s http://127.0.0.1:$NGINX_PORT/f4k 2>/dev/null | awk '/Requests\/sec/ {print $2}')
        record "nginx-wrk-c$c" $side "${v:-nan}"; line="$line wrk-c$c ${v:-?}/s"
      done
      v=$($(pre $side) wrk -t1 -c8 -d${secs}s http://127.0.0.1:$NGINX_PORT/f1m 2>/dev/null | awk '/Requests\/sec/ {print $2}')
      record "nginx-1MiB-wrk-c8" $side "${v:-nan}"; line="$line 1MiB-c8 ${v:-?}/s"
      if [ $have_ab = 1 ]; then
        v=$($(pre $side) ab -q -c 8 -t "$secs" -n 10000000 http://127.0.0.1:$NGINX_PORT/f4k 2>/dev/null | awk '/Requests per second/ {print $4}')
        record nginx-ab-c8-close $side "${v:-nan}"; line="$line ab-c8 ${v:-?}/s"
      fi
      kill "$(cat "$tmp/nginx.pid")"; sleep 0.5
    fi
    if [ $have_apache = 1 ]; then
      for mpm in event prefork; do
        c=$([ $mpm = event ] && echo 20 || echo 4)
        bash "$here/../scripts/apache-conf.sh" "$tmp/apache" $mpm $APACHE_PORT "$tmp/www" &&
          (. "$tmp/apache/etc/envvars.fs" && $(pre $side) apache2 -d "$tmp/apache/etc" -f "$tmp/apache/etc/apache2.conf" -k start) &&
          sleep 0.5 || continue
        v=$($(pre $side) wrk -t2 -c$c -d${secs}s http://127.0.0.1:$APACHE_PORT/f4k 2>/dev/null | awk '/Requests\/sec/ {print $2}')
        record "apache-$mpm-wrk-c$c" $side "${v:-nan}"; line="$line apache-$mpm ${v:-?}/s"
        (. "$tmp/apache/etc/envvars.fs" && apache2 -d "$tmp/apache/etc" -f "$tmp/apache/etc/apache2.conf" -k stop)
        sleep 1
      done
    fi
    if [ $have_aiohttp = 1 ]; then
      $(pre $side) /usr/bin/python3 "$here/../tests/integration/aioblob.py" "$tmp/www/f1m" $AIO_PORT 2>/dev/null &
      apid=$!
      for _ in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:$AIO_PORT/f1m && break; sleep 0.1; done
      v=$($(pre $side) wrk -t1 -c8 -d${secs}s http://127.0.0.1:$AIO_PORT/f1m 2>/dev/null | awk '/Requests\/sec/ {print $2}')
      record "aiohttp-1MiB-wrk-c8" $side "${v:-nan}"; line="$line aiohttp ${v:-?}/s"
      kill $apid; wait $apid 2>/dev/null
    fi
    if [ $have_pg = 1 ] && pg_start $side; then
      for how in keep connect; do
        flag=; [ $how = connect ] && flag=-C
        v=$($(pre $side) "$PGBIN/pgbench" -h 127.0.0.1 -p "$PG_PORT" -U postgres -S $flag -c 8 -j 2 -T "$secs" postgres 2>/dev/null |
          awk '/^tps/ {print $3}')
        record "pgbench-S-c8${flag:+-C}" $side "${v:-nan}"; line="$line pgbench${flag:+ -C} ${v:-?} tps"
      done
      pg_stop
    fi
    echo "$line"
  done
done

printf '\n%-22s %14s %14s %8s\n' workload plain fabsock ratio
json="{\"rounds\": $rounds, \"seconds\": $secs, \"results\": ["
sep=
for f in "$tmp"/*.plain; do
  [ -e "$f" ] || continue
  w=$(basename "$f" .plain)
  p=$(median <"$f"); q=$(median <"$tmp/$w.fabsock")
  ratio=$(awk -v p="$p" -v q="$q" 'BEGIN { if (p > 0 && q == q + 0) printf "%.2f", q / p; else print "nan" }')
  printf '%-22s %14s %14s %7sx\n' "$w" "$p" "$q" "$ratio"
  json="$json$sep{\"workload\": \"$w\", \"plain\": $p, \"fabsock\": $q, \"ratio\": $ratio}"
  sep=", "
done
echo "$json]}"
