#!/usr/bin/env bash
# instr-cost.sh: what the library adds to a connection that never upgrades,
# counted in instructions (valgrind's callgrind), plain vs LIB.  Counts do
# not move with this machine's noise the way requests/s do (a connection per
# request ran 0.75-0.98x plain in eight rounds of one run), so a change of a
# few hundred instructions shows.  The kernel's share is not counted:
# system calls the library adds show in `strace -c`, not here.
#
#   server  nginx, one process (master_process off) under callgrind, serving
#           N requests from a plain Python client, each on a new connection
#           with "Connection: close" (a 4 KiB file: the reply crosses the 4 KiB
#           upgrade threshold, as in the never-slower bench); counters zeroed
#           after a warm-up, dumped after the N (callgrind_control)
#   client  wrk -t1 -c1 with "Connection: close" under callgrind against a
#           plain nginx, run for S and 2S seconds: (instructions of the long
#           run - the short one) / (its requests - the short one's), which
#           leaves out process start
# Then the library's ten costliest functions (self, per request) on each
# side, and one JSON line.
#
# usage: bench/instr-cost.sh [-n REQUESTS] [-s SECONDS] [-k DIR] LIB
#   -k DIR  keep the callgrind files there (srv.p, srv.l, cli.p.S, cli.l.2S, ...),
#           for callgrind_annotate --inclusive=yes or kcachegrind
# Needs nginx, wrk, valgrind, python3; prints "# SKIP" and exits 77 without.
set -u
n=400 secs=3 keep=
while getopts n:s:k: o; do
  case $o in
  n) n=$OPTARG ;;
  s) secs=$OPTARG ;;
  k) keep=$OPTARG ;;
  *) echo "usage: $0 [-n REQUESTS] [-s SECONDS] [-k DIR] LIB" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: $0 [-n REQUESTS] [-s SECONDS] [-k DIR] LIB" >&2; exit 2; }
[ -z "$keep" ] || mkdir -p "$keep" || exit 1
lib=$(readlink -f "$1")
for p in nginx wrk valgrind callgrind_control callgrind_annotate python3; do
  command -v $p >/dev/null || { echo "# SKIP instr-cost: $p is not installed"; exit 77; }
done
tmp=$(mktemp -d /tmp/fabsock-instr.XXXXXX) && chmod 755 "$tmp" || exit 1
port=18296
cleanup() {
  [ -s "$tmp/nginx.pid" ] && kill "$(cat "$tmp/nginx.pid" 2>/dev/null)" 2>/dev/null
  pkill -f "nginx -c $tmp/" 2>/dev/null
  [ -z "$keep" ] || find "$tmp" -maxdepth 1 -type f \( -name 'srv.*' -o -name 'cli.*' \) \
    ! -name '*.log' ! -name '*.out' -exec cp {} "$keep/" \;
  rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -p "$tmp/www" "$tmp/logs"; head -c 4096 /dev/urandom >"$tmp/www/f4k"; chmod -R a+rX "$tmp/www"
conf() { # conf FILE SINGLE
  { [ "$2" = 1 ] && printf 'master_process off;\ndaemon off;\nworker_processes 1;\n' || printf 'worker_processes 1;\n'
    cat <<CONF
pid $tmp/nginx.pid;
error_log $tmp/logs/error.log;
events { worker_connections 768; }
http { sendfile on; tcp_nopush on; access_log off; server { listen 127.0.0.1:$port; root $tmp/www; } }
CONF
  } >"$1"
}
conf "$tmp/single.conf" 1
conf "$tmp/daemon.conf" 0
pre() { if [ "$1" = plain ]; then echo env; else echo "env LD_PRELOAD=$1"; fi; }
total() { callgrind_annotate --threshold=100 "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}'; }
# The library's functions, self cost, per request.  Those preload/layout.ld
# places before .text (the path of a short connection) callgrind names
# without their object ("[???]"): a named function there is ours (code
# without an object elsewhere, wrk's LuaJIT traces, has no name: 0x...).
top() { # top FILE REQUESTS
  callgrind_annotate --inclusive=no --threshold=100 "$1" 2>/dev/null |
    awk -v r="$2" '{f=$4; sub(/^.*:/, "", f)}
      /libfabsock\.so\]$/ || (/\[\?\?\?\]$/ && f !~ /^0x/) {c=$1; gsub(",", "", c); printf "    %7.0f  %s\n", c / r, f; k++}
      k == 10 {exit}'
}
up() { for _ in $(seq 100); do python3 -c "import socket; socket.create_connection(('127.0.0.1', $port)).close()" 2>/dev/null && return 0; sleep 0.2; done; return 1; }
requests() { # requests N: N connections, one GET each, read to EOF
  python3 - "$1" "$port" <<'PY'
import socket, sys
for _ in range(int(sys.argv[1])):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=60)
    s.sendall(b"GET /f4k HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    while s.recv(65536):
        pass
    s.close()
PY
}

server() { # server WHO -> instructions per request
  local out="$tmp/srv.$1"
  $(pre "$2") valgrind --tool=callgrind --log-file="$out.log" --callgrind-out-file="$out" \
    nginx -c "$tmp/single.conf" -p "$tmp" >/dev/null 2>&1 &
  local vg=$!
  up || { echo "instr-cost: nginx under valgrind did not come up" >&2; kill $vg; return 1; }
  # A server that never answers (a build whose epoll_wait fails under
  # valgrind) times out here instead of hanging the run.
  requests 50 || { echo "instr-cost: nginx under valgrind did not answer" >&2; kill $vg; return 1; }
  callgrind_control -z $vg >/dev/null 2>&1
  requests "$n" || { kill $vg; return 1; }
  callgrind_control -d $vg >/dev/null 2>&1
  kill $vg; wait $vg 2>/dev/null
  local f; f=$(ls "$out".* 2>/dev/null | sort -V | tail -n 1)
  echo "$(($(total "$f") / n))"
  [ "$2" = plain ] || top "$f" "$n" >"$tmp/top.server"
}

client() { # client WHO -> instructions per request
  local r1 r2 i1 i2 s
  rm -f "$tmp/nginx.pid"; nginx -c "$tmp/daemon.conf" -p "$tmp" || return 1
  up || return 1
  for s in "$secs" "$((2 * secs))"; do
    $(pre "$2") valgrind --tool=callgrind --log-file="$tmp/cli.$1.$s.log" --callgrind-out-file="$tmp/cli.$1.$s" \
      wrk -t1 -c1 -d"${s}s" -H 'Connection: close' "http://127.0.0.1:$port/f4k" >"$tmp/cli.$1.$s.out" 2>&1
  done
  kill "$(cat "$tmp/nginx.pid")"; sleep 0.3
  r1=$(awk '/requests in/ {print $1}' "$tmp/cli.$1.$secs.out"); r2=$(awk '/requests in/ {print $1}' "$tmp/cli.$1.$((2 * secs)).out")
  i1=$(total "$tmp/cli.$1.$secs"); i2=$(total "$tmp/cli.$1.$((2 * secs))")
  [ -n "$r1" ] && [ -n "$r2" ] && [ "$r2" -gt "$r1" ] || { echo "instr-cost: wrk gave no request count" >&2; return 1; }
  echo "$(((i2 - i1) / (r2 - r1)))"
  [ "$2" = plain ] || top "$tmp/cli.$1.$((2 * secs))" "$r2" >"$tmp/top.client"
}

sp=$(server p plain) && sl=$(server l "$lib") && cp=$(client p plain) && cl=$(client l "$lib") || exit 1
printf '%-8s %14s %14s %10s %7s\n' side "plain instr/req" "lib instr/req" added ratio
for side in server client; do
  if [ $side = server ]; then a=$sp b=$sl; else a=$cp b=$cl; fi
  printf '%-8s %14d %14d %+10d %6.2fx\n' $side "$a" "$b" $((b - a)) "$(echo "$b / $a" | bc -l)"
done
echo "# the library's costliest functions, instructions per request (self):"
echo "  server:"; cat "$tmp/top.server"
echo "  client:"; cat "$tmp/top.client"
echo "{\"requests\": $n, \"seconds\": $secs, \"server\": {\"plain\": $sp, \"lib\": $sl}, \"client\": {\"plain\": $cp, \"lib\": $cl}}"
