#!/bin/bash
# t_gunicorn: Debian's gunicorn (Python WSGI, a pre-fork server) as its
# package runs it: a daemon master as root that binds the listener, 2 sync
# workers as www-data that accept on the inherited listener and answer one
# request per connection.  curl uploads 8 MiB (the worker reads the body
# and answers its sha256) and downloads 32 MiB on one connection each: both
# intact.  In [both] the connection that carried them went over
# ${FABSOCK_EXPECT_FABRIC:-the expected fabric} (the worker's closed counts;
# the listener belongs to the master, the worker is another user than the
# client).  Then wrk -c4 for 2 s, a connection per request (sync workers
# close each one): no socket error, no non-2xx reply.
. "$(dirname "$0")/lib.sh"
require_cmd gunicorn curl wrk
[ "$(id -u)" = 0 ] || skip_all "needs root (the workers run as www-data)"
id www-data >/dev/null 2>&1 || skip_all "no user www-data"
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-30}

GU=$(mktemp -d /tmp/fabsock-gunicorn.XXXXXX) && chmod 755 "$GU" || skip_all "mktemp failed"
stop_gunicorn() {
  local pid
  pid=$(cat "$GU/gunicorn.pid" 2>/dev/null)
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -f "$GU/gunicorn.pid"
}
trap 'stop_gunicorn; rm -rf "$GU"' EXIT
cat >"$GU/fsapp.py" <<'PY'
import hashlib, os
HERE = os.path.dirname(os.path.abspath(__file__))

def app(environ, start_response):
    path = environ.get("PATH_INFO", "/")
    if path == "/sha":
        h, left = hashlib.sha256(), int(environ.get("CONTENT_LENGTH") or 0)
        while left > 0:
            b = environ["wsgi.input"].read(min(left, 1 << 16))
            if not b:
                break
            h.update(b)
            left -= len(b)
        out = [h.hexdigest().encode() + b"\n"]
        n = len(out[0])
    elif path == "/big":
        f = os.path.join(HERE, "big")
        n = os.path.getsize(f)
        out = environ["wsgi.file_wrapper"](open(f, "rb"), 1 << 16)
    else:
        out, n = [b"hello\n"], 6
    start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(n))])
    return out
PY
head -c $((32 << 20)) /dev/urandom >"$GU/big"
head -c $((8 << 20)) /dev/urandom >"$GU/up"
big_sum=$(sha256sum <"$GU/big" | cut -d' ' -f1)
up_sum=$(sha256sum <"$GU/up" | cut -d' ' -f1)
chmod -R a+rX "$GU"

for MODE in $(it_modes); do
  port=$(pick_port)
  what="gunicorn (daemon master, 2 sync workers as www-data)"
  pre_for server
  rm -f "$GU/gunicorn.pid"
  if ! "${PRE[@]}" gunicorn --daemon --pid "$GU/gunicorn.pid" --user www-data --group www-data -w 2 \
    -b "127.0.0.1:$port" --chdir "$GU" --error-logfile "$GU/error.log" fsapp:app >"$GU/start.log" 2>&1 ||
    ! wait_port "$port" "" 20; then
    tap_not_ok "$what [$MODE]" "gunicorn did not start: $(head -c 300 "$GU/start.log")" "$GU/error.log"
    stop_gunicorn
    continue
  fi
  pre_for client
  name="$what, 8 MiB up and 32 MiB down"
  fabric_watch_start "$port" 2
  "${PRE[@]}" timeout 60 curl -sS --data-binary "@$GU/up" -H 'Content-Type: application/octet-stream' \
    "http://127.0.0.1:$port/sha" >"$IT_TMP/gu.sha.$MODE" 2>"$IT_TMP/gu.curl.$MODE"
  rc1=$?
  "${PRE[@]}" timeout 60 curl -sS -o "$IT_TMP/gu.big.$MODE" "http://127.0.0.1:$port/big" 2>>"$IT_TMP/gu.curl.$MODE"
  rc2=$?
  fabric_watch_stop
  fst=$?
  got_up=$(head -c 64 "$IT_TMP/gu.sha.$MODE")
  got_big=$(sha256sum <"$IT_TMP/gu.big.$MODE" | cut -d' ' -f1)
  if [ $rc1 -ne 0 ] || [ $rc2 -ne 0 ]; then
    tap_not_ok "$name [$MODE]" "curl exit $rc1/$rc2: $(head -c 200 "$IT_TMP/gu.curl.$MODE")" "$GU/error.log"
  elif [ "$got_up" != "$up_sum" ]; then
    tap_not_ok "$name [$MODE]" "the worker's sha256 of the upload differs: $got_up"
  elif [ "$got_big" != "$big_sum" ]; then
    tap_not_ok "$name [$MODE]" "download differs ($(stat -c %s "$IT_TMP/gu.big.$MODE") bytes)"
  else
    tap_ok "$name [$MODE]" "sha256 equal both ways"
  fi
  fabric_report "$name" "$fst"
  name="$what, wrk -c4 2 s, a connection per request"
  out=$IT_TMP/gu.wrk.$MODE
  "${PRE[@]}" timeout 60 wrk -t2 -c4 -d2s "http://127.0.0.1:$port/" >"$out" 2>&1
  wrk_verdict "$out" $?
  tap_result $? "$name [$MODE]" "$WRK_DETAIL" "$out" "$GU/error.log"
  stop_gunicorn
  log_clean "$what error log clean" "$GU/error.log" 'Traceback|\[CRITICAL\]|WORKER TIMEOUT|Bad file descriptor' \
    "no traceback, critical, worker timeout or EBADF"
  : >"$GU/error.log"
done
it_done
