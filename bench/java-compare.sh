#!/usr/bin/env bash
# java-compare.sh: a Java server and client with the JDK's default sockets
# (dual-stack, IPv4-mapped: tests/java/FsJava.java), plain TCP and both ends
# preloaded, in alternating rounds on this machine.  Prints each round and
# the medians: 64 B ping-pong p50/p99 (us), and one-way streams of 2 GiB in
# 64 KiB and in 1 MiB writes (MB/s), with the speed-ups.
#
# usage: bench/java-compare.sh [LIB] [ROUNDS]
#   LIB     libfabsock.so (default: $FABSOCK_LIB, else <source>/build/.libs/libfabsock.so)
#   ROUNDS  rounds per side (default 3)
# Needs java and javac (openjdk-17-jdk-headless).
set -u
here=$(cd "$(dirname "$0")" && pwd)
lib=${1:-${FABSOCK_LIB:-$here/../build/.libs/libfabsock.so}}
rounds=${2:-3}
[ -f "$lib" ] || { echo "java-compare: no library at $lib" >&2; exit 1; }
command -v javac >/dev/null && command -v java >/dev/null || { echo "java-compare: java/javac not installed" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'kill $srv 2>/dev/null; rm -rf "$tmp"' EXIT
srv=
javac -d "$tmp" "$here/../tests/java/FsJava.java" || exit 1
J=(java -XX:+UseSerialGC -cp "$tmp" FsJava)
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

for r in $(seq "$rounds"); do
  for side in plain fabsock; do
    pre=(env)
    [ "$side" = fabsock ] && pre=(env "LD_PRELOAD=$lib")
    rm -f "$tmp/port"
    "${pre[@]}" "${J[@]}" server "$tmp/port" 2>/dev/null &
    srv=$!
    for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
    port=$(cat "$tmp/port")
    pp=$("${pre[@]}" "${J[@]}" pingpong "$port" 40000 64)
    s64=$("${pre[@]}" "${J[@]}" stream "$port" 2048 65536)
    s1m=$("${pre[@]}" "${J[@]}" stream "$port" 2048 1048576)
    kill "$srv"; wait "$srv" 2>/dev/null; srv=
    echo "round $r $side: $pp | $s64 | $s1m"
    echo "$pp" | awk '{print $7}' >>"$tmp/$side.p50"
    echo "$pp" | awk '{print $10}' >>"$tmp/$side.p99"
    echo "$s64" | awk '{print $8}' >>"$tmp/$side.s64"
    echo "$s1m" | awk '{print $8}' >>"$tmp/$side.s1m"
  done
done
printf '\n%-28s %12s %12s %9s\n' "median of $rounds rounds" "plain TCP" "libfabsock" "speed-up"
for k in p50 p99 s64 s1m; do
  a=$(median <"$tmp/plain.$k") b=$(median <"$tmp/fabsock.$k")
  case $k in
    p50) n="ping-pong 64 B p50 (us)"; x=$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.1fx", a/b}') ;;
    p99) n="ping-pong 64 B p99 (us)"; x=$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.1fx", a/b}') ;;
    s64) n="stream 64 KiB writes (MB/s)"; x=$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.1fx", b/a}') ;;
    s1m) n="stream 1 MiB writes (MB/s)"; x=$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.1fx", b/a}') ;;
  esac
  printf '%-28s %12s %12s %9s\n' "$n" "$a" "$b" "$x"
done
