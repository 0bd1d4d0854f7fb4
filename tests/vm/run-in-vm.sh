#!/bin/sh
# Run GUEST_SCRIPT in a throw-away qemu VM that has a real verbs device: the Debian kernel with
# Soft-RoCE (rdma_rxe), device rxe0 on eth0 = 10.0.2.15.  The guest sees this machine's whole
# file system (9p, chroot), so the script, the repository and build trees are at the same paths;
# this machine is 10.0.2.2 from inside (qemu user networking; a server listening here on
# 0.0.0.0 or 127.0.0.1 is reachable), and it has no RDMA.
#
# Usage: run-in-vm.sh GUEST_SCRIPT [TIMEOUT_SECONDS]     (default timeout 900)
#
# The script runs as root in the guest, in the caller's working directory, with the caller's
# exported environment (plus FABSOCK_VM_GUEST=1, and TMPDIR on a guest tmpfs).  The guest caches
# this machine's files (9p cache=loose: fast, but changes made here during the run may go
# unseen there); its writes reach this machine by the time the script's status does.  Its stdout and stderr are copied here as it
# runs.  Exit status: the script's; 124 when the VM ran past the timeout (qemu is killed);
# 125 when the VM never reported a status (boot failure: the console is printed, prefixed "# ");
# 77 with a "# SKIP reason" line when this machine cannot run the VM at all.
#
# Environment:
#   FABSOCK_VM_CACHE   where initramfs images are kept (default $XDG_CACHE_HOME/fabsock-vm, or
#                      /var/tmp/fabsock-vm-$UID); keyed on the kernel version and mkinitrd.sh
#   FABSOCK_VM_KVER    kernel version to boot (default: newest with /boot/vmlinuz-* and modules)
#   FABSOCK_VM_MEM     guest memory in MiB (2048); FABSOCK_VM_CPUS vCPUs (2)
#   FABSOCK_VM_APPEND  extra kernel command line (e.g. idle=poll)
#   FABSOCK_VM_QEMU    the qemu binary (qemu-system-x86_64)
#   FABSOCK_VM_KEEP=1  keep the run directory (console, output) and print its path
#   FABSOCK_VM_CONSOLE=1  print the guest console even on success
#   (the boot itself: vm-common.sh)
set -eu
usage='usage: run-in-vm.sh GUEST_SCRIPT [TIMEOUT_SECONDS]'
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
vm_here=$(cd "$(dirname "$0")" && pwd -P)
limit=${2:-900}
. "$vm_here/vm-common.sh"
vm_preflight

script=$(readlink -f "$1") || true
[ -n "$script" ] && [ -f "$script" ] || { echo "run-in-vm.sh: no such script: $1" >&2; exit 2; }

# ---- run directory: the channel between this machine and the guest ---------------------------
vm_rundir
run=$run_dir
tpid=
cleanup() {
  st=$?
  trap - EXIT INT TERM HUP
  [ -z "$tpid" ] || kill "$tpid" 2> /dev/null || true
  vm_kill "$run"
  if [ "${FABSOCK_VM_KEEP:-0}" = 1 ]; then echo "# run-in-vm: kept $run" >&2; else rm -rf "$run"; fi
  exit "$st"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
vm_prepare "$run" "$script"

# ---- boot -------------------------------------------------------------------------------------
start=$(date +%s.%N)
vm_boot "$run" "$limit" fabsock-vm -netdev user,id=net0 -device virtio-net-pci,netdev=net0
tpid=$vm_pid
# Copy the guest's output as it comes (the guest appends to it over 9p).
tail -n +1 -f --pid="$tpid" "$run/output" &
tailpid=$!
qst=0
wait "$tpid" || qst=$?
tpid=
wait "$tailpid" 2> /dev/null || true
end=$(date +%s.%N)

vm_verdict "$run" "$qst" "run-in-vm: the guest" "$limit"
# "started" is created by the guest when the script starts: its mtime is this machine's clock.
booted=$(stat -c %.3Y "$run/started" 2> /dev/null || echo "$start")
awk -v s="$start" -v b="$booted" -v e="$end" -v k="$kver" 'BEGIN {
  printf "# run-in-vm: kernel %s, boot %.1fs, VM wall time %.1fs\n", k, b - s, e - s }' >&2
exit "$(cat "$run/status")"
