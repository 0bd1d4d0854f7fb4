#!/bin/bash
# Guest test: the Soft-RoCE device works (rdma_cm and raw verbs over 10.0.2.15).  TAP.
. "$(dirname "$0")/lib.sh"

rdma link show > "$T_WORK/link" 2>&1
grep -q 'link rxe0/1 state ACTIVE' "$T_WORK/link"
t_check $? "rdma link shows rxe0 ACTIVE on eth0"
t_diag "$(cat "$T_WORK/link")"

if command -v ibv_devices > /dev/null; then
  ibv_devices > "$T_WORK/dev" 2>&1
  grep -qw rxe0 "$T_WORK/dev"
  t_check $? "ibv_devices lists rxe0"
else
  # libibverbs itself is proven by rping and ib_send_lat below.
  [ -e /sys/class/infiniband/rxe0 ]
  t_check $? "rxe0 in /sys/class/infiniband (ibv_devices: ibverbs-utils not installed)"
fi

bg "$T_WORK/rping-s" timeout 60 rping -s -a "$VM_IP" -C 3
srv=$bg_pid
wait_listen 7174 20 "$srv"
timeout 60 rping -c -a "$VM_IP" -C 3 -S 64 -v > "$T_WORK/rping" 2>&1
st=$?
[ $st = 0 ] && [ "$(grep -c 'ping data' "$T_WORK/rping")" = 3 ]
t_check $? "rping (rdma_cm, RC send) loopback over $VM_IP"
[ $st = 0 ] || t_diag "rping exit $st: $(tail -n 5 "$T_WORK/rping")"
stop "$srv"

bg "$T_WORK/lat-s" timeout 90 ib_send_lat -d rxe0 -x 1 -n 1000 -p 18515
srv=$bg_pid
wait_listen 18515 30 "$srv"     # perftest exchanges QP numbers over TCP on 18515 first
timeout 90 ib_send_lat -d rxe0 -x 1 -n 1000 -p 18515 "$VM_IP" > "$T_WORK/lat" 2>&1
st=$?
lat=$(awk '$1 == 2 && $2 == 1000 { print $5 }' "$T_WORK/lat")
[ $st = 0 ] && [ -n "$lat" ]
t_check $? "ib_send_lat (raw verbs) loopback over $VM_IP: typical ${lat:-?} us"
[ $st = 0 ] || t_diag "ib_send_lat exit $st: $(tail -n 5 "$T_WORK/lat")"
stop "$srv"

t_done
