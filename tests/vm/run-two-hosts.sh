#!/bin/sh
# Run two guest scripts on two throw-away qemu VMs joined by one virtual Ethernet link: two
# hosts, each with its own Soft-RoCE device (rxe0) on that link.  Each guest boots as in
# run-in-vm.sh (the Debian kernel with rdma_rxe; this machine's whole file system over 9p, so
# scripts, repository and build trees are at the same paths), but its only NIC, eth0, is the
# link: A is 10.0.3.1, B is 10.0.3.2, and neither reaches this machine over the network.
#
# Usage: run-two-hosts.sh SCRIPT_A SCRIPT_B [TIMEOUT_SECONDS]     (default timeout 900)
#
# Each script runs as root in its guest, in the caller's working directory, with the caller's
# exported environment plus FABSOCK_VM_HOST (a or b), FABSOCK_VM_SELF (its own address on the
# link) and FABSOCK_VM_PEER (the other's).  The guests sync over the link (vmtool.py sync).  A
# script may delete its guest's RDMA device (rdma link delete rxe0) to play a host without RDMA.
# A's stdout and stderr are copied here as they come; B's too, each line prefixed "# b: ".
# Exit status: A's, or 1 when A's is 0 and B's is not (or B did not finish within 60 s of A);
# 124 when the VMs ran past the timeout; 125 when a guest never reported a status (boot
# failure: its console is printed); 77 with a "# SKIP reason" line when this machine cannot run
# the VMs at all.
#
# The link: qemu's dgram netdev, each guest's frames sent as UDP datagrams to the other's qemu
# on 127.0.0.1.  Distinct MAC addresses (qemu gives every guest the same one by default).
#
# Environment: as run-in-vm.sh (FABSOCK_VM_CPUS and FABSOCK_VM_MEM apply to each guest), and
#   FABSOCK_VM_KEEP=1 keeps both run directories.
set -eu
usage='usage: run-two-hosts.sh SCRIPT_A SCRIPT_B [TIMEOUT_SECONDS]'
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
vm_here=$(cd "$(dirname "$0")" && pwd -P)
limit=${3:-900}
. "$vm_here/vm-common.sh"
vm_preflight

script_a=$(readlink -f "$1") || true
script_b=$(readlink -f "$2") || true
for s in "$script_a" "$script_b"; do
  [ -n "$s" ] && [ -f "$s" ] || { echo "run-two-hosts.sh: no such script: $1 or $2" >&2; exit 2; }
done

# Two free UDP ports on 127.0.0.1 for the two ends of the link.
ports=$(python3 -c '
import socket
s = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])') || { echo "run-two-hosts.sh: no free UDP ports" >&2; exit 2; }
set -- $ports
port_a=$1 port_b=$2

vm_rundir; run_a=$run_dir
vm_rundir; run_b=$run_dir
pid_a= pid_b= tails=
cleanup() {
  st=$?
  trap - EXIT INT TERM HUP
  for p in $pid_a $pid_b $tails; do kill "$p" 2> /dev/null || true; done
  vm_kill "$run_a"; vm_kill "$run_b"
  if [ "${FABSOCK_VM_KEEP:-0}" = 1 ]; then echo "# run-two-hosts: kept $run_a $run_b" >&2
  else rm -rf "$run_a" "$run_b"; fi
  exit "$st"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
vm_prepare "$run_a" "$script_a"
vm_prepare "$run_b" "$script_b"
echo "a 10.0.3.1 10.0.3.2" > "$run_a/net"
echo "b 10.0.3.2 10.0.3.1" > "$run_b/net"

link() {   # link MAC LOCAL_PORT REMOTE_PORT
  case ${FABSOCK_VM_LINK:-unix} in
    unix) if [ "$2" = "$port_a" ]; then l=$run_a r=$run_b; else l=$run_b r=$run_a; fi
      echo "-netdev dgram,id=link,local.type=unix,local.path=$l/link,remote.type=unix,remote.path=$r/link" ;;
    dgram) echo "-netdev dgram,id=link,local.type=inet,local.host=127.0.0.1,local.port=$2,remote.type=inet,remote.host=127.0.0.1,remote.port=$3" ;;
    stream) if [ "$2" = "$port_a" ]; then
        echo "-netdev stream,id=link,server=on,addr.type=inet,addr.host=127.0.0.1,addr.port=$2"
      else
        echo "-netdev stream,id=link,server=off,addr.type=inet,addr.host=127.0.0.1,addr.port=$3"
      fi ;;
  esac
  echo "-device virtio-net-pci,netdev=link,mac=$1"
}
start=$(date +%s.%N)
# shellcheck disable=SC2046 # the link options are words
vm_boot "$run_a" "$limit" fabsock-vm-a $(link 52:54:00:fa:b5:0a "$port_a" "$port_b"); pid_a=$vm_pid
# B's qemu connects once (qemu 7.2 has no reconnect): A's must be listening by then.
if [ "${FABSOCK_VM_LINK:-stream}" = stream ]; then
  i=0
  while ! ss -Hltn "sport = :$port_a" 2> /dev/null | grep -q . && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
fi
vm_boot "$run_b" "$limit" fabsock-vm-b $(link 52:54:00:fa:b5:0b "$port_b" "$port_a"); pid_b=$vm_pid
tail -n +1 -f --pid="$pid_a" "$run_a/output" &
tails=$!
tail -n +1 -f --pid="$pid_b" "$run_b/output" | sed -u 's/^/# b: /' &
tails="$tails $!"

qa=0
wait "$pid_a" || qa=$?
pid_a=
# B gets a minute more: its script may still be taking its last samples.
qb=0 waited=0
while kill -0 "$pid_b" 2> /dev/null && [ $waited -lt 60 ]; do sleep 1; waited=$((waited + 1)); done
if kill -0 "$pid_b" 2> /dev/null; then
  echo "# run-two-hosts: b still running 60 s after a ended; stopped"
  vm_kill "$run_b"; qb=124
fi
wait "$pid_b" || qb=$?
pid_b=
sleep 0.2
for p in $tails; do kill "$p" 2> /dev/null || true; done
tails=
end=$(date +%s.%N)

# A's verdict exits on a timeout: B's console first, which says why B stopped answering where
# it did (a kernel's hung-task or lockup report; CI once lost B after the rsocket rows).
if [ "$qa" = 124 ] || [ "$qa" = 137 ]; then
  echo "# run-two-hosts: a timed out; b's console (b exit $qb):"
  vm_console "$run_b" | tail -n 40
fi
vm_verdict "$run_a" "$qa" "run-two-hosts: a" "$limit"
vm_verdict "$run_b" "$qb" "run-two-hosts: b" "$limit"
sa=$(cat "$run_a/status") sb=$(cat "$run_b/status")
awk -v s="$start" -v e="$end" -v k="$kver" -v a="$sa" -v b="$sb" 'BEGIN {
  printf "# run-two-hosts: kernel %s, VM wall time %.1fs, a exit %s, b exit %s\n", k, e - s, a, b }' >&2
if [ "$sa" = 0 ] && [ "$sb" != 0 ]; then exit 1; fi
exit "$sa"
