#!/bin/bash
# Runs inside the Soft-RoCE VM (rdma-compare.sh boots it).  On one rxe device, over 10.0.2.15:
#   kernel TCP, rsocket's preload, libfabsock's preload: sockperf ping-pong (64 B; p50, p99),
#     iperf3 (one stream; MB/s), and fabsock-bench (ping-pong 64 B, stream 64 KiB) when built;
#   raw verbs: perftest ib_send_lat (64 B) and ib_write_bw (-s 65536).
# Prints a table, then the same numbers as JSON between "--- json" and "--- end" lines.
# sockperf and ib_send_lat report half the round trip; fabsock-bench reports what it reports
# (see its documentation): compare within a column only.
#
# Environment: FABSOCK_LIB, FABSOCK_BIN (libfabsock column; skipped without them),
#   FABSOCK_BENCH_PROG (fabsock-bench; its column is skipped without it),
#   FABSOCK_BENCH_TRANSPORT (FABSOCK_TRANSPORT for the libfabsock column, default rdma: both
#   processes are on one host, where "auto" would pick shm), SOCKPERF_TIME (5), IPERF3_TIME (3),
#   FABSOCK_BENCH_HOST_LOAD (this machine's load average when the VM started, for the record).
. "$(cd "$(dirname "$0")/../../tests/vm" && pwd -P)/lib.sh"

export SOCKPERF_TIME=${SOCKPERF_TIME:-5} IPERF3_TIME=${IPERF3_TIME:-3}
transport=${FABSOCK_BENCH_TRANSPORT:-rdma}
fb=${FABSOCK_BENCH_PROG:-}
[ -n "$fb" ] && [ -x "$fb" ] || fb=
RS_TIMEOUT=20

num() { [ -n "$1" ] && echo "$1" || echo null; }        # JSON number or null
str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }

# probe: what fabric libfabsock's connections were really on (sampled mid-run).
fabrics_seen=()
probe_fabric() {
  sleep 1
  fabsock_stat "$T_WORK/fab-$1" --peer "$VM_IP:$1" && [ -s "$T_WORK/fab-$1" ] &&
    fabrics_seen+=("$(fabrics "$T_WORK/fab-$1")")
}

# rxe_sent: packets rxe0 has sent so far (empty without the counter).
rxe_sent() {
  rdma statistic show link rxe0/1 2> /dev/null | tr ' ' '\n' | awk 'p { print; exit } $1 == "sent_pkts" { p = 1 }'
}

# fabsock_bench_run LABEL ENV PORT TIMEOUT [NEED_RXE]: sets out, fb_p50 fb_p99 fb_mbps.  With
# NEED_RXE, a run during which rxe0 sent no packet fails: rsocket's preload silently hands any
# socket it cannot take (e.g. SOCK_STREAM|SOCK_CLOEXEC, accept4) to the kernel, and those
# figures are kernel TCP's, not rsocket's.
fabsock_bench_run() {
  local label=$1 envs=$2 port=$3 to=$4 need_rxe=${5:-} log=$T_WORK/fb-$1 p0 p1
  fb_p50= fb_p99= fb_mbps=
  start_server "fb-$label" "$envs" "$port" "$fb" server --bind "$VM_IP" --port "$port" || return
  p0=$(rxe_sent)
  client "$log.out" "$to" "$port" "$envs" "$fb" client "$VM_IP:$port" --tests pingpong,stream \
    --sizes 64 --msg 64k --pp-time 2 --time 2 --json "$log.json"
  p1=$(rxe_sent)
  outcome $st "$log.out" "$to"
  if [ $st = 0 ] && [ -n "$need_rxe" ] && [ -n "$p0" ] && [ "$p0" = "$p1" ]; then
    st=1 out="fails (no rxe packets: it ran on kernel TCP)"
  fi
  if [ $st = 0 ]; then
    read -r fb_p50 fb_p99 fb_mbps <<< "$("$PYTHON" -c '
import json, sys
d = json.load(open(sys.argv[1]))
r = {x["test"]: x["result"] for x in d["results"] if x["result"].get("ok")}
pp, st = r.get("pingpong", {}), r.get("stream", {})
print(pp.get("p50_us", "-"), pp.get("p99_us", "-"),
      round(st["gbps"] * 1000, 1) if "gbps" in st else "-")' "$log.json" 2> /dev/null)"
    [ -n "$fb_p50" ] && [ "$fb_p50" != - ] || out="fails (no result in its JSON)"
    [ "$fb_p50" != - ] || fb_p50=
    [ "$fb_p99" != - ] || fb_p99=
    [ "$fb_mbps" != - ] || fb_mbps=
  else
    t_diag "fabsock-bench $label: $(tail -n 2 "$log.out")"
  fi
  stop "$srv"
}

# measure NAME ENV PORTBASE TIMEOUT FABRIC: one row (FABRIC "stat": ask fabsock stat).
rows_txt=() rows_json=()
fmt='%-22s %-16s %-30s %-20s %s'
cell() { if [ "$1" = works ]; then printf '%s' "$2"; else printf '%s' "$1"; fi; }
measure() {
  local name=$1 envs=$2 base=$3 to=$4 fabric=$5 sp ip fbs
  fabrics_seen=()
  echo "# $name: sockperf" >&2
  sockperf_run "$name" "$envs" "$base" "$to"
  sp=$out; local p50=$sp_p50 p99=$sp_p99 avg=$sp_avg
  echo "# $name: iperf3" >&2
  iperf3_run "$name" "$envs" $((base + 1)) "$to"
  ip=$out; local mbps=$ip_mbps
  fbs="not built" ; fb_p50= fb_p99= fb_mbps=
  if [ -n "$fb" ]; then
    echo "# $name: fabsock-bench" >&2
    fabsock_bench_run "$name" "$envs" $((base + 2)) "$to" "$([ "$fabric" = "rdma (rsocket)" ] && echo 1)"
    fbs=$out
  fi
  if [ "$fabric" = stat ]; then
    fabric=$(printf '%s\n' "${fabrics_seen[@]}" | tr ',' '\n' | sed '/^$/d' | sort -u | paste -sd, -)
    fabric="${fabric:-unknown (fabsock stat listed nothing)}"
  fi
  rows_txt+=("$(printf "$fmt" "$name" "$fabric" \
    "$(cell "$sp" "${p50} / ${p99}")" "$(cell "$ip" "$mbps")" \
    "$(cell "$fbs" "${fb_p50} / ${fb_p99} , ${fb_mbps}")")")
  rows_json+=("{\"transport\":$(str "$name"),\"fabric\":$(str "$fabric"),\
\"sockperf\":{\"status\":$(str "$sp"),\"p50_us\":$(num "$p50"),\"p99_us\":$(num "$p99"),\"avg_us\":$(num "$avg")},\
\"iperf3\":{\"status\":$(str "$ip"),\"mbytes_per_s\":$(num "$mbps")},\
\"fabsock_bench\":{\"status\":$(str "$fbs"),\"p50_us\":$(num "$fb_p50"),\"p99_us\":$(num "$fb_p99"),\"mbytes_per_s\":$(num "$fb_mbps")}}")
}

measure "kernel TCP" "" 21000 60 tcp
if [ -f "$RSOCKET_LIB" ]; then measure "rsocket preload" "LD_PRELOAD=$RSOCKET_LIB" 21010 $RS_TIMEOUT "rdma (rsocket)"; fi
if have_fabsock; then
  probe=probe_fabric
  measure "libfabsock preload" "LD_PRELOAD=$FABSOCK_LIB FABSOCK_TRANSPORT=$transport" 21020 60 stat
  probe=
fi

# ---- raw verbs (perftest), the floor --------------------------------------------------------------
echo "# raw verbs: ib_send_lat, ib_write_bw" >&2
bg "$T_WORK/lat-s" timeout 120 ib_send_lat -d rxe0 -x 1 -s 64 -n 5000 -p 18515
s=$bg_pid
wait_listen 18515 30 "$s"
timeout 120 ib_send_lat -d rxe0 -x 1 -s 64 -n 5000 -p 18515 "$VM_IP" > "$T_WORK/lat" 2>&1
read -r v_p50 v_avg v_p99 <<< "$(awk '$1 == 64 && $2 == 5000 { print $5, $6, $8 }' "$T_WORK/lat")"
stop "$s"
bg "$T_WORK/bw-s" timeout 120 ib_write_bw -d rxe0 -x 1 -s 65536 -n 1000 -p 18516
s=$bg_pid
wait_listen 18516 30 "$s"
timeout 120 ib_write_bw -d rxe0 -x 1 -s 65536 -n 1000 -p 18516 "$VM_IP" > "$T_WORK/bw" 2>&1
v_bw=$(awk '$1 == 65536 && $2 == 1000 { print $4 }' "$T_WORK/bw")
stop "$s"
rows_txt+=("$(printf "$fmt" "raw verbs (perftest)" rdma \
  "${v_p50:-fail} / ${v_p99:-fail} (ib_send_lat)" "${v_bw:-fail} (ib_write_bw)" "-")")
rows_json+=("{\"transport\":\"raw verbs (perftest)\",\"fabric\":\"rdma\",\
\"ib_send_lat\":{\"size\":64,\"typical_us\":$(num "$v_p50"),\"p99_us\":$(num "$v_p99"),\"avg_us\":$(num "$v_avg")},\
\"ib_write_bw\":{\"size\":65536,\"avg_mbytes_per_s\":$(num "$v_bw")}}")

# ---- report -----------------------------------------------------------------------------------------
echo
echo "Soft-RoCE (rxe0) in a TCG VM, $(nproc) vCPUs, kernel $(uname -r); host load ${FABSOCK_BENCH_HOST_LOAD:-?}"
echo "Under emulation absolute numbers mean little: compare rows of this run only."
{ printf "$fmt\n" transport fabric "sockperf 64 B p50 / p99 us" "iperf3 MB/s" \
    "fabsock-bench 64 B p50 / p99 us , 64 KiB MB/s"
  printf '%s\n' "${rows_txt[@]}"; } | tee "$T_WORK/table"
echo "--- json"
printf '{"tool":"rdma-compare","format":1,"kernel":%s,"vcpus":%s,"accel":"tcg","device":"rxe0",' \
  "$(str "$(uname -r)")" "$(nproc)"
printf '"host_load":%s,"sockperf_time_s":%s,"iperf3_time_s":%s,"libfabsock_transport":%s,"rows":[' \
  "$(str "${FABSOCK_BENCH_HOST_LOAD:-}")" "$SOCKPERF_TIME" "$IPERF3_TIME" "$(str "$transport")"
(IFS=,; printf '%s' "${rows_json[*]}")
echo "]}"
echo "--- end"
