#!/usr/bin/env bash
# never-slower.sh: every workload the "never slower" issue names, plain TCP
# and both ends preloaded, side by side in one run, and one table of ratios
# against the issue's targets (a verdict per row; the script exits 0 either
# way: it measures, it does not judge the build).
#
# Rows (plain and LIB alternate, ROUNDS rounds, plain first in odd rounds
# and LIB first in even ones; a row's figure is the median of its per-round
# paired ratios, since on this machine a whole round's speed moves by tens
# of percent):
#   start      /bin/true in a shell loop (us per process start; target: at
#              most 100 us more than plain)
#   oneshot    a one-shot client's whole life: bench/oneshot (connect, an
#              HTTP GET of 4 KiB from that nginx, read to the end, exit), 300
#              in one shell (us per process; target as start: the reply
#              crosses the upgrade threshold, which a process that ends
#              within the delay must not pay for)
#   wrk-close  nginx as Debian ships it (servers-common.sh), wrk -t2 -c8 with
#              "Connection: close": a connection per request (requests/s)
#   wrk-c50    the same with keep-alive connections (the servers issue's 2x)
#   sendfile   nginx sending a 20 MiB file (sendfile on) to curl, 5 downloads
#              (a short transfer: the upgrade's delay and set-up weigh), and
#              a 200 MiB file, 3 downloads; beside them curl's own ceiling,
#              the same files through file:// (no server, no socket): curl
#              writing 16 KiB pieces to /dev/null bounds what any server
#              can give it (the table's note); and sendfile-ka, the 20 MiB
#              file downloaded again and again on one keep-alive connection
#              by wrk -t1 -c1 (what the server's sendfile path sustains)
#   pgbench-C  PostgreSQL, pgbench -S -C -c 8: a connection per transaction
#   pgbench    pgbench -S -c 8 -j 2 (the servers issue's 1.5x)
#   psql       a client process per query: psql -c 'select 1', 100 times
#   iperf3     iperf3 one stream, default writes and -l 1M (bits/s)
#   no-peer    a preloaded client against a plain server (no libfabsock on
#              the other end): fabsock-bench ping-pong 64 B p50 and p99,
#              plain client vs preloaded, three alternating runs a side in
#              each round, the median of each side's three (target: at most
#              3% more)
# then, each in one call:
#   stream / pingpong  fabsock-bench compare (its own alternating rounds):
#              stream at 4 KiB, 64 KiB, 1 MiB, 4 MiB writes, ping-pong 1 MiB
#              (p50 and p99 rows)
#   idle-mem   bench/idle-mem.sh: CONNS connections (-n, default 1000; 10000
#              with --big as well, 64 KiB each way): extra descriptors per
#              process, and memory per idle connection after a burst
#
# usage: bench/never-slower.sh [-r ROUNDS] [-s SECONDS] [-n CONNS] [--big] LIB
#   LIB a libfabsock.so; ROUNDS (default 4), SECONDS per timed run (default 5)
# Needs root (nginx's workers run as www-data, PostgreSQL as postgres); a
# workload whose programs are missing is reported as skipped.  The table goes
# to stdout, then the JSON of every row on the last line.
set -u
rounds=4 secs=5 conns=1000 big=0
while [ $# -gt 0 ]; do
  case $1 in
  -r) rounds=$2; shift 2 ;;
  -s) secs=$2; shift 2 ;;
  -n) conns=$2; shift 2 ;;
  --big) big=1; shift ;;
  -*) echo "usage: $0 [-r ROUNDS] [-s SECONDS] [-n CONNS] [--big] LIB" >&2; exit 2 ;;
  *) break ;;
  esac
done
[ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: $0 [-r ROUNDS] [-s SECONDS] [-n CONNS] [--big] LIB" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "never-slower: needs root (nginx workers as www-data, postgres as postgres)" >&2; exit 1; }
lib=$(readlink -f "$1")
here=$(cd "$(dirname "$0")" && pwd)
bench=$(dirname "$lib")/../bench/fabsock-bench
[ -x "$bench" ] || bench=$here/../build/bench/fabsock-bench
oneshot=$(dirname "$lib")/../bench/oneshot
[ -x "$oneshot" ] || oneshot=$here/../build/bench/oneshot
tmp=$(mktemp -d /tmp/fabsock-never-slower.XXXXXX) && chmod 755 "$tmp" || exit 1
NGINX_PORT=18296 PG_PORT=18297 IPERF_PORT=18298 NOPEER_PORT=18299
pre() { if [ "$1" = plain ]; then echo env; else echo "env LD_PRELOAD=$1"; fi; }
# shellcheck source=bench/servers-common.sh
. "$here/servers-common.sh"
[ $have_nginx = 1 ] && head -c $((20 << 20)) /dev/urandom >"$tmp/www/f20m" && chmod a+r "$tmp/www/f20m"
[ $have_nginx = 1 ] && for _ in 1 2 3 4 5 6 7 8 9 10; do cat "$tmp/www/f20m"; done >"$tmp/www/f200m" && chmod a+r "$tmp/www/f200m"
have_iperf=0; command -v iperf3 >/dev/null && have_iperf=1
have_curl=0; command -v curl >/dev/null && have_curl=$have_nginx
have_psql=0; [ $have_pg = 1 ] && [ -x "$PGBIN/psql" ] && have_psql=1
have_bench=0; [ -x "$bench" ] && have_bench=1
have_oneshot=0; [ -x "$oneshot" ] && have_oneshot=$have_nginx

put() { echo "$3" >>"$tmp/$1.$2"; } # put ROW SIDE VALUE
sides=(plain "$lib")
side_name() { if [ "$1" = plain ]; then echo plain; else echo lib; fi; }

runs_us() { # SIDE PROG [ARG...]: us per run of PROG, 300 of them in one shell under SIDE
  local s=$1; shift
  $(pre "$s") bash -c 't0=$EPOCHREALTIME; for i in $(seq 300); do "$@" || exit 1; done; t1=$EPOCHREALTIME;
    awk -v a="$t0" -v b="$t1" "BEGIN { printf \"%.1f\", (b - a) * 1e6 / 300 }"' runs_us "$@"
}
start_us() { runs_us "$1" /bin/true; }                            # us per process start
oneshot_us() { runs_us "$1" "$oneshot" "$NGINX_PORT" /f4k; }      # us per one-shot client (GET 4 KiB)
iperf_bps() { # SIDE [ARGS]: bits/s received, one stream
  local s=$1; shift
  $(pre "$s") iperf3 -s -1 -p $IPERF_PORT >/dev/null 2>&1 &
  local spid=$!
  sleep 0.3
  $(pre "$s") iperf3 -c 127.0.0.1 -p $IPERF_PORT -t "$secs" -J "$@" 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"])' 2>/dev/null
  wait $spid 2>/dev/null
}

for r in $(seq "$rounds"); do
  # Odd rounds plain first, even rounds LIB first: the second of two runs
  # is often slower whatever it runs (pgbench -C, plain after plain, here:
  # 0.89x, 1.01x, 0.93x of the first), and LIB always second counted that
  # against it.  An even ROUNDS cancels the order.
  order=("${sides[@]}"); [ $((r % 2)) = 0 ] && order=("${sides[1]}" "${sides[0]}")
  for s in "${order[@]}"; do
    n=$(side_name "$s"); line="round $r $n:"
    v=$(start_us "$s"); put start $n "$v"; line="$line start ${v}us"
    if [ $have_nginx = 1 ]; then
      rm -f "$tmp/nginx.pid"
      $(pre "$s") nginx -c "$tmp/nginx.conf" -p "$tmp" && sleep 0.5
      v=$($(pre "$s") wrk -t2 -c8 -d"${secs}"s -H 'Connection: close' http://127.0.0.1:$NGINX_PORT/f4k 2>/dev/null |
        awk '/Requests\/sec/ {print $2}')
      put wrkclose $n "${v:-nan}"; line="$line wrk-close ${v:-?}"
      v=$($(pre "$s") wrk -t2 -c50 -d"${secs}"s http://127.0.0.1:$NGINX_PORT/f4k 2>/dev/null | awk '/Requests\/sec/ {print $2}')
      put wrkc50 $n "${v:-nan}"; line="$line wrk-c50 ${v:-?}"
      if [ $have_oneshot = 1 ]; then
        v=$(oneshot_us "$s"); put oneshot $n "${v:-nan}"; line="$line oneshot ${v:-?}us"
      fi
      if [ $have_curl = 1 ]; then
        v=$(for _ in 1 2 3 4 5; do $(pre "$s") curl -s -o /dev/null -w '%{speed_download}\n' \
          http://127.0.0.1:$NGINX_PORT/f20m; done | median)
        put sendfile $n "${v:-nan}"; line="$line sendfile ${v:-?}B/s"
        v=$(for _ in 1 2 3; do $(pre "$s") curl -s -o /dev/null -w '%{speed_download}\n' \
          http://127.0.0.1:$NGINX_PORT/f200m; done | median)
        put sendfile200 $n "${v:-nan}"; line="$line sendfile-200M ${v:-?}B/s"
        # curl's own ceiling (plain curl, once a round): the same files
        # read from the page cache (file://, no server, no socket).
        if [ "$n" = plain ]; then
          v=$(for _ in 1 2 3 4 5; do curl -s -o /dev/null -w '%{speed_download}\n' "file://$tmp/www/f20m"; done | median)
          put curlfile plain "${v:-nan}"
          v=$(for _ in 1 2 3; do curl -s -o /dev/null -w '%{speed_download}\n' "file://$tmp/www/f200m"; done | median)
          put curlfile200 plain "${v:-nan}"
        fi
      fi
      # The server's sendfile path with a client that costs little per byte:
      # wrk, one keep-alive connection downloading the 20 MiB file again and
      # again (its 8 KiB reads are 2,560 receive calls a download on TCP).
      v=$($(pre "$s") wrk -t1 -c1 -d"${secs}"s http://127.0.0.1:$NGINX_PORT/f20m 2>/dev/null | awk '
        /Transfer\/sec/ { v = $2; m = 1
          if (v ~ /GB$/) m = 2^30; else if (v ~ /MB$/) m = 2^20; else if (v ~ /KB$/) m = 2^10
          sub(/[KMG]?B$/, "", v); printf "%.0f\n", v * m }')
      put sendfileka $n "${v:-nan}"; line="$line sendfile-ka ${v:-?}B/s"
      kill "$(cat "$tmp/nginx.pid")"; sleep 0.5
    fi
    if [ $have_pg = 1 ] && pg_start "$s"; then
      v=$($(pre "$s") "$PGBIN/pgbench" -h 127.0.0.1 -p $PG_PORT -U postgres -S -C -c 8 -j 2 -T "$secs" postgres \
        2>/dev/null | awk '/^tps/ {print $3}')
      put pgbenchC $n "${v:-nan}"; line="$line pgbench-C ${v:-?}"
      v=$($(pre "$s") "$PGBIN/pgbench" -h 127.0.0.1 -p $PG_PORT -U postgres -S -c 8 -j 2 -T "$secs" postgres \
        2>/dev/null | awk '/^tps/ {print $3}')
      put pgbench $n "${v:-nan}"; line="$line pgbench ${v:-?}"
      if [ $have_psql = 1 ]; then
        t0=$EPOCHREALTIME ok=0
        for _ in $(seq 100); do
          $(pre "$s") "$PGBIN/psql" -h 127.0.0.1 -p $PG_PORT -U postgres -Atc 'select 1' postgres 2>/dev/null |
            grep -qx 1 && ok=$((ok + 1))
        done
        v=$(awk -v a="$t0" -v b="$EPOCHREALTIME" -v k=$ok 'BEGIN { if (k == 100) printf "%.1f", 100 / (b - a); else print "nan" }')
        put psql $n "$v"; line="$line psql ${v}/s"
      fi
      pg_stop
    fi
    if [ $have_iperf = 1 ]; then
      v=$(iperf_bps "$s"); put iperf3 $n "${v:-nan}"; line="$line iperf3 ${v:-?}"
      v=$(iperf_bps "$s" -l 1M); put iperf3l1m $n "${v:-nan}"; line="$line iperf3-l1M ${v:-?}"
    fi
    echo "$line"
  done
  # no-peer: both sides against one plain server, in three alternating
  # runs each (a third of SECONDS, at least 1 s), each side's figure the
  # median of its three.  One run a side per round read 1.14x and 1.27x of
  # plain in two whole runs, where six alternating pairs of the row alone
  # read 1.00-1.04x (callgrind: the library adds about 600 instructions and
  # no system call to a round trip of about 28 us here).
  if [ $have_bench = 1 ]; then
    "$bench" server --port $NOPEER_PORT >/dev/null 2>&1 &
    bpid=$!
    sleep 0.3
    pt=$(awk -v s="$secs" 'BEGIN { t = s / 3; printf "%g", t < 1 ? 1 : t }')
    for _ in 1 2 3; do
      for s in "${order[@]}"; do
        n=$(side_name "$s")
        v=$($(pre "$s") "$bench" client 127.0.0.1:$NOPEER_PORT --tests pingpong --sizes 64 --pp-time "$pt" --json - \
          2>/dev/null | python3 -c 'import json,sys; r = json.load(sys.stdin)["results"][0]["result"]; print(r["p50_us"], r["p99_us"])' 2>/dev/null)
        read -r v50 v99 <<<"$v"
        echo "${v50:-nan}" >>"$tmp/np50.$n.$r"; echo "${v99:-nan}" >>"$tmp/np99.$n.$r"
      done
    done
    kill $bpid 2>/dev/null; wait $bpid 2>/dev/null
    for n in plain lib; do
      v50=$(median <"$tmp/np50.$n.$r"); v99=$(median <"$tmp/np99.$n.$r")
      put nopeer $n "${v50:-nan}"; put nopeer99 $n "${v99:-nan}"
      echo "round $r $n: no-peer-p50/p99 ${v50:-?}/${v99:-?}us (median of 3)"
    done
  fi
done

if [ $have_bench = 1 ]; then
  echo "fabsock-bench compare: stream 4k,64k,1m,4m, ping-pong 1m ($rounds rounds)"
  # Servers on CPU 0, clients on CPU 1 where there are two: unpinned, a
  # round whose two ends shared a CPU ran at a third of the others.
  cpus=(); [ "$(nproc)" -ge 2 ] && cpus=(--cpus "0,1")
  "$bench" compare --lib "$lib" --tests stream,pingpong --msg 4k,64k,1m,4m --sizes 1m --time 2 --rounds "$rounds" \
    --no-shm "${cpus[@]}" --json "$tmp/compare.json" >/dev/null 2>&1 || rm -f "$tmp/compare.json"
fi
idle_mem() { # CONNS BYTES: the two JSON lines of idle-mem.sh (plain, fabsock)
  IDLE_MEM=$(dirname "$bench")/idle-mem bash "$here/idle-mem.sh" "$lib" "$1" "$2" 3 2>/dev/null | tail -n 2
}
if [ -x "$(dirname "$bench")/idle-mem" ]; then
  echo "idle-mem: $conns connections"
  idle_mem "$conns" 614400 >"$tmp/idle.$conns"
  [ $big = 1 ] && echo "idle-mem: 10000 connections, 64 KiB each way" && idle_mem 10000 65536 >"$tmp/idle.10000"
fi

python3 - "$tmp" "$rounds" "$secs" <<'PY'
import glob, json, math, os, statistics, sys
tmp, rounds, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])

def col(row, side):
    try:
        with open(os.path.join(tmp, "%s.%s" % (row, side))) as f:
            return [float(x) for x in f.read().split()]
    except OSError:
        return []

def ok(x):
    return x is not None and not math.isnan(x)

def fmt(x):
    if not ok(x):
        return "-"
    return "%.3g" % x if abs(x) < 1000 else "%.0f" % x

rows = []
def add(name, what, unit, plain, lib, figure, target, good, note=""):
    verdict = "skipped" if not ok(figure) else ("meets" if good(figure) else "short")
    rows.append({"row": name, "what": what, "unit": unit, "plain": plain, "lib": lib, "figure": figure,
                 "target": target, "verdict": verdict, "note": note})

def paired(row, kind="ratio"):
    p, l = col(row, "plain"), col(row, "lib")
    pairs = [(a, b) for a, b in zip(p, l) if ok(a) and ok(b) and a > 0 and b > 0]
    med = lambda v: statistics.median(v) if v else float("nan")
    if kind == "diff":
        fig = med([b - a for a, b in pairs])
    else:
        fig = med([b / a for a, b in pairs])
    return med([a for a, _ in pairs]), med([b for _, b in pairs]), fig

pm, lm, f = paired("start", kind="diff")
add("start", "process start, /bin/true", "us", pm, lm, f, "<= +100 us", lambda x: x <= 100)
pm, lm, f = paired("oneshot", kind="diff")
add("oneshot", "a one-shot client process: connect, GET 4 KiB from nginx, exit", "us", pm, lm, f, "<= +100 us",
    lambda x: x <= 100)
for row, what, unit, tgt in (("wrkclose", "nginx, wrk -c8, a connection per request", "req/s", 1.0),
                             ("pgbenchC", "pgbench -S -C -c 8, a connection per transaction", "tps", 1.0),
                             ("psql", "psql, a client process per query", "queries/s", 1.0),
                             ("sendfile", "nginx sendfile, 20 MiB file to curl", "B/s", 2.0),
                             ("sendfile200", "nginx sendfile, 200 MiB file to curl", "B/s", 2.0),
                             ("sendfileka", "nginx sendfile, 20 MiB file, wrk -c1 keep-alive", "B/s", 2.0),
                             ("iperf3", "iperf3, default writes", "bit/s", 3.0),
                             ("iperf3l1m", "iperf3 -l 1M", "bit/s", 3.0),
                             ("wrkc50", "nginx, wrk -c50 keep-alive (servers issue)", "req/s", 2.0),
                             ("pgbench", "pgbench -S -c 8 (servers issue)", "tps", 1.5)):
    pm, lm, f = paired(row)
    note = ""
    ceil = {"sendfile": "curlfile", "sendfile200": "curlfile200"}.get(row)
    if ceil and col(ceil, "plain") and ok(pm) and pm > 0:
        c = statistics.median(col(ceil, "plain"))
        note = ("curl itself reads the same file from the page cache (file://) at %s B/s, %.2fx plain's "
                "download: the most any server could give it" % (fmt(c), c / pm))
    add(row, what, unit, pm, lm, f, ">= %.1fx" % tgt, lambda x, t=tgt: x >= t, note)
pm, lm, f = paired("nopeer")
add("no-peer", "peer without libfabsock, ping-pong 64 B p50 (lib/plain)", "us", pm, lm, f, "<= 1.03x",
    lambda x: x <= 1.03)
pm, lm, f = paired("nopeer99")
add("no-peer-p99", "peer without libfabsock, ping-pong 64 B p99 (lib/plain)", "us", pm, lm, f, "<= 1.03x",
    lambda x: x <= 1.03)

try:
    with open(os.path.join(tmp, "compare.json")) as fh:
        cmp_ = json.load(fh)["results"]
except (OSError, ValueError, KeyError):
    cmp_ = []
for r in cmp_:
    pl, pr = r.get("plain", {}), r.get("preloaded", {})
    if r["test"] == "stream":
        add("stream-%dk" % (r["size"] // 1024), "stream, %d KiB writes" % (r["size"] // 1024), "GB/s",
            pl.get("gbps"), pr.get("gbps"), r.get("speedup", float("nan")), ">= 3.0x", lambda x: x >= 3)
    elif r["test"] == "pingpong":
        for q in ("50", "99"):
            add("pingpong-%dk%s" % (r["size"] // 1024, "" if q == "50" else "-p99"),
                "ping-pong %d KiB, p%s (plain/lib)" % (r["size"] // 1024, q), "us", pl.get("p%s_us" % q),
                pr.get("p%s_us" % q), r.get("speedup_p" + q, float("nan")), ">= 3.0x", lambda x: x >= 3)

for path in sorted(glob.glob(os.path.join(tmp, "idle.*"))):
    try:
        with open(path) as fh:
            p, f = [json.loads(x) for x in fh.read().split("\n") if x.strip()][:2]
    except ValueError:
        continue
    n = p["conns"]
    idle_p, idle_f = p["points"][-1], f["points"][-1]
    extra = max(idle_f["client_fds"] - idle_p["client_fds"], idle_f["server_fds"] - idle_p["server_fds"])
    add("fds-%d" % n, "%d connections: extra fds per process (most of the two)" % n, "fds",
        max(idle_p["client_fds"], idle_p["server_fds"]), max(idle_f["client_fds"], idle_f["server_fds"]),
        float(extra), "<= 2", lambda x: x <= 2)
    kb = max(idle_f["client_rss_kb"], idle_f["server_rss_kb"]) / n
    add("idle-%d" % n, "%d connections: RSS per idle connection after the burst (most of the two)" % n, "KB",
        max(idle_p["client_rss_kb"], idle_p["server_rss_kb"]) / n, kb, kb, "<= 16 KB", lambda x: x <= 16)

print("\n%-12s %-62s %12s %12s %10s %12s %s" % ("row", "workload", "plain", "libfabsock", "figure", "target", "verdict"))
for r in rows:
    print("%-12s %-62s %12s %12s %10s %12s %s" % (r["row"], r["what"] + " (" + r["unit"] + ")", fmt(r["plain"]),
          fmt(r["lib"]), fmt(r["figure"]), r["target"], r["verdict"]))
for r in rows:
    if r["note"]:
        print("  %s: %s" % (r["row"], r["note"]))
short = [r["row"] for r in rows if r["verdict"] == "short"]
print("%d rows meet their target, %d short%s, %d skipped" % (sum(r["verdict"] == "meets" for r in rows), len(short),
      (" (" + ", ".join(short) + ")") if short else "", sum(r["verdict"] == "skipped" for r in rows)))
clean = lambda v: None if isinstance(v, float) and math.isnan(v) else v
print(json.dumps({"rounds": rounds, "seconds": secs,
                  "rows": [{k: clean(v) for k, v in r.items()} for r in rows]}))
PY
