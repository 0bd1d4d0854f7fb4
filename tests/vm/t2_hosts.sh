#!/bin/bash
# Two-host test: run-two-hosts.sh boots two guests joined by one link, each with its own
# Soft-RoCE device, and runs this script in both (FABSOCK_VM_HOST=a or b).  A prints the TAP
# stream and drives; B is the server host and runs what A asks (b_* below), one command per
# network sync (vmtool.py sync).  Auto mode throughout (no FABSOCK_TRANSPORT): libfabsock must
# itself choose rdma for a peer on another host, and TCP for a peer that cannot take part.
#
# Points: both devices up; raw verbs, kernel TCP, libfabsock and rsocket across the link
# (sockperf 64 B ping-pong, iperf3), with the fabric each connection was on; a checksummed echo
# on rdma; a peer process killed mid-transfer (the sender gets the error TCP gives it); the link
# down 3 s mid-transfer (it must end as on TCP: a broken or wedged queue pair resumes) and rdma
# again after it; a peer without libfabsock and a peer host without RDMA (TCP, intact; connect
# time and sockperf latency beside a plain client's); a non-root user at the default memlock
# limit; one process of 4 busy connections past a 1 MiB limit (one widened on rdma, the others
# back on TCP with reason resources, the limit named in its log); 200 connections of one
# process in 2 MiB (8 KiB each: 1,000 in the default 8 MiB), all on rdma.
# Timing figures are diagnostics, never verdicts; the summary table at the end (and
# FABSOCK_T2_JSON=FILE) is what bench/vm/two-hosts.sh reports.
#
# Environment: FABSOCK_LIB, FABSOCK_BIN (without them only the baselines run),
#   SOCKPERF_TIME (6), IPERF3_TIME (6), FABSOCK_T2_ONLY (sections to run, see the end),
#   FABSOCK_T2_FABENV (more environment for every libfabsock process, e.g. FABSOCK_LOG=info).
. "$(dirname "$0")/lib.sh"

PEER=${FABSOCK_VM_PEER:?run through run-two-hosts.sh}
FAB=${FABSOCK_LIB:+LD_PRELOAD=$FABSOCK_LIB}
RS=LD_PRELOAD=$RSOCKET_LIB
# 6 s: the fabric of libfabsock's connections is sampled at both ends while they run.
export SOCKPERF_TIME=${SOCKPERF_TIME:-6} IPERF3_TIME=${IPERF3_TIME:-6}
sync_() { env -u LD_PRELOAD "$PYTHON" "$VMTOOL" sync "$@"; }
envof() { case $1 in plain) echo "" ;; fab) echo "$FAB ${FABSOCK_T2_FABENV:-}" ;; rs) echo "$RS" ;; esac; }

# ==== B: the server host ==========================================================================
# b_sample BASE: BASE.json, the sample b_serve keeps (see there).
b_sample() {
  local n
  sleep 5
  for n in 1 2 3 4 5 6 7 8 9; do
    # Not there yet (a guest slowed down: the client started late): look again.
    if ! timeout 20 "$FABSOCK_BIN" stat --json > "$1.tmp" || ! grep -qF "\"$PEER" "$1.tmp"; then
      sleep 1
      continue
    fi
    mv "$1.tmp" "$1.json"
    grep -qF '"reason":"pending"' "$1.json" && ! grep -qF '"fabric":"rdma"' "$1.json" || break
    sleep 1
  done
  rm -f "$1.tmp"
}
# b_serve NAME PORT ENV CMD...: CMD in the background (ENV: plain, fab or rs), once it listens.
b_serve() {
  local name=$1 port=$2 how=$3 envs; envs=$(envof "$3"); shift 3
  bg "$T_WORK/b-$name" env $envs "$@"
  eval "bpid_${name//-/_}=$bg_pid"
  # A libfabsock server's connections are sampled here 5 s on (the client runs by then): a
  # sample A asked for would cost both guests python starts during the measurement.  While
  # one is still pending and none is on rdma, or none names the peer yet (a slowed guest),
  # again each second, up to 8 times, keeping the last sample that names the peer: an
  # emulated rdma_cm set-up at the accepting end has ended after 5 s (iperf3's data
  # connection: rdma at A, pending in B's one sample).  b_stat NAME waits for it.
  if [ "$how" = fab ]; then
    b_sample "$T_WORK/b-$name.snap" > /dev/null 2>&1 < /dev/null &
    eval "bsample_${name//-/_}=$!"
  fi
  if wait_listen "$port" 30 "$bg_pid"; then echo listening
  else server_gone "$bg_pid" "$T_WORK/b-$name"; echo "not listening ($gone)"; fi
}
b_stop() { local p; eval "p=\$bpid_${1//-/_}"; stop "$p"; echo stopped; }
b_kill() { local p; eval "p=\$bpid_${1//-/_}"; kill -9 "$p"; echo killed; }
b_link() { echo "$(rdma link show | grep -o 'state [A-Z]*' | head -n 1), mtu $(cat /sys/class/net/eth0/mtu)"; }
# b_stat [NAME]: "fabric/reason xN, ..." of B's connections with A (all processes), now or as
# sampled after server NAME started.
b_stat() {
  if [ -n "${1:-}" ]; then
    local sp i
    eval "sp=\${bsample_${1//-/_}:-}"
    for i in $(seq 60); do [ -n "$sp" ] && kill -0 "$sp" 2>/dev/null || break; sleep 0.5; done
    "$PYTHON" "$VMTOOL" stat --peer "$PEER:*" < "$T_WORK/b-$1.snap.json" > "$T_WORK/b-stat" || { echo "no sample"; return; }
  else
    fabsock_stat "$T_WORK/b-stat" --peer "$PEER:*" || { echo "stat failed"; return; }
  fi
  [ -s "$T_WORK/b-stat" ] || { echo "none"; return; }
  awk '{ print $5 "/" $6 }' "$T_WORK/b-stat" | sort | uniq -c | awk '{ printf "%s%s x%d", s, $2, $1; s = ", " }'
}
b_nordma() { rdma link delete rxe0 && echo "rxe0 deleted"; }
# b_fds NAME: server NAME's open descriptors by kind ("socket x12, anon_inode:[eventfd] x3, ...").
b_fds() {
  local p; eval "p=\$bpid_${1//-/_}"
  for f in /proc/"$p"/fd/*; do readlink "$f"; done 2> /dev/null | sed 's/:\[[0-9]*\]$//' | sort | uniq -c |
    awk '{ printf "%s%s x%d", s, $2, $1; s = ", " }'
}
# conn_diag LOG: one line on this host's connections with the peer (fabsock stat rows), its RC
# queue pairs (rdma_cm's view: number, state) and LOG's last library lines: what a hang looked like.
conn_diag() {
  local s q h l
  s=$(timeout 10 "$FABSOCK_BIN" stat 2>/dev/null | grep -F "$PEER:" | tr -s ' ' | head -n 2 | paste -sd';')
  q=$(rdma resource show qp 2>/dev/null | awk '/type RC/ { o = ""; for (i = 1; i < NF; i++)
        if ($i == "lqpn" || $i == "state" || $i == "sq-psn" || $i == "rq-psn") o = o $i "=" $(i + 1) " "
        print o }' | paste -sd';')
  # Soft-RoCE's counters that are not zero (retransmissions, sequence errors, ...)
  h=$(cd /sys/class/infiniband/rxe0/ports/1/hw_counters 2>/dev/null &&
      for f in *; do v=$(cat "$f" 2>/dev/null); [ "${v:-0}" = 0 ] || printf '%s=%s ' "$f" "$v"; done)
  l=$(grep -h '^fabsock' "$1" 2>/dev/null | tail -n 4 | paste -sd'|')
  echo "stat: ${s:-none}; qp: ${q:-none}; rxe: ${h:-none}; log: ${l:-none}"
}
b_diag() { conn_diag "$T_WORK/b-$1"; }
# b_serve_nobody NAME PORT KIB CMD...: b_serve NAME PORT fab CMD as user nobody with a memlock
# limit of KIB (0: as root, no limit); @W@ in CMD stands for this host's work directory (nobody
# may write there).
b_serve_nobody() {
  local name=$1 port=$2 kib=$3; shift 3
  chmod 777 "$T_WORK"
  if [ "$kib" = 0 ]; then b_serve "$name" "$port" fab "${@//@W@/$T_WORK}"; return; fi
  b_serve "$name" "$port" fab prlimit --memlock=$((kib * 1024)) setpriv --reuid=nobody --regid=nogroup \
    --clear-groups "${@//@W@/$T_WORK}"
}
b_rm() { rm -f "$T_WORK/$1" && echo removed; }
b_cat() { cat "$T_WORK/$1" 2> /dev/null || echo "(no $1)"; }

if [ "$FABSOCK_VM_HOST" = b ]; then
  k=0
  while cmd=$(sync_ "cmd$k" --timeout 900); do
    [ "$cmd" = quit ] && { sync_ "done$k" --value bye > /dev/null; break; }   # A waits for an answer
    read -r -a words <<< "$cmd"
    "b_${words[0]}" "${words[@]:1}" > "$T_WORK/b-res" 2>&1
    sync_ "done$k" --value "$(tail -n 1 "$T_WORK/b-res")" > /dev/null || break
    k=$((k + 1))
  done
  exit 0
fi

# ==== A: the client host, the test ================================================================
k=0
# b_do CMD ARGS...: run b_CMD on B; its one-line answer in $bres.
b_do() {
  bres=
  sync_ "cmd$k" --value "$*" > /dev/null || { bres="(B unreachable)"; return 1; }
  bres=$(sync_ "done$k" --timeout 300) || bres="(B did not answer)"
  k=$((k + 1))
}
trap 'b_do quit > /dev/null 2>&1; t_cleanup' EXIT
rows=()          # summary table rows: "label|latency|throughput"
# b_on_rdma "fabric/reason xN, ...": B's connections (b_stat) include one on rdma, and every
# other one is still pending (iperf3's control connection never reaches the threshold).
b_on_rdma() {
  local s=${1//, /$'\n'}
  grep -q '^rdma/none x' <<< "$s" && ! grep -v -E '^(rdma/none|tcp/pending) x' <<< "$s" | grep -q .
}
# stat_settled FILE SECONDS FILTER...: fabsock_stat FILE FILTER... again until no matching
# connection is pending any more (an upgrade attempt has ended), or SECONDS passed.
stat_settled() {
  local f=$1 deadline=$((SECONDS + $2)); shift 2
  while fabsock_stat "$f" "$@"; do
    [ -s "$f" ] && ! awk '$6 == "pending" { p = 1 } END { exit !p }' "$f" && return 0
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.5
  done
}

# held_echo NAME PORT SERVER_ENV [plain]: B serves an echo server (SERVER_ENV: plain or fab);
# with "plain", a plain client's 1 MiB echo first (its connect time in $cs_plain); then a
# preloaded client's, held at half until this end's stat of it settles (no longer pending).
# Sets $he_ok (0: intact), $he_fab ("fabric/reason" as A's stat saw it), $cs_fab, $cs_plain, and
# $he_live: "state/reason N eventfds" of the preloaded client at half, its process's eventfds.
held_echo() {
  local name=$1 port=$2 c
  cs_plain= cs_fab=
  b_do serve "$name" "$port" "$3" "$PYTHON" "$VMTOOL" echo-server --bind "$PEER" --port "$port"
  if [ "${4:-}" = plain ]; then
    timeout 60 "$PYTHON" "$VMTOOL" echo-client "$PEER:$port" --bytes $((1 << 20)) > "$T_WORK/$name-plain" 2>&1
    cs_plain=$(sed -n 's/.*"connect_s": \([0-9.]*\).*/\1/p' "$T_WORK/$name-plain")
  fi
  timeout 120 env $(envof fab) "$PYTHON" "$VMTOOL" echo-client "$PEER:$port" --bytes $((1 << 20)) \
    --ready-file "$T_WORK/$name.ready" --hold-file "$T_WORK/$name.hold" > "$T_WORK/$name-fab" 2>&1 &
  c=$!
  : > "$T_WORK/$name.hold"
  wait_file "$T_WORK/$name.ready" 60 $c
  he_live="$(timeout 10 "$FABSOCK_BIN" stat 2> /dev/null | grep -F " $PEER:$port " | awk '{ print $4 "/" $NF; exit }')"
  he_live="$he_live $(ls -l "/proc/$(pgrep -P $c | head -n 1)/fd" 2> /dev/null | grep -c 'anon_inode:\[eventfd\]') eventfds"
  stat_settled "$T_WORK/$name-stat" 40 --peer "$PEER:$port"
  rm -f "$T_WORK/$name.hold"
  wait $c && grep -q '"ok": true' "$T_WORK/$name-fab"
  he_ok=$?
  b_do stop "$name"
  cs_fab=$(sed -n 's/.*"connect_s": \([0-9.]*\).*/\1/p' "$T_WORK/$name-fab")
  he_fab=$(awk '{ print $5 "/" $6 }' "$T_WORK/$name-stat")
}

# lat_pair NAME PORT SERVER_ENV: B serves sockperf (SERVER_ENV: plain or fab); A pings it with a
# plain and a preloaded client, 3 s each, three rounds, the order swapped each round (the guests'
# speed drifts by tens of percent within a minute: one run each measured that drift, not the
# library).  Sets $lp_plain, $lp_fab ("p50/p99" us: the medians of the rounds, then each round's
# p50; or how a run failed) and $lp_ok (0: all worked).  Nothing else runs meanwhile: a stat
# sampled during the preloaded runs alone made them 2x slower on these one-CPU guests.
lat_pair() {
  local name=$1 port=$2 how env log p50 p99 r st
  local -a p50s_plain=() p99s_plain=() p50s_fab=() p99s_fab=()
  lp_ok=0 lp_plain= lp_fab=
  b_do serve "$name" "$port" "$3" sockperf server --tcp -i "$PEER" -p "$port"
  for r in 1 2 3; do
    for how in $([ $r = 2 ] && echo fab plain || echo plain fab); do
      env=$(envof "$how")
      log=$T_WORK/$name-$how-$r
      timeout -k 5 60 env $env sockperf ping-pong --tcp -i "$PEER" -p "$port" -t 3 -m 64 > "$log" 2>&1
      st=$?
      if [ $st = 0 ] && sockperf_clean "$log"; then
        read -r p50 p99 _ <<< "$(sockperf_summary "$log")"
        eval "p50s_$how+=(\$p50); p99s_$how+=(\$p99)"
      else
        lp_ok=1; eval "lp_$how='fails ($(errno_of "$log"))'"
      fi
    done
  done
  b_do stop "$name"
  for how in plain fab; do
    eval "[ -n \"\$lp_$how\" ] || lp_$how=\"\$(median \${p50s_$how[@]})/\$(median \${p99s_$how[@]}) (\${p50s_$how[*]})\""
  done
}
# median X...: the middle value of numbers.
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

s_link() {
# ---- the link and both devices -----------------------------------------------------------------
b_do link
mine="$(rdma link show | grep -o 'state [A-Z]*' | head -n 1), mtu $(cat /sys/class/net/eth0/mtu)"
[ "$mine" = "${mine/ACTIVE/}" ] || [ "$bres" = "${bres/ACTIVE/}" ]
t_check $((1 - $?)) "two hosts: rxe0 on the link of a ($VM_IP: $mine) and b ($PEER: $bres)"

}
s_verbs() {
# ---- raw verbs across the link ------------------------------------------------------------------
b_do serve lat 18515 plain ib_send_lat -d rxe0 -x 1 -n 2000 -p 18515
timeout 90 ib_send_lat -d rxe0 -x 1 -n 2000 -p 18515 "$PEER" > "$T_WORK/lat" 2>&1
st=$?
read -r v_p50 v_p99 <<< "$(awk '$1 == 2 && $2 == 2000 { print $5, $8 }' "$T_WORK/lat")"
b_do stop lat
[ $st = 0 ] && [ -n "$v_p50" ]
t_check $? "raw verbs a -> b: ib_send_lat 2 B typical ${v_p50:-?} us, p99 ${v_p99:-?} us"
[ $st = 0 ] || t_diag "$(tail -n 4 "$T_WORK/lat")"

b_do serve bw 18516 plain ib_write_bw -F -d rxe0 -x 1 -m 4096 -s 65536 -p 18516
timeout 90 ib_write_bw -F -d rxe0 -x 1 -m 4096 -s 65536 -p 18516 "$PEER" > "$T_WORK/bw" 2>&1
st=$?
v_bw=$(awk '$1 == 65536 && NF >= 4 { print $4 }' "$T_WORK/bw")
b_do stop bw
[ $st = 0 ] && [ -n "$v_bw" ]
t_check $? "raw verbs a -> b: ib_write_bw 64 KiB ${v_bw:-?} MB/s"
[ $st = 0 ] || t_diag "$(tail -n 4 "$T_WORK/bw")"
rows+=("raw verbs (perftest)|${v_p50:-} / ${v_p99:-} (ib_send_lat)|${v_bw:-} (ib_write_bw 64 KiB)")

}
s_across() {
# ---- sockperf and iperf3 across the link: plain, libfabsock (auto), rsocket ---------------------
# snap FILE: `fabsock stat --json` into FILE.json, now (read later: python is slow here).
snap() { timeout 20 "$FABSOCK_BIN" stat --json > "$1.json" 2> /dev/null; }
# on_rdma_at_both PROGRAM NAME PORT: read A's sample of NAME (snap) and B's (b_stat NAME);
# appends "PROGRAM fabrics" to $fab_a and $fab_b, sets on_rdma=1 unless both were on rdma.
on_rdma_at_both() {
  "$PYTHON" "$VMTOOL" stat --peer "$PEER:$3" < "$T_WORK/$2-stat.json" > "$T_WORK/$2-stat"
  all_on "$T_WORK/$2-stat" rdma || on_rdma=1
  fab_a="$fab_a${fab_a:+; }$1 $(fabrics "$T_WORK/$2-stat")"
  b_do stat "$2"; b_on_rdma "$bres" || on_rdma=1
  fab_b="$fab_b${fab_b:+; }$1 $bres"
}
# across LABEL ENV SP_PORT IP_PORT: both programs with both ends under ENV; sets sp_* ip_* and
# $fab_a / $fab_b, the fabrics each end's connections were on (sampled mid-run).
across() {
  local label=$1 env=$2 spp=$3 ipp=$4 envs to=60 log upnow=
  envs=$(envof "$env")
  [ "$env" != fab ] || upnow=FABSOCK_UPGRADE_BYTES=0
  [ "$env" = rs ] && to=$RS_TIMEOUT
  sp_out= sp_p50= sp_p99= ip_out= ip_mbps= fab_a= fab_b= on_rdma=0
  b_do serve "sp-$label" "$spp" "$env" sockperf server --tcp -i "$PEER" -p "$spp"
  if [ "$bres" = listening ]; then
    log=$T_WORK/sp-$label
    # 2 s after connecting before the first message: libfabsock (upgrading at once here) has
    # its channel up by then, so the measurement is of rdma, not of a TCP start.
    timeout -k 5 "$to" env $envs ${upnow:-} sockperf ping-pong --tcp -i "$PEER" -p "$spp" \
      -t "$SOCKPERF_TIME" -m 64 --pre-warmup-wait 2 > "$log" 2>&1 &
    local c=$!
    if [ "$env" = fab ]; then
      sleep 4
      snap "$T_WORK/sp-$label-stat"
    fi
    wait $c
    st=$?
    [ "$env" != fab ] || on_rdma_at_both sockperf "sp-$label" "$spp"
    outcome $st "$log" "$to"
    if [ $st = 0 ] && sockperf_clean "$log"; then
      read -r sp_p50 sp_p99 _ <<< "$(sockperf_summary "$log")"
    elif [ $st = 0 ]; then out="fails (incomplete run, or lost or reordered messages)"; fi
    sp_out=$out
    [ "$out" = works ] || t_why "$(tail -n 3 "$log")"
  else
    sp_out="fails (server: $bres)"
  fi
  b_do stop "sp-$label"

  b_do serve "ip-$label" "$ipp" "$env" iperf3 -s -B "$PEER" -p "$ipp" -1
  if [ "$bres" = listening ]; then
    log=$T_WORK/ip-$label
    timeout -k 5 "$to" env $envs iperf3 -c "$PEER" -p "$ipp" -t "$IPERF3_TIME" -J > "$log.json" 2>&1 &
    local c=$!
    if [ "$env" = fab ]; then
      sleep 2.5
      snap "$T_WORK/ip-$label-stat"
    fi
    wait $c
    st=$?
    [ "$env" != fab ] || on_rdma_at_both iperf3 "ip-$label" "$ipp"
    "$PYTHON" "$VMTOOL" iperf3 "$log.json" > "$log" 2>&1
    outcome $st "$log" "$to"
    [ $st = 0 ] && read -r _ _ ip_mbps < "$log"
    ip_out=$out
  else
    ip_out="fails (server: $bres)"
  fi
  b_do stop "ip-$label"
}

across tcp plain 11111 5201
t_check "$([ "$sp_out" = works ] && [ "$ip_out" = works ]; echo $?)" \
  "kernel TCP a -> b: sockperf $sp_out (p50 ${sp_p50:-?} us, p99 ${sp_p99:-?} us), iperf3 $ip_out (${ip_mbps:-?} MB/s)"
rows+=("kernel TCP|${sp_p50:-$sp_out} / ${sp_p99:-}|${ip_mbps:-$ip_out}")
t_p50=$sp_p50 t_mbps=$ip_mbps

if have_fabsock; then
  across fab fab 11112 5202
  t_check "$([ "$sp_out" = works ] && [ "$ip_out" = works ]; echo $?)" \
    "libfabsock auto a -> b: sockperf $sp_out (p50 ${sp_p50:-?} us, p99 ${sp_p99:-?} us), iperf3 $ip_out (${ip_mbps:-?} MB/s)"
  # Every data connection on rdma, at both ends (iperf3's control connection stays pending).
  t_check $on_rdma "libfabsock auto between two hosts chose rdma: a sees [$fab_a], b sees [$fab_b]"
  t_diag "$(awk -v a="$sp_p50" -v b="$t_p50" -v c="$v_p50" -v m="$ip_mbps" -v n="$t_mbps" -v w="$v_bw" 'BEGIN {
    if (a > 0 && b > 0 && c > 0) printf "sockperf p50: libfabsock / TCP %.2f, libfabsock / raw verbs %.2f\n", a / b, a / c
    if (m > 0 && n > 0 && w > 0) printf "throughput: libfabsock / TCP %.2f, libfabsock / ib_write_bw %.2f\n", m / n, m / w }')"
  rows+=("libfabsock preload (auto: rdma)|${sp_p50:-$sp_out} / ${sp_p99:-}|${ip_mbps:-$ip_out}")
else
  t_skip "libfabsock across the link" "FABSOCK_LIB/FABSOCK_BIN not set (make check-vm sets them)"
fi

if [ -f "$RSOCKET_LIB" ]; then
  RS_TIMEOUT=${RS_TIMEOUT:-20}
  T_QUIET_WHY=1
  across rs rs 11113 5203
  T_QUIET_WHY=
  t_ok "rsocket preload a -> b (recorded, not judged): sockperf $sp_out${sp_p50:+ (p50 $sp_p50 us, p99 $sp_p99 us)}, iperf3 $ip_out${ip_mbps:+ ($ip_mbps MB/s)}"
  rows+=("rsocket preload|${sp_p50:-$sp_out} / ${sp_p99:-}|${ip_mbps:-$ip_out}")
fi


}
s_echo() {
# ---- a checksummed echo on rdma -------------------------------------------------------------------
b_do serve echo 7101 fab "$PYTHON" "$VMTOOL" echo-server --bind "$PEER" --port 7101
timeout 120 env $FAB "$PYTHON" "$VMTOOL" echo-client "$PEER:7101" --bytes $((16 << 20)) --chunk 65536 \
  --ready-file "$T_WORK/echo.ready" --hold-file "$T_WORK/echo.hold" > "$T_WORK/echo" 2>&1 &
c=$!
: > "$T_WORK/echo.hold"
wait_file "$T_WORK/echo.ready" 60 $c
stat_until "$T_WORK/echo-stat" rdma 15 --peer "$PEER:7101"
fa=$(fabrics "$T_WORK/echo-stat"); b_do stat; fb=$bres
rm -f "$T_WORK/echo.hold"
wait $c
st=$?
b_do stop echo
[ $st = 0 ] && grep -q '"ok": true' "$T_WORK/echo" && [ "$fa" = rdma ] && b_on_rdma "$fb"
t_check $? "16 MiB checksummed echo a -> b intact, on rdma (a: $fa, b: $fb)"
[ $st = 0 ] || t_diag "$(tail -n 2 "$T_WORK/echo")"

}
s_kill() {
# ---- a peer process killed mid-transfer ---------------------------------------------------------
# A sends and never reads; B's echo server soon blocks too; B is killed with SIGKILL.  TCP tells
# the sender with ECONNRESET (B's kernel resets: it had unread bytes), then EPIPE.
killed() {   # killed LABEL ENV PORT: sets $k_err, $k_delay (s from the kill to the error), $k_fab
  local label=$1 env=$2 port=$3 envs t_kill at
  envs=$(envof "$env")
  k_err= k_delay= k_fab=
  b_do serve "kill-$label" "$port" "$env" "$PYTHON" "$VMTOOL" echo-server --bind "$PEER" --port "$port"
  timeout 120 env $envs "$PYTHON" "$VMTOOL" flood-client "$PEER:$port" --ready-file "$T_WORK/kill-$label.ready" \
    --ready-bytes $((512 << 10)) --timeout 60 > "$T_WORK/kill-$label" 2>&1 &
  local c=$!
  wait_file "$T_WORK/kill-$label.ready" 60 $c
  if [ "$env" = fab ]; then
    stat_until "$T_WORK/kill-$label-stat" rdma 15 --peer "$PEER:$port"
    k_fab=$(fabrics "$T_WORK/kill-$label-stat")
  fi
  sleep 1                       # let the sender block
  t_kill=$(date +%s.%N)         # the delay includes asking b (a sync: about a second)
  b_do kill "kill-$label"
  wait $c
  k_err=$(sed -n 's/.*"error": "\{0,1\}\([A-Za-z0-9]*\).*/\1/p' "$T_WORK/kill-$label")
  at=$(sed -n 's/.*"at": \([0-9.]*\).*/\1/p' "$T_WORK/kill-$label")
  [ -n "$at" ] && k_delay=$(awk -v a="$at" -v b="$t_kill" 'BEGIN { printf "%.2f", a - b }')
  b_do stop "kill-$label"
}
killed tcp plain 7102
tcp_err=$k_err tcp_delay=$k_delay
killed fab fab 7103
case $k_err in ECONNRESET | EPIPE) ok=0 ;; *) ok=1 ;; esac
[ "$k_fab" = rdma ] || ok=1
t_check $ok "peer process killed mid-transfer on rdma: blocked sender got ${k_err:-nothing} ${k_delay:-?} s after asking b to kill (TCP: $tcp_err after $tcp_delay s)"
[ $ok = 0 ] || t_diag "fabric before the kill: ${k_fab:-?}; $(tail -n 2 "$T_WORK/kill-fab")"

}
s_linkdown() {
# ---- the link down for 3 s mid-transfer ----------------------------------------------------------
linkdown() {   # linkdown LABEL ENV PORT: sets $l_out (the echo-client's verdict), $l_fab, $l_res
  local label=$1 env=$2 port=$3 envs
  envs=$(envof "$env")
  # The client's log says whether its channel resumed on a new queue pair (fabric/rdma/heal.c).
  [ "$env" = fab ] && envs="$envs FABSOCK_LOG=info"
  l_fab= l_res=
  b_do serve "ld-$label" "$port" "$env" "$PYTHON" "$VMTOOL" echo-server --bind "$PEER" --port "$port"
  timeout 180 env $envs "$PYTHON" "$VMTOOL" echo-client "$PEER:$port" --bytes $((32 << 20)) --chunk 262144 \
    --ready-file "$T_WORK/ld-$label.ready" --hold-file "$T_WORK/ld-$label.hold" > "$T_WORK/ld-$label" 2>&1 &
  local c=$!
  : > "$T_WORK/ld-$label.hold"
  wait_file "$T_WORK/ld-$label.ready" 60 $c
  if [ "$env" = fab ]; then
    stat_until "$T_WORK/ld-$label-stat" rdma 15 --peer "$PEER:$port"
    l_fab=$(fabrics "$T_WORK/ld-$label-stat")
  fi
  rm -f "$T_WORK/ld-$label.hold"
  sleep 0.3
  ip link set eth0 down; sleep 3; ip link set eth0 up
  # TCP recovers within seconds of the link's return and 32 MiB take about one: a client still
  # running a minute later hangs.  Both ends are described, then it is stopped.
  local w=0
  l_diag=
  while kill -0 $c 2>/dev/null && [ $w -lt 60 ]; do sleep 1; w=$((w + 1)); done
  if kill -0 $c 2>/dev/null; then
    b_do diag "ld-$label"
    l_diag="a: $(conn_diag "$T_WORK/ld-$label")"$'\n'"b: $bres"
    pkill -9 -P $c 2>/dev/null; kill -9 $c 2>/dev/null
  fi
  wait $c
  local st=$?
  l_res=$(grep -c 'resumed; writing again from' "$T_WORK/ld-$label")
  if [ $st = 0 ] && grep -q '"ok": true' "$T_WORK/ld-$label"; then l_out="intact"
  elif [ $st = 124 ] || [ $st = 137 ] || [ -n "$l_diag" ]; then l_out="hangs"
  else l_out="fails ($(sed -n 's/.*"error": "\([^"]*\)".*/\1/p' "$T_WORK/ld-$label"))"; fi
  # Routes come back with the link; wait until B answers again before going on.
  b_do stop "ld-$label"
}
linkdown tcp plain 7104
tcp_out=$l_out
# FABSOCK_T2_LD_REPEAT=N: the rdma outage N times (default 1), each its own point.
for ((ld = 0; ld < ${FABSOCK_T2_LD_REPEAT:-1}; ld++)); do
linkdown fab fab $((7105 + 10 * ld))
# The outage either leaves the queue pairs working, breaks one (Soft-RoCE refuses a post while
# the link is down) or wedges one (in RTS, its sends never leave): the channel then resumes on a
# new queue pair (docs/design.md, "A broken or wedged queue pair").  As TCP on the same link, or
# it fails: a reset, a hang, an EOF or other bytes than were sent.
if [ "$l_out" = "$tcp_out" ] && [ "$l_fab" = rdma ]; then
  t_ok "link down 3 s mid-transfer on rdma: $l_out, resumed on a new queue pair ${l_res:-0}x (TCP on the same link: $tcp_out)"
else
  t_fail "link down 3 s mid-transfer on rdma (fabric before: ${l_fab:-?}): $l_out (TCP on the same link: $tcp_out)"
  [ -z "$l_diag" ] || t_diag "$l_diag"
fi
done
# After the link is back, a new connection reaches rdma again.
held_echo ld-after 7109 fab
if [ $he_ok = 0 ] && [ "$he_fab" = rdma/none ]; then
  t_ok "after the link came back: a new connection intact, on rdma again"
else
  # Does rdma_cm work between the hosts at all now?  rping sets up its own connection.  Seen:
  # after a queue pair broke in the outage, no rdma_cm connection is set up any more (rping
  # hangs as well).
  b_do serve rping 7174 plain rping -s -a "$PEER" -C 1
  timeout 20 rping -c -a "$PEER" -C 1 -v > "$T_WORK/rping" 2>&1
  rp=$?
  b_do stop rping
  if [ $he_ok = 0 ] && [ $rp != 0 ]; then
    t_fail "after the link came back: a new connection intact, on $he_fab: rdma_cm itself is down (rping exit $rp) # TODO Soft-RoCE: no connection set-up after a queue pair broke in a link outage"
  else
    t_fail "after the link came back: a new connection intact ($he_ok), on rdma again ($he_fab; rping exit $rp)"
    t_diag "$(grep -v '^{' "$T_WORK/ld-after-fab" | tail -n 12)"
  fi
fi

}
s_nofab() {
# ---- a peer without libfabsock ------------------------------------------------------------------
held_echo plain-echo 7106 plain plain
[ $he_ok = 0 ] && [ "$he_fab" = tcp/peer-no-fabsock ]
t_check $? "peer host without libfabsock: echo intact over TCP ($he_fab), connect ${cs_fab:-?} s (plain client ${cs_plain:-?} s)"
lat_pair sp-nofab 11114 plain
t_check $lp_ok "peer host without libfabsock: sockperf 64 B p50/p99 us preloaded client $lp_fab, plain client $lp_plain"

}
# held_many NAME PORT KIB NOFILE SECONDS ARGS...: one process of user nobody with a memlock
# limit of KIB (and a descriptor limit of NOFILE, 0: as it is) runs `vmtool many-client ARGS` to
# an echo server on b, holds its connections while fabsock stat lists them ($T_WORK/NAME-stat,
# the client's output in $T_WORK/NAME.out), then lets it finish.  Sets hm_ok (its exit status),
# hm_tally ("rdma/none x4, ...") and hm_fds (the server's descriptors while they were held).
held_many() {
  local name=$1 port=$2 kib=$3 nofile=$4 secs=$5 pid
  shift 5
  b_do serve "$name-echo" "$port" fab "$PYTHON" "$VMTOOL" echo-server --bind "$PEER" --port "$port"
  rm -f "$T_WORK/$name.ready"
  : > "$T_WORK/$name.hold"; chmod 777 "$T_WORK"; chmod 666 "$T_WORK/$name.hold"
  (if [ "$nofile" != 0 ]; then ulimit -n "$nofile" 2> /dev/null; fi
   exec timeout "$secs" setpriv --reuid=nobody --regid=nogroup --clear-groups \
    bash -c 'ulimit -l '"$kib"' && exec env '"$FAB ${FABSOCK_T2_FABENV:-}"' "$@"' "$name" "$PYTHON" "$VMTOOL" \
    many-client "$PEER:$port" "$@" --ready-file "$T_WORK/$name.ready" --hold-file "$T_WORK/$name.hold" \
    > "$T_WORK/$name.out" 2>&1) &
  pid=$!
  wait_file "$T_WORK/$name.ready" $((secs - 20)) $pid
  fabsock_stat "$T_WORK/$name-stat" --peer "$PEER:$port"
  b_do fds "$name-echo"; hm_fds=$bres
  rm -f "$T_WORK/$name.hold"
  wait $pid
  hm_ok=$?
  b_do stop "$name-echo"
  hm_tally=$(awk '{ print $5 "/" $6 }' "$T_WORK/$name-stat" | sort | uniq -c | awk '{ printf "%s%s x%d", s, $2, $1; s = ", " }')
}

s_memlock() {
# ---- non-root at the default memlock limit --------------------------------------------------------
# 24 connections from a user with an 8 MiB memlock limit: every one works; each is on rdma or
# on TCP with reason resources (the limit says how many registered rings fit).
b_do serve ml-echo 7107 fab "$PYTHON" "$VMTOOL" echo-server --bind "$PEER" --port 7107
: > "$T_WORK/ml.hold"
chmod 777 "$T_WORK"; chmod 666 "$T_WORK/ml.hold"
ml_pids=()
for i in $(seq 24); do
  timeout 120 setpriv --reuid=nobody --regid=nogroup --clear-groups \
    bash -c 'ulimit -l 8192 && exec env '"$FAB ${FABSOCK_T2_FABENV:-}"' "$@"' ml "$PYTHON" "$VMTOOL" echo-client "$PEER:7107" \
    --bytes 262144 --ready-file "$T_WORK/ml-$i.ready" --hold-file "$T_WORK/ml.hold" > "$T_WORK/ml-$i" 2>&1 &
  ml_pids+=($!)
done
for i in $(seq 24); do wait_file "$T_WORK/ml-$i.ready" 60; done
sleep 2
fabsock_stat "$T_WORK/ml-stat" --peer "$PEER:7107"
rm -f "$T_WORK/ml.hold"
ml_ok=0
for p in "${ml_pids[@]}"; do wait "$p" || ml_ok=1; done
b_do stop ml-echo
ml=$(awk '{ print $5 "/" $6 }' "$T_WORK/ml-stat" | sort | uniq -c | awk '{ printf "%s%s x%d", s, $2, $1; s = ", " }')
awk '!($5 == "rdma" || ($5 == "tcp" && $6 == "resources")) { bad = 1 } END { exit bad || NR != 24 }' "$T_WORK/ml-stat" || ml_ok=1
t_check $ml_ok "non-root, memlock 8 MiB: 24 connections to b all intact ($ml)"

# One process, 4 connections, memlock 1 MiB: every connection's first pages fit (8 KiB each),
# the whole rings (512 KiB at the default ring size) of one busy connection, not of two.  Each
# connection goes on rdma, then echoes 256 KiB in 64 KiB pieces (each written whole before its
# echo is read: a ring of one page would leave both ends waiting), one after the other: every
# byte intact; the first on rdma, widened; each of the others on rdma or back on TCP, at least
# one, reason resources: each end's sender takes its own direction back where it would wait
# (b's echo too, after 50 ms without this end's answer), and both at once once ran into each
# other (an echo that never came, 1 run in 3); the log names the limit.
held_many ml1 7117 1024 0 200 --conns 4 --big 262144
ml1_ok=$hm_ok ml1=$hm_tally
awk '!($5 == "rdma" || ($5 == "tcp" && $6 == "resources")) { bad = 1 } $5 == "rdma" { on++ }
     $5 == "tcp" { back++ } END { exit bad || NR != 4 || !on || !back }' "$T_WORK/ml1-stat" || ml1_ok=1
grep -q 'widening.*RLIMIT_MEMLOCK is 1024 KiB' "$T_WORK/ml1.out" || ml1_ok=1
t_check $ml1_ok "non-root, memlock 1 MiB, 4 busy connections in one process: all intact, one widened on rdma, the others back on TCP (resources) where their rings could not grow, the limit named in the log ($ml1; $(grep -m1 -o 'RLIMIT_MEMLOCK is [^:]*' "$T_WORK/ml1.out" || tail -n 1 "$T_WORK/ml1.out"))"

# One process, 200 connections, memlock 2 MiB: the same 8 KiB a connection as 1,000 in the
# default 8 MiB (before the rings were registered a page at first, 4 fit: 512 KiB each).
# Every connection intact and on rdma.  (FABSOCK_T2_MANY=1000 FABSOCK_T2_MANY_KIB=8192: the
# default limit itself; the descriptor limit is raised to what the connections need.)
mc_n=${FABSOCK_T2_MANY:-200} mc_kib=${FABSOCK_T2_MANY_KIB:-2048}
held_many mc 7127 "$mc_kib" $((mc_n * 4 + 256)) $((mc_n + 300)) --conns "$mc_n"
mc_ok=$hm_ok mc=$hm_tally mc_fds=$hm_fds
awk -v n=$mc_n '$5 != "rdma" { bad = 1 } END { exit bad || NR != n }' "$T_WORK/mc-stat" || mc_ok=1
t_check $mc_ok "non-root, memlock $mc_kib KiB, $mc_n connections in one process: all intact and on rdma ($mc; $(grep -m1 '^{' "$T_WORK/mc.out" || tail -n 1 "$T_WORK/mc.out"))"
t_diag "the server's descriptors with them open: $mc_fds"
# Completion channels: the first 16 connections of a process have one of their own, the rest
# share one per device (fabric/rdma/cq.h): with 200 on rdma, the server held 200 of them (and
# as many wake eventfds) before.  Its device's async fd is one more.
mc_cc=$(grep -o 'infinibandevent\] x[0-9]*' <<< "$mc_fds" | grep -o '[0-9]*$')
[ "${mc_cc:-999}" -le 20 ]
t_check $? "rdma completion channels do not grow with the connections: the server held ${mc_cc:-?} for $mc_n connections (16 of their own at most, one shared)"

}
# ---- a peer that does not read ----------------------------------------------------------------------
# nolook NAME PORT KIB: a server on b (user nobody with a memlock limit of KIB, or root: 0) that
# takes the connection and reads nothing until a has written 48 KiB and quit (a server busy
# elsewhere), then reads it all.  TCP's buffers take 48 KiB meanwhile; so must the connection,
# and every byte must arrive, those written on rdma included.  Sets nl_ok and nl_what.
nolook() {
  local name=$1 port=$2 kib=$3 pid st w done sent read fab
  b_do serve_nobody "$name" "$port" "$kib" "$PYTHON" "$VMTOOL" sink-server --bind "$PEER" --port "$port" \
    --out "@W@/$name.out" --wait-file "@W@/$name.wait"
  : > "$T_WORK/$name.hold"
  timeout 120 env $FAB ${FABSOCK_T2_FABENV:-} FABSOCK_LOG=info "$PYTHON" "$VMTOOL" burst-client "$PEER:$port" \
    --bytes 49152 --chunk 4096 --end close --ready-file "$T_WORK/$name.ready" --hold-file "$T_WORK/$name.hold" \
    > "$T_WORK/$name" 2>&1 &
  pid=$!
  wait_file "$T_WORK/$name.ready" 60 $pid
  stat_until "$T_WORK/$name-stat" rdma 15 --peer "$PEER:$port"
  fab=$(fabrics "$T_WORK/$name-stat")
  rm -f "$T_WORK/$name.hold"
  w=0
  while kill -0 $pid 2> /dev/null && [ $w -lt 40 ]; do sleep 0.5; w=$((w + 1)); done
  kill -0 $pid 2> /dev/null && done="still writing while the server waited" || done="done while the server waited"
  b_do rm "$name.wait"
  wait $pid
  st=$?
  for _ in $(seq 40); do b_do cat "$name.out"; case $bres in "(no"*) sleep 0.5 ;; *) break ;; esac; done
  read=$bres
  b_do stop "$name"
  sent=$(grep -m1 '^{' "$T_WORK/$name")
  [ $st = 0 ] && [ "$fab" = rdma ] && [ "$done" = "done while the server waited" ] &&
    [ "$(sed 's/ //g' <<< "$read")" = "$(sed 's/ //g' <<< "$sent")" ]
  nl_ok=$?
  nl_what="48 KiB written on rdma ($fab) $done, as over TCP; then all read intact (sent $sent, read $read)"
}
s_nolook() {
# Root's rings are whole from the start: the bytes sit in b's ring, the client quits, and b's
# process, looking only then, learns of the close (rdma_cm's disconnect) before its queue's news
# that the client had switched; it read TCP alone and lost the ring's bytes.
nolook nl-root 7147 0
t_check $nl_ok "a peer that reads only after the writer quit: $nl_what"
# Non-root at 8 MiB: only b's process, looking at the connection, would take the key that lets
# our writes past its ring's first page in; our window goes back to TCP 50 ms after it asked.
nolook nl 7137 8192
t_check $nl_ok "a non-root peer that does not read: $nl_what; $(grep -m1 -o 'has not answered[^:]*' "$T_WORK/nl" || echo 'no wait in the log')"

}
s_nordma() {
# ---- a peer host without RDMA (it runs libfabsock) — last: B's device is gone after it ----------
b_do nordma
held_echo nr-echo 7108 fab plain
[ $he_ok = 0 ] && [ "${he_fab%%/*}" = tcp ] && [ "${he_fab#*/}" != pending ]
t_check $? "peer host without RDMA (b: rxe0 deleted): echo intact over TCP ($he_fab), connect ${cs_fab:-?} s (plain client ${cs_plain:-?} s)"
# Its rdma_cm request unanswered, the client's attempt stays pending for the whole set-up bound
# (15 s here), and its calls must stay the kernel's own meanwhile: a wake eventfd made for the
# attempt turned each blocking receive into three calls and a poll (sockperf 1.1-1.4x plain in
# several runs).  It is made once the peer accepts: while pending, the agent's eventfd alone.
[ "$he_live" = "upgrading/pending 1 eventfds" ]
t_check $? "peer host without RDMA: the preloaded client's attempt pending, with no wake eventfd of its own yet ($he_live)"
# b's end knows at once that no fabric of its reaches another host: remote-host, not pending
# (nor, 30 s on, peer-no-fabsock: its peer runs libfabsock).  The plain client's connection
# may still be listed beside it.
b_do stat nr-echo
case $bres in "tcp/remote-host x1" | "tcp/remote-host x2") true ;; *) false ;; esac
t_check $? "peer host without RDMA: its server's end says why it stays on TCP ($bres)"
lat_pair sp-nordma 11115 fab
t_check $lp_ok "peer host without RDMA, preloaded server: sockperf 64 B p50/p99 us preloaded client $lp_fab, plain client $lp_plain"

}
s_summary() {
# ---- summary ---------------------------------------------------------------------------------------
echo "# two hosts | sockperf 64 B p50 / p99 us | iperf3 MB/s"
for r in "${rows[@]}"; do echo "# | ${r//|/ | } |"; done
if [ -n "${FABSOCK_T2_JSON:-}" ]; then
  for r in "${rows[@]}"; do
    IFS='|' read -r l lat thr <<< "$r"
    printf '{"transport": "%s", "latency": "%s", "throughput": "%s"}\n' "$l" "$lat" "$thr"
  done > "$FABSOCK_T2_JSON"
fi
}
# FABSOCK_T2_ONLY="echo kill ...": only those sections (and the link check); default all.
# The link goes down and up in linkdown, and b loses its device in nordma: they come last.
for sec in link verbs across echo kill nofab memlock nolook linkdown nordma summary; do
  case " link summary ${FABSOCK_T2_ONLY:-$sec} " in *" $sec "*) ;; *) continue ;; esac
  case $sec in link | verbs | across | summary) ;; *) have_fabsock || continue ;; esac
  "s_$sec"
done
t_done
