#!/usr/bin/env bash
# idle-mem.sh: memory and descriptors per connection, plain TCP and both
# ends preloaded, side by side (bench/idle-mem; docs/design.md "Idle rings
# give their pages back").
#
# usage: bench/idle-mem.sh [LIB] [CONNS] [BYTES] [IDLE_S]
#   LIB     libfabsock.so (default: $FABSOCK_LIB, else <source>/build/.libs/libfabsock.so)
#   CONNS   connections (default 1000); BYTES each way on each (default 614400);
#   IDLE_S  seconds idle before the last look (default 3)
# Prints, per point (connected, after the burst, idle), the growth of each
# process (client, server) and of the host's Shmem, per connection, and the
# JSON of both runs on the last two lines.
set -u
here=$(cd "$(dirname "$0")" && pwd)
lib=${1:-${FABSOCK_LIB:-$here/../build/.libs/libfabsock.so}}
n=${2:-1000} bytes=${3:-614400} idle=${4:-3}
prog=${IDLE_MEM:-$here/../build/bench/idle-mem}
[ -x "$prog" ] || prog=$(dirname "$lib")/../bench/idle-mem
[ -f "$lib" ] && [ -x "$prog" ] || { echo "idle-mem: need $lib and bench/idle-mem (make)" >&2; exit 1; }
plain=$("$prog" -n "$n" -b "$bytes" -i "$idle" --json) || exit 1
fab=$(LD_PRELOAD=$lib "$prog" -n "$n" -b "$bytes" -i "$idle" --json) || exit 1
python3 - "$plain" "$fab" <<'PY'
import json, sys
p, f = json.loads(sys.argv[1]), json.loads(sys.argv[2])
n = p["conns"]
print("%d connections, %d bytes each way on each, idle %d s: growth per connection" % (n, p["bytes"], p["idle_s"]))
print("%-12s %-9s %11s %11s %8s %11s %11s %8s %11s" % ("point", "side", "client RSS", "client shm", "fds",
      "server RSS", "server shm", "fds", "host Shmem"))
for i, pt in enumerate(p["points"]):
    for name, run in (("plain", p), ("fabsock", f)):
        q = run["points"][i]
        print("%-12s %-9s %8.1f KB %8.1f KB %8.2f %8.1f KB %8.1f KB %8.2f %8.1f KB" % (pt["point"], name,
              q["client_rss_kb"] / n, q["client_shmem_kb"] / n, q["client_fds"] / n,
              q["server_rss_kb"] / n, q["server_shmem_kb"] / n, q["server_fds"] / n, q["host_shmem_kb"] / n))
PY
echo "$plain"
echo "$fab"
