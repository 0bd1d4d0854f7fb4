# servers-common.sh: what servers.sh and libs-ab.sh share, sourced by both.
# The caller sets tmp (a fresh directory, mode 755), NGINX_PORT, PG_PORT and
# pre (pre WHO: the env(1) words that run a program as WHO: plain, or
# preloaded), and gets: PGBIN, a cleanup trap, median, have_nginx /
# have_ab / have_apache / have_pg, a 4 KiB file at $tmp/www/f4k,
# $tmp/nginx.conf (Debian's shape: a daemon master and 2 workers as
# www-data, sendfile on, listening on a wildcard address as its default site), and a PostgreSQL cluster at scale 10 with
# pg_start WHO and pg_stop.
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
cleanup() {
  [ -s "$tmp/nginx.pid" ] && kill "$(cat "$tmp/nginx.pid")" 2>/dev/null
  [ -s "$tmp/apache/run/apache2.pid" ] && kill "$(cat "$tmp/apache/run/apache2.pid")" 2>/dev/null
  [ -n "$PGBIN" ] && [ -d "$tmp/pg" ] && runuser -u postgres -- "$PGBIN/pg_ctl" -D "$tmp/pg" -m immediate stop >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
# shellcheck source=bench/ab-common.sh
. "$(dirname "${BASH_SOURCE[0]}")/ab-common.sh" # median

have_nginx=0; command -v nginx >/dev/null && command -v wrk >/dev/null && id www-data >/dev/null 2>&1 && have_nginx=1
have_ab=0; command -v ab >/dev/null && have_ab=$have_nginx
have_apache=0; command -v apache2 >/dev/null && command -v wrk >/dev/null && [ -f /etc/apache2/apache2.conf ] &&
  id www-data >/dev/null 2>&1 && have_apache=1
have_pg=0; [ -n "$PGBIN" ] && [ -x "$PGBIN/pgbench" ] && id postgres >/dev/null 2>&1 && have_pg=1

if [ $have_nginx = 1 ] || [ $have_apache = 1 ]; then
  mkdir -p "$tmp/www" "$tmp/logs"; head -c 4096 /dev/urandom >"$tmp/www/f4k"; chmod -R a+rX "$tmp/www"
fi
if [ $have_nginx = 1 ]; then
  cat >"$tmp/nginx.conf" <<CONF
user www-data;
worker_processes 2;
pid $tmp/nginx.pid;
error_log $tmp/logs/error.log;
events { worker_connections 768; }
http { sendfile on; tcp_nopush on; access_log off; server { listen $NGINX_PORT; root $tmp/www; } }
CONF
fi
if [ $have_pg = 1 ]; then
  chown postgres "$tmp"
  (cd / && runuser -u postgres -- "$PGBIN/initdb" -D "$tmp/pg" -A trust >/dev/null 2>&1) || have_pg=0
fi
pg_start() { (cd / && runuser -u postgres -- $(pre "$1") "$PGBIN/pg_ctl" -D "$tmp/pg" -l "$tmp/pg.log" -w \
  -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $tmp -c max_connections=30" start >/dev/null); }
pg_stop() { (cd / && runuser -u postgres -- "$PGBIN/pg_ctl" -D "$tmp/pg" -m fast -w stop >/dev/null); }
if [ $have_pg = 1 ]; then
  pg_start plain && "$PGBIN/pgbench" -h 127.0.0.1 -p "$PG_PORT" -U postgres -i -s 10 postgres >/dev/null 2>&1; pg_stop
fi
