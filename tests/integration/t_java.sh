#!/bin/bash
# t_java: a Java server and client with the JDK's default sockets
# (tests/java/FsJava.java).  The JDK opens AF_INET6 dual-stack sockets, so
# both ends of a connection to 127.0.0.1 are IPv4-mapped (::ffff:127.0.0.1):
# the case a miscompiled address comparison once kept off the fabric.
#   - 64 B ping-pong, every echo checked, held open halfway for the fabric
#     check (shm when both ends are preloaded);
#   - 64 MiB in 64 KiB writes, half-closed, the server's SHA-256 of what it
#     read equal to the client's, held open halfway for the fabric check.
. "$(dirname "$0")/lib.sh"
require_cmd java javac
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-60}

JCP=$IT_TMP/java
mkdir -p "$JCP"
if ! javac -d "$JCP" "$top_srcdir/tests/java/FsJava.java" >"$IT_TMP/javac.log" 2>&1; then
  echo "Bail out! javac failed: $(head -c 300 "$IT_TMP/javac.log")"
  exit 1
fi
# The JVM's own start-up threads and GC are not what this test is about.
JAVA=(java -Xshare:auto -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$JCP" FsJava)

# java_case NAME MUST_SAY FsJava-CLIENT-ARGS...: one held client run; its
# result line (the first word of the client command) must contain MUST_SAY.
java_case() {
  local name=$1 must=$2 out rc detail
  shift 2
  hold_args
  out=$IT_TMP/java-$1.$MODE.out
  run_held_client "java$1" "$port" "$out" "${JAVA[@]}" "$@" ${HOLD_FILE:+"$HOLD_FILE"}
  rc=$?
  detail=$(grep -m1 "^$1" "$out")
  case "$detail" in *"$must"*) ;; *) rc=1; detail="${detail:-no result: $(tail -n 2 "$out" | tr '\n' ' ')}" ;; esac
  server_check || { rc=1; detail="$SRV_DETAIL; $detail"; }
  tap_result $rc "$name [$MODE]" "$detail" "$out" "$SERVER_LOG"
  fabric_report "$name" "$FABRIC_STATUS"
}

for MODE in $(it_modes); do
  pf=$IT_TMP/java.$MODE.port
  rm -f "$pf"
  start_server fsjava "${JAVA[@]}" server "$pf"
  if ! wait_file "$pf" "$SERVER_PID" 30; then
    server_status; tap_not_ok "java server [$MODE]" "FsJava server did not start ($SRV_STATUS)" "$SERVER_LOG"
    stop_server; continue
  fi
  port=$(cat "$pf")

  java_case "java dual-stack 64 B ping-pong, 4000 round trips" "pingpong" pingpong "$port" 4000 64
  java_case "java dual-stack 64 MiB in 64 KiB writes, half-close, sha256" "sha256 ok" sink "$port" 64 65536
  stop_server
done
it_done
