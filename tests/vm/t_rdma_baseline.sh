#!/bin/bash
# Guest test: unmodified programs over 10.0.2.15 with the kernel's TCP, then under rsocket's
# preload (librspreload, the closest existing peer of libfabsock).  TAP.
#
# Plain runs must work (they are what libfabsock has to match).  rsocket runs record what rsocket
# does (works / fails with errno / hangs until the timeout kills it) and never fail the suite:
# each "ok" point carries the outcome in its description, and a summary line ends the test.
# rsocket is known to fail sockperf (sendto on a connected stream: EISCONN) and iperf3, and to
# stall when the peer host has no RDMA (a non-blocking connect never completes: it waits for an
# RDMA peer instead of falling back to TCP); the timeouts here keep that bounded.
#
# Host side (run.sh): FABSOCK_VM_HOST_PLAIN=10.0.2.2:PORT is a plain echo server on this machine.
. "$(dirname "$0")/lib.sh"

RS_TIMEOUT=${RS_TIMEOUT:-20}      # seconds an rsocket client may take before it counts as a hang
rs_summary=()

# ---- plain (kernel TCP): must work --------------------------------------------------------------
sockperf_run plain "" 11111 60
t_works "plain sockperf ping-pong over $VM_IP: $out${res:+, $res}"
iperf3_run plain "" 5201 60
t_works "plain iperf3 over $VM_IP: $out${res:+, $res}"
redis_run plain "" 6390 60
t_works "plain redis SET/GET + redis-benchmark over $VM_IP: $out${res:+, $res}"

if [ -n "${FABSOCK_VM_HOST_PLAIN:-}" ]; then
  timeout -k 5 30 redis-cli -h "${FABSOCK_VM_HOST_PLAIN%:*}" -p "${FABSOCK_VM_HOST_PLAIN#*:}" ping \
    > "$T_WORK/host-ping" 2>&1
  grep -qx ping "$T_WORK/host-ping"
  t_check $? "plain redis-cli ping to the host's echo server ($FABSOCK_VM_HOST_PLAIN)"
fi

# ---- rsocket preload: record what happens ------------------------------------------------------
if [ ! -f "$RSOCKET_LIB" ]; then
  t_skip "rsocket runs" "$RSOCKET_LIB not installed (librdmacm1)"
else
  T_QUIET_WHY=1
  sockperf_run rsocket "LD_PRELOAD=$RSOCKET_LIB" 11112 "$RS_TIMEOUT"
  t_ok "rsocket sockperf ping-pong over $VM_IP: $out${res:+, $res}"
  rs_summary+=("sockperf=$out")
  iperf3_run rsocket "LD_PRELOAD=$RSOCKET_LIB" 5202 "$RS_TIMEOUT"
  t_ok "rsocket iperf3 over $VM_IP: $out${res:+, $res}"
  rs_summary+=("iperf3=$out")
  redis_run rsocket "LD_PRELOAD=$RSOCKET_LIB" 6391 "$RS_TIMEOUT"
  t_ok "rsocket redis SET/GET + redis-benchmark over $VM_IP: $out${res:+, $res}"
  rs_summary+=("redis=$out")

  # A peer host without RDMA: this machine, through qemu's user network.  The client is
  # redis-cli (hiredis: non-blocking connect, then poll) and the server is the host's plain echo
  # server, which answers "ping" to a RESP ping.  (Not Python: it creates its sockets with
  # SOCK_CLOEXEC, which rsocket's preload does not take over, so Python always runs on TCP.)
  if [ -n "${FABSOCK_VM_HOST_PLAIN:-}" ]; then
    timeout -k 5 "$RS_TIMEOUT" env LD_PRELOAD="$RSOCKET_LIB" redis-cli -h "${FABSOCK_VM_HOST_PLAIN%:*}" \
      -p "${FABSOCK_VM_HOST_PLAIN#*:}" ping > "$T_WORK/rs-host" 2>&1
    st=$?
    outcome $st "$T_WORK/rs-host" "$RS_TIMEOUT"
    [ $st != 0 ] || grep -qx ping "$T_WORK/rs-host" || out="fails (answer: $(head -c 80 "$T_WORK/rs-host"))"
    t_ok "rsocket redis-cli to a host without RDMA ($FABSOCK_VM_HOST_PLAIN, plain echo server): $out"
    rs_summary+=("host-without-rdma=$out")
  else
    t_skip "rsocket client to a host without RDMA" "FABSOCK_VM_HOST_PLAIN not set (run through run.sh)"
  fi
  T_QUIET_WHY=
  t_diag "rsocket summary: $(IFS=';'; echo "${rs_summary[*]}")"
fi

t_done
