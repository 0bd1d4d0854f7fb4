#!/bin/bash
# t_mariadb: MariaDB as Debian ships it (mariadbd as user mysql, InnoDB doing
# its file I/O through a liburing io_uring), mariadb clients over TCP.  A
# table of 4096 rows of 200 bytes is filled from the Sequence engine, then
# read back whole: the same bytes as computed here, in every mode.  In
# [both], a client that read it and then sleeps shows its connection on the
# expected fabric at both ends.  A ring kept every connection of the process
# on TCP (reason io-uring): no MariaDB was ever accelerated; the library now
# follows liburing's rings (preload/uring.c).  Its error log must say that
# InnoDB uses io_uring, or the test proves nothing (a skip says why).
. "$(dirname "$0")/lib.sh"
require_cmd mariadbd mariadb mariadb-install-db
[ "$(id -u)" = 0 ] || skip_all "needs root (mariadbd runs as user mysql)"
id mysql >/dev/null 2>&1 || skip_all "no user mysql"
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-60}

DB=$(mktemp -d /tmp/fabsock-mariadb.XXXXXX) && chmod 755 "$DB" || skip_all "mktemp failed"
trap 'rm -rf "$DB"' EXIT
mkdir -p "$DB/data" "$DB/run"
chown -R mysql:mysql "$DB/data" "$DB/run"
# Its temporary files go where user mysql may write (the harness's TMPDIR is root's).
export TMPDIR=$DB/run
if ! mariadb-install-db --user=mysql --datadir="$DB/data" --auth-root-authentication-method=normal \
  >"$IT_TMP/install.log" 2>&1; then
  skip_all "mariadb-install-db failed: $(tail -n 2 "$IT_TMP/install.log" | tr '\n' ' ')"
fi
# What `SELECT id, v FROM t.x ORDER BY id` prints (mariadb -N -B).
want=$(awk 'BEGIN { for (i = 1; i <= 4096; i++) printf "%d\t%0200d\n", i, i }' | md5sum | cut -c1-32)

for MODE in $(it_modes); do
  port=$(pick_port)
  start_server mariadbd mariadbd --no-defaults --user=mysql --datadir="$DB/data" --port="$port" \
    --bind-address=127.0.0.1 --socket="$DB/run/my.sock" --pid-file="$DB/run/my.pid" --skip-grant-tables \
    --innodb-buffer-pool-size=32M --tmpdir="$DB/run" --log-error="$DB/run/err.$MODE.log"
  spid=$SERVER_PID
  name="MariaDB (InnoDB on io_uring): 4096 rows of 200 bytes written and read back"
  if ! wait_port "$port" "$spid" 60; then
    server_status; tap_not_ok "$name [$MODE]" "mariadbd did not start ($SRV_STATUS)" "$DB/run/err.$MODE.log"
    stop_server "$spid"; continue
  fi
  if [ "$MODE" = plain ] && ! grep -q 'Using io_uring' "$DB/run/err.$MODE.log"; then
    stop_server "$spid"
    skip_all "InnoDB does not use io_uring here (its log: $(grep -m1 -i 'innodb.*aio\|uring' "$DB/run/err.$MODE.log"))"
  fi
  my=(mariadb --no-defaults -h 127.0.0.1 -P "$port" -N -B)
  out=$IT_TMP/mariadb.$MODE.out
  run_client "${my[@]}" -e "DROP DATABASE IF EXISTS t; CREATE DATABASE t;
    CREATE TABLE t.x (id INT PRIMARY KEY, v VARCHAR(200)) ENGINE=InnoDB;
    USE t; INSERT INTO t.x SELECT seq, LPAD(seq, 200, '0') FROM seq_1_to_4096;" >"$out" 2>&1
  rc=$?
  got=$(run_client "${my[@]}" -e "SELECT id, v FROM t.x ORDER BY id" 2>>"$out" | md5sum | cut -c1-32)
  [ "$got" = "$want" ] || rc=1
  tap_result $rc "$name [$MODE]" "md5 ${got:-none} (want $want)" "$out" "$DB/run/err.$MODE.log"
  if [ "$MODE" = both ] && fabric_enabled; then
    start_bg_client held "${my[@]}" -e "SELECT id, v FROM t.x ORDER BY id; SELECT SLEEP(4)"
    expect_fabric "$port" "$(fabric_expected)" 10
    fst=$?
    { wait "$BG_PID"; } 2>/dev/null
    it_forget "$BG_PID"
    fabric_report "MariaDB: a client connection that read the table" $fst
  fi
  stop_server "$spid"
done
it_done
