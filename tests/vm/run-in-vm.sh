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
#
# Why TCG: -enable-kvm hangs in early boot on the machines this was written on (and most have
# no /dev/kvm); multi-threaded TCG with "-cpu max" boots in a few seconds.
set -eu
usage='usage: run-in-vm.sh GUEST_SCRIPT [TIMEOUT_SECONDS]'
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd -P)
limit=${2:-900}

skip() { echo "# SKIP $*"; exit 77; }
# modprobe lives in /usr/sbin, which an ordinary user's PATH lacks on Debian.
PATH=$PATH:/usr/sbin:/sbin
qemu=${FABSOCK_VM_QEMU:-qemu-system-x86_64}

# ---- can this machine run it? --------------------------------------------------------------
[ "$(uname -m)" = x86_64 ] || skip "VM harness needs an x86_64 host (this is $(uname -m))"
command -v "$qemu" > /dev/null || skip "$qemu not installed (qemu-system-x86)"
for tool in modprobe cpio gzip timeout; do
  command -v "$tool" > /dev/null || skip "$tool not installed"
done
[ -x /bin/busybox ] || skip "/bin/busybox not installed (busybox-static)"
if ldd /bin/busybox > /dev/null 2>&1; then skip "/bin/busybox is not static (install busybox-static)"; fi
kver=${FABSOCK_VM_KVER:-}
if [ -z "$kver" ]; then
  for k in $(ls /lib/modules 2>/dev/null | sort -rV); do
    if [ -r "/boot/vmlinuz-$k" ] && [ -f "/lib/modules/$k/modules.dep" ]; then kver=$k; break; fi
  done
fi
[ -n "$kver" ] || skip "no kernel image with modules in /boot and /lib/modules (linux-image-amd64)"
[ -r "/boot/vmlinuz-$kver" ] || skip "/boot/vmlinuz-$kver missing or unreadable"
rxe_ko=$(find "/lib/modules/$kver" -name 'rdma_rxe.ko*' 2>/dev/null | head -n 1)
[ -n "$rxe_ko" ] || skip "kernel $kver has no rdma_rxe module"

script=$(readlink -f "$1") || true
[ -n "$script" ] && [ -f "$script" ] || { echo "run-in-vm.sh: no such script: $1" >&2; exit 2; }

# ---- initramfs, cached -----------------------------------------------------------------------
if [ -n "${FABSOCK_VM_CACHE:-}" ]; then cache=$FABSOCK_VM_CACHE
elif [ -n "${XDG_CACHE_HOME:-}" ]; then cache=$XDG_CACHE_HOME/fabsock-vm
else cache=/var/tmp/fabsock-vm-$(id -u); fi
mkdir -p "$cache"
key=$(cat "$here/mkinitrd.sh" "/lib/modules/$kver/modules.dep" | cksum | cut -d' ' -f1)
initrd=$cache/initrd-$kver-$key.gz
if [ ! -s "$initrd" ]; then
  # Images of other kernels or older mkinitrd.sh versions: drop the stale ones (a rebuild is ~2 s).
  find "$cache" -name 'initrd-*.gz' -mtime +7 -delete 2> /dev/null || true
  "$here/mkinitrd.sh" "$kver" "$initrd" >&2
fi

# ---- run directory: the channel between this machine and the guest ---------------------------
run=$(mktemp -d "${TMPDIR:-/tmp}/fabsock-vm.XXXXXX")
case $run in *[!A-Za-z0-9/._-]*) echo "run-in-vm.sh: unusable run directory name $run" >&2; exit 2 ;; esac
chmod 755 "$run"
tpid=
cleanup() {
  st=$?
  trap - EXIT INT TERM HUP
  [ -z "$tpid" ] || kill "$tpid" 2> /dev/null || true
  if [ -s "$run/qemu.pid" ]; then
    qp=$(cat "$run/qemu.pid" 2> /dev/null || true)
    # Only ever our qemu: the pid file is qemu's own, and its command line names our run dir.
    if [ -n "$qp" ] && grep -qs "$run" "/proc/$qp/cmdline"; then
      kill "$qp" 2> /dev/null || true; sleep 1; kill -9 "$qp" 2> /dev/null || true
    fi
  fi
  if [ "${FABSOCK_VM_KEEP:-0}" = 1 ]; then echo "# run-in-vm: kept $run" >&2; else rm -rf "$run"; fi
  exit "$st"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

export -p > "$run/env"
pwd -P > "$run/cwd"
echo "$script" > "$run/script"
: > "$run/output"
printf '#!/bin/sh\nexec /bin/sh %s %s\n' "$here/guest-run.sh" "$run" > "$run/boot"

# ---- boot -------------------------------------------------------------------------------------
start=$(date +%s.%N)
timeout -k 10 "$limit" "$qemu" -name fabsock-vm -accel tcg,thread=multi -cpu max \
  -m "${FABSOCK_VM_MEM:-2048}" -smp "${FABSOCK_VM_CPUS:-2}" \
  -display none -monitor none -serial "file:$run/console" -no-reboot -pidfile "$run/qemu.pid" \
  -kernel "/boot/vmlinuz-$kver" -initrd "$initrd" \
  -append "console=ttyS0 panic=-1 loglevel=3 ${FABSOCK_VM_APPEND:-} fabsock_vm_run=$run" \
  -virtfs "local,path=/,mount_tag=hostroot,security_model=none,multidevs=remap,id=hostroot" \
  -virtfs "local,path=$run,mount_tag=rundir,security_model=none,id=rundir" \
  -netdev user,id=net0 -device virtio-net-pci,netdev=net0 \
  < /dev/null > "$run/qemu.log" 2>&1 &
tpid=$!
# Copy the guest's output as it comes (the guest appends to it over 9p).
tail -n +1 -f --pid="$tpid" "$run/output" &
tailpid=$!
qst=0
wait "$tpid" || qst=$?
tpid=
wait "$tailpid" 2> /dev/null || true
end=$(date +%s.%N)

clean_console() { sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g; s/^/# console: /' "$run/console" | tr -d '\r'; }
if [ "$qst" = 124 ] || [ "$qst" = 137 ]; then
  echo "# run-in-vm: timed out after ${limit}s; guest console:"
  clean_console | tail -n 40
  exit 124
fi
if [ ! -s "$run/status" ]; then
  echo "# run-in-vm: the guest reported no status (qemu exit $qst); qemu said:"
  sed 's/^/# qemu: /' "$run/qemu.log"
  clean_console | tail -n 60
  exit 125
fi
[ "${FABSOCK_VM_CONSOLE:-0}" != 1 ] || clean_console
# "started" is created by the guest when the script starts: its mtime is this machine's clock.
booted=$(stat -c %.3Y "$run/started" 2> /dev/null || echo "$start")
awk -v s="$start" -v b="$booted" -v e="$end" -v k="$kver" 'BEGIN {
  printf "# run-in-vm: kernel %s, boot %.1fs, VM wall time %.1fs\n", k, b - s, e - s }' >&2
exit "$(cat "$run/status")"
