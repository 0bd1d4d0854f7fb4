#!/bin/bash
# t_pgbench: PostgreSQL 15 as Debian ships it, a postmaster that forks a
# backend per connection after accept() and closes its copy (running as
# postgres), and pgbench as root over TCP: pgbench -S -c 8 -j 2 for 3 s, no
# failed transaction, in every mode.  In [both], sampled mid-run with
# fabsock stat, every backend's connection and every pgbench connection on
# ${FABSOCK_EXPECT_FABRIC:-the expected fabric}: the child that holds the
# connection upgrades, with the byte counts so far from the kernel
# (docs/design.md 1.3).  tps are measured by bench/servers.sh, not here.
. "$(dirname "$0")/lib.sh"
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -x "$PGBIN/initdb" ] && [ -x "$PGBIN/pgbench" ] || skip_all "postgresql not installed"
[ "$(id -u)" = 0 ] || skip_all "needs root (the server runs as postgres)"
id postgres >/dev/null 2>&1 || skip_all "no user postgres"

PG=$(mktemp -d /tmp/fabsock-pg.XXXXXX) && chown postgres "$PG" || skip_all "mktemp failed"
trap 'runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PG/data" -m immediate stop >/dev/null 2>&1; rm -rf "$PG"' EXIT
if ! (cd / && runuser -u postgres -- "$PGBIN/initdb" -D "$PG/data" -A trust >"$IT_TMP/initdb.log" 2>&1); then
  skip_all "initdb failed: $(tail -n 1 "$IT_TMP/initdb.log")"
fi

for MODE in $(it_modes); do
  port=$(pick_port)
  name="postgres (a backend forked per connection), pgbench -S -c 8 -j 2 3 s"
  pre_for server
  if ! (cd / && runuser -u postgres -- "${PRE[@]}" "$PGBIN/pg_ctl" -D "$PG/data" -l "$PG/log.$MODE" -w -t 30 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $PG -c max_connections=20" start >/dev/null 2>&1); then
    tap_not_ok "$name [$MODE]" "postgres did not start: $(tail -n 2 "$PG/log.$MODE" | tr '\n' ' ')"
    continue
  fi
  out=$IT_TMP/pgbench.$MODE
  "$PGBIN/pgbench" -h 127.0.0.1 -p "$port" -U postgres -i -s 1 postgres >"$out.init" 2>&1
  pre_for client
  real_python # now: python's start under pgbench's load once took the rest of the run
  "${PRE[@]}" timeout 60 "$PGBIN/pgbench" -h 127.0.0.1 -p "$port" -U postgres -S -c 8 -j 2 -T 3 postgres >"$out" 2>&1 &
  bpid=$!
  share=""
  if fabric_enabled && [ -n "$(fabric_expected)" ]; then
    sleep 2
    share=$(timeout 10 "$FABSOCK_BIN" stat --json 2>&1 |
      "$IT_PYTHON" "$IT_DIR/fabric_share.py" "$port" "$(fabric_expected)" 100 "$([ "$MODE" = both ] && echo both || echo any)" resources protocol)
    src=$?
  fi
  wait "$bpid"
  rc=$?
  tps=$(awk '/^tps/ {print $3}' "$out")
  failed=$(awk '/failed transactions/ {print $5}' "$out")
  if [ $rc -ne 0 ] || [ -z "$tps" ]; then detail="pgbench exit $rc: $(tail -n 2 "$out" | tr '\n' ' ')"; rc=1
  elif [ "$failed" != 0 ]; then detail="failed transactions: $failed"; rc=1
  else detail="$tps tps"; fi
  tap_result $rc "$name [$MODE]" "$detail" "$out" "$out.init" "$PG/log.$MODE"
  if fabric_enabled && [ -n "$(fabric_expected)" ]; then
    tap_result "${src:-1}" "$name [$MODE] fabric=$(fabric_expected)" "$share"
  fi
  (cd / && runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PG/data" -m fast -w stop >/dev/null 2>&1)
done
it_done
