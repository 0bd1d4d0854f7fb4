#!/bin/bash
# Runs inside the Soft-RoCE VM (rdma-compare.sh boots it).  On one rxe device, over 10.0.2.15:
#   kernel TCP, rsocket's preload, libfabsock's preload: fabsock-bench (ping-pong 64 B, stream
#     64 KiB) when built, first, in FB_ROUNDS (7) rounds that alternate the three (each figure
#     is the median of its rounds: under emulation the machine's speed drifts within minutes,
#     and a row measured after another's failures and hangs would not be side by side); then
#     sockperf ping-pong (64 B; p50, p99) and iperf3 (one stream; MB/s);
#   raw verbs: perftest ib_send_lat (64 B) and ib_write_bw (-s 65536).
# Prints a table, then the same numbers as JSON between "--- json" and "--- end" lines.
# sockperf and ib_send_lat report half the round trip; fabsock-bench reports what it reports
# (see its documentation): compare within a column only.
#
# Environment: FABSOCK_LIB, FABSOCK_BIN (libfabsock column; skipped without them),
#   FABSOCK_BENCH_PROG (fabsock-bench; its column is skipped without it),
#   FB_ROUNDS (fabsock-bench rounds, 7),
#   FABSOCK_BENCH_TRANSPORT (FABSOCK_TRANSPORT for the libfabsock column, default rdma: both
#   processes are on one host, where "auto" would pick shm), SOCKPERF_TIME (5), IPERF3_TIME (3),
#   FABSOCK_BENCH_HOST_LOAD (this machine's load average when the VM started, for the record),
#   FABSOCK_LIB_B (another build of libfabsock.so: one more column, "build B", measured the same
#   way in the same rounds: an A/B of two builds side by side).
. "$(cd "$(dirname "$0")/../../tests/vm" && pwd -P)/lib.sh"

export SOCKPERF_TIME=${SOCKPERF_TIME:-5} IPERF3_TIME=${IPERF3_TIME:-3}
transport=${FABSOCK_BENCH_TRANSPORT:-rdma}
fb=${FABSOCK_BENCH_PROG:-}
[ -n "$fb" ] && [ -x "$fb" ] || fb=
RS_TIMEOUT=20

num() { [ -n "$1" ] && echo "$1" || echo null; }        # JSON number or null
str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }

# probe: what fabric libfabsock's connections were really on (sampled mid-run).  Only the
# snapshot is taken mid-run; reading it (python, slow under emulation) waits for the end of
# the measurement, which it would otherwise share the two vCPUs with (seen: fabsock-bench's
# ping-pong p99 at 1-1.3 ms in this row alone, 0.2-0.3 ms without the probe).
probed=()
probe_fabric() {
  sleep 1
  timeout 20 "$FABSOCK_BIN" stat --json > "$T_WORK/fab-$1.json" 2> "$T_WORK/fab-$1.err" && probed+=("$1")
}
# probed_fabrics: the fabrics the snapshots taken since the last call show, comma-separated.
probed_fabrics() {
  local p
  for p in "${probed[@]}"; do
    "$PYTHON" "$VMTOOL" stat --peer "$VM_IP:$p" < "$T_WORK/fab-$p.json" > "$T_WORK/fab-$p" &&
      [ -s "$T_WORK/fab-$p" ] && fabrics "$T_WORK/fab-$p"
  done | tr ',' '\n' | sed '/^$/d' | sort -u | paste -sd, -
  probed=()
}

# rxe_sent: packets rxe0 has sent so far (empty without the counter).
rxe_sent() {
  rdma statistic show link rxe0/1 2> /dev/null | tr ' ' '\n' | awk 'p { print; exit } $1 == "sent_pkts" { p = 1 }'
}

# fabsock_bench_run LABEL ENV PORT TIMEOUT [NEED_RXE]: sets out, fb_p50 fb_p99 fb_mbps.  With
# NEED_RXE, a run during which rxe0 sent no packet fails: rsocket's preload silently hands any
# socket it cannot take (e.g. SOCK_STREAM|SOCK_CLOEXEC, accept4) to the kernel, and those
# figures are kernel TCP's, not rsocket's; for libfabsock it is the check that the run was on
# rdma (a mid-run `fabsock stat` would share the two vCPUs with the measurement).
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

# The transports: name, environment, port base, client timeout, fabric ("stat": ask fabsock stat).
T_NAMES=("kernel TCP") T_ENVS=("") T_BASES=(21000) T_TOS=(60) T_FABS=(tcp)
if [ -f "$RSOCKET_LIB" ]; then
  T_NAMES+=("rsocket preload") T_ENVS+=("LD_PRELOAD=$RSOCKET_LIB") T_BASES+=(21010) T_TOS+=($RS_TIMEOUT)
  T_FABS+=("rdma (rsocket)")
fi
if have_fabsock; then
  T_NAMES+=("libfabsock preload") T_ENVS+=("LD_PRELOAD=$FABSOCK_LIB FABSOCK_TRANSPORT=$transport")
  T_BASES+=(21020) T_TOS+=(60) T_FABS+=(stat)
  # Another build of the library beside it, for an A/B in one run (FABSOCK_LIB_B).
  if [ -n "${FABSOCK_LIB_B:-}" ] && [ -f "$FABSOCK_LIB_B" ]; then
    T_NAMES+=("build B preload") T_ENVS+=("LD_PRELOAD=$FABSOCK_LIB_B FABSOCK_TRANSPORT=$transport")
    T_BASES+=(21030) T_TOS+=(60) T_FABS+=(stat)
  fi
fi

# fabsock-bench first, the transports alternating round by round: FB_STATUS[i], and the
# medians FB_P50[i] FB_P99[i] FB_MBPS[i] with every round's figures in FB_ROUNDS_TXT[i].
FB_ROUNDS=${FB_ROUNDS:-7}
FB_STATUS=() FB_P50=() FB_P99=() FB_MBPS=() FB_ROUNDS_TXT=()
median() { printf '%s\n' "$@" | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
if [ -n "$fb" ]; then
  declare -A fb_a50 fb_a99 fb_amb
  for ((r = 0; r < FB_ROUNDS; r++)); do
    for i in "${!T_NAMES[@]}"; do
      [ "${FB_STATUS[i]:-works}" = works ] || continue # one failure ends a transport's rounds
      echo "# ${T_NAMES[i]}: fabsock-bench, round $((r + 1)) of $FB_ROUNDS" >&2
      fabsock_bench_run "${T_NAMES[i]}" "${T_ENVS[i]}" $((22000 + 100 * i + r)) "${T_TOS[i]}" \
        "$([ "${T_FABS[i]}" != tcp ] && echo 1)"
      FB_STATUS[i]=$out
      echo "#   $out: p50 ${fb_p50:--} us, p99 ${fb_p99:--} us, ${fb_mbps:--} MB/s" >&2
      [ "$out" = works ] || continue
      fb_a50[$i]+=" $fb_p50" fb_a99[$i]+=" $fb_p99" fb_amb[$i]+=" $fb_mbps"
    done
  done
  for i in "${!T_NAMES[@]}"; do
    # shellcheck disable=SC2086
    FB_P50[i]=$(median ${fb_a50[$i]:-}) FB_P99[i]=$(median ${fb_a99[$i]:-}) FB_MBPS[i]=$(median ${fb_amb[$i]:-})
    FB_ROUNDS_TXT[i]="p50${fb_a50[$i]:-}; p99${fb_a99[$i]:-}; MB/s${fb_amb[$i]:-}"
  done
  # Round by round, libfabsock against rsocket (the two ran back to back): the medians alone
  # hide whether one is ahead in most rounds or in a few by much.
  rs_i= fs_i=
  for i in "${!T_NAMES[@]}"; do
    case ${T_NAMES[i]} in rsocket*) rs_i=$i ;; libfabsock*) fs_i=$i ;; esac
  done
  if [ -n "$rs_i" ] && [ -n "$fs_i" ]; then
    read -ra rs50 <<< "${fb_a50[$rs_i]:-}"; read -ra fs50 <<< "${fb_a50[$fs_i]:-}"
    read -ra rs99 <<< "${fb_a99[$rs_i]:-}"; read -ra fs99 <<< "${fb_a99[$fs_i]:-}"
    FB_PAIRS=${#rs50[@]}
    [ ${#fs50[@]} -lt "$FB_PAIRS" ] && FB_PAIRS=${#fs50[@]}
    FB_WON50=0 FB_WON99=0
    for ((j = 0; j < FB_PAIRS; j++)); do
      awk -v a="${fs50[j]}" -v b="${rs50[j]}" 'BEGIN { exit !(a < b) }' && FB_WON50=$((FB_WON50 + 1))
      awk -v a="${fs99[j]}" -v b="${rs99[j]}" 'BEGIN { exit !(a < b) }' && FB_WON99=$((FB_WON99 + 1))
    done
  fi
fi

# measure I: transport I's row (sockperf and iperf3 now; fabsock-bench from above).
rows_txt=() rows_json=()
fmt='%-22s %-16s %-30s %-20s %s'
cell() { if [ "$1" = works ]; then printf '%s' "$2"; else printf '%s' "$1"; fi; }
measure() {
  local i=$1 name=${T_NAMES[$1]} envs=${T_ENVS[$1]} base=${T_BASES[$1]} to=${T_TOS[$1]} fabric=${T_FABS[$1]} sp ip fbs
  probed=()
  [ "$fabric" = stat ] && probe=probe_fabric
  echo "# $name: sockperf" >&2
  sockperf_run "$name" "$envs" "$base" "$to"
  sp=$out; local p50=$sp_p50 p99=$sp_p99 avg=$sp_avg
  echo "# $name: iperf3" >&2
  iperf3_run "$name" "$envs" $((base + 1)) "$to"
  ip=$out; local mbps=$ip_mbps
  probe=
  fbs="not built" fb_p50= fb_p99= fb_mbps=
  if [ -n "$fb" ]; then
    fbs=${FB_STATUS[i]:-works} fb_p50=${FB_P50[i]:-} fb_p99=${FB_P99[i]:-} fb_mbps=${FB_MBPS[i]:-}
    [ "$fbs" != works ] || [ -n "$fb_p50" ] || fbs="fails (no result)"
  fi
  if [ "$fabric" = stat ]; then
    fabric=$(probed_fabrics)
    fabric="${fabric:-unknown (fabsock stat listed nothing)}"
  fi
  rows_txt+=("$(printf "$fmt" "$name" "$fabric" \
    "$(cell "$sp" "${p50} / ${p99}")" "$(cell "$ip" "$mbps")" \
    "$(cell "$fbs" "${fb_p50} / ${fb_p99} , ${fb_mbps}")")")
  rows_json+=("{\"transport\":$(str "$name"),\"fabric\":$(str "$fabric"),\
\"sockperf\":{\"status\":$(str "$sp"),\"p50_us\":$(num "$p50"),\"p99_us\":$(num "$p99"),\"avg_us\":$(num "$avg")},\
\"iperf3\":{\"status\":$(str "$ip"),\"mbytes_per_s\":$(num "$mbps")},\
\"fabsock_bench\":{\"status\":$(str "$fbs"),\"p50_us\":$(num "$fb_p50"),\"p99_us\":$(num "$fb_p99"),\"mbytes_per_s\":$(num "$fb_mbps"),\"rounds\":$(str "${FB_ROUNDS_TXT[i]:-}")}}")
}

for i in "${!T_NAMES[@]}"; do measure "$i"; done

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
    "fabsock-bench 64 B p50 / p99 us , 64 KiB MB/s (median of $FB_ROUNDS)"
  printf '%s\n' "${rows_txt[@]}"; } | tee "$T_WORK/table"
[ -z "${FB_PAIRS:-}" ] || echo "fabsock-bench, round by round: libfabsock's p50 below rsocket's in $FB_WON50 of $FB_PAIRS rounds, its p99 in $FB_WON99"
echo "--- json"
printf '{"tool":"rdma-compare","format":1,"kernel":%s,"vcpus":%s,"accel":"tcg","device":"rxe0",' \
  "$(str "$(uname -r)")" "$(nproc)"
printf '"host_load":%s,"sockperf_time_s":%s,"iperf3_time_s":%s,"fabsock_bench_rounds":%s,"libfabsock_transport":%s,"rows":[' \
  "$(str "${FABSOCK_BENCH_HOST_LOAD:-}")" "$SOCKPERF_TIME" "$IPERF3_TIME" "$FB_ROUNDS" "$(str "$transport")"
(IFS=,; printf '%s' "${rows_json[*]}")
printf ']'
[ -z "${FB_PAIRS:-}" ] ||
  printf ',"fabsock_bench_paired":{"rounds":%s,"libfabsock_p50_lower":%s,"libfabsock_p99_lower":%s}' \
    "$FB_PAIRS" "$FB_WON50" "$FB_WON99"
echo "}"
echo "--- end"
