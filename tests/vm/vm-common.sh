# Shared by run-in-vm.sh and run-two-hosts.sh (POSIX sh; sourced): can this machine boot the
# Soft-RoCE test VM, the cached initramfs, and booting one guest.
#
# vm_preflight        sets $kver, $qemu, $initrd (building it if needed), or exits 77 with
#                     "# SKIP reason" where this machine cannot run a guest at all
# vm_rundir           a fresh run directory (mode 755) in $run_dir
# vm_boot RUN LIMIT NAME NETDEV-ARGS...
#                     boots one guest in the background for at most LIMIT seconds (qemu's pid in
#                     $vm_pid: the `timeout` wrapping it); the guest runs RUN's script
#                     (guest-run.sh); NETDEV-ARGS are qemu's network options
# vm_kill RUN         kills RUN's qemu, if still running (only ever ours: its command line
#                     names RUN)
# vm_console RUN      RUN's guest console, each line prefixed "# console: "
# vm_verdict RUN QEMU_STATUS WHO LIMIT
#                     after a guest ended: exits 124 (it timed out) or 125 (it reported no
#                     status: a boot failure), printing why and its console; else returns
#
# Environment: FABSOCK_VM_CACHE, FABSOCK_VM_KVER, FABSOCK_VM_MEM, FABSOCK_VM_CPUS,
# FABSOCK_VM_APPEND, FABSOCK_VM_QEMU (see run-in-vm.sh).
#
# Why TCG: -enable-kvm hangs in early boot on the machines this was written on (and most have
# no /dev/kvm); multi-threaded TCG with "-cpu max" boots in a few seconds.

vm_skip() { echo "# SKIP $*"; exit 77; }

vm_preflight() {
  # modprobe lives in /usr/sbin, which an ordinary user's PATH lacks on Debian.
  PATH=$PATH:/usr/sbin:/sbin
  qemu=${FABSOCK_VM_QEMU:-qemu-system-x86_64}
  [ "$(uname -m)" = x86_64 ] || vm_skip "VM harness needs an x86_64 host (this is $(uname -m))"
  command -v "$qemu" > /dev/null || vm_skip "$qemu not installed (qemu-system-x86)"
  for tool in modprobe cpio gzip timeout; do
    command -v "$tool" > /dev/null || vm_skip "$tool not installed"
  done
  [ -x /bin/busybox ] || vm_skip "/bin/busybox not installed (busybox-static)"
  if ldd /bin/busybox > /dev/null 2>&1; then vm_skip "/bin/busybox is not static (install busybox-static)"; fi
  kver=${FABSOCK_VM_KVER:-}
  if [ -z "$kver" ]; then
    for k in $(ls /lib/modules 2>/dev/null | sort -rV); do
      if [ -r "/boot/vmlinuz-$k" ] && [ -f "/lib/modules/$k/modules.dep" ]; then kver=$k; break; fi
    done
  fi
  [ -n "$kver" ] || vm_skip "no kernel image with modules in /boot and /lib/modules (linux-image-amd64)"
  [ -r "/boot/vmlinuz-$kver" ] || vm_skip "/boot/vmlinuz-$kver missing or unreadable"
  rxe_ko=$(find "/lib/modules/$kver" -name 'rdma_rxe.ko*' 2>/dev/null | head -n 1)
  [ -n "$rxe_ko" ] || vm_skip "kernel $kver has no rdma_rxe module"

  if [ -n "${FABSOCK_VM_CACHE:-}" ]; then cache=$FABSOCK_VM_CACHE
  elif [ -n "${XDG_CACHE_HOME:-}" ]; then cache=$XDG_CACHE_HOME/fabsock-vm
  else cache=/var/tmp/fabsock-vm-$(id -u); fi
  mkdir -p "$cache"
  key=$(cat "$vm_here/mkinitrd.sh" "/lib/modules/$kver/modules.dep" | cksum | cut -d' ' -f1)
  initrd=$cache/initrd-$kver-$key.gz
  if [ ! -s "$initrd" ]; then
    # Images of other kernels or older mkinitrd.sh versions: drop the stale ones (a rebuild is ~2 s).
    find "$cache" -name 'initrd-*.gz' -mtime +7 -delete 2> /dev/null || true
    "$vm_here/mkinitrd.sh" "$kver" "$initrd" >&2
  fi
}

vm_rundir() {
  run_dir=$(mktemp -d "${TMPDIR:-/tmp}/fabsock-vm.XXXXXX")
  case $run_dir in
    *[!A-Za-z0-9/._-]*) echo "vm: unusable run directory name $run_dir" >&2; rm -rf "$run_dir"; exit 2 ;;
  esac
  chmod 755 "$run_dir"
}

# vm_prepare RUN SCRIPT: the files guest-run.sh reads (the caller's environment and directory).
vm_prepare() {
  export -p > "$1/env"
  pwd -P > "$1/cwd"
  echo "$2" > "$1/script"
  : > "$1/output"
  printf '#!/bin/sh\nexec /bin/sh %s %s\n' "$vm_here/guest-run.sh" "$1" > "$1/boot"
}

vm_boot() {
  _run=$1 _limit=$2 _name=$3; shift 3
  timeout -k 10 "$_limit" "$qemu" -name "$_name" -accel tcg,thread=multi -cpu max \
    -m "${FABSOCK_VM_MEM:-2048}" -smp "${FABSOCK_VM_CPUS:-2}" \
    -display none -monitor none -serial "file:$_run/console" -no-reboot -pidfile "$_run/qemu.pid" \
    -kernel "/boot/vmlinuz-$kver" -initrd "$initrd" \
    -append "console=ttyS0 panic=-1 loglevel=3 ${FABSOCK_VM_APPEND:-} fabsock_vm_run=$_run" \
    -virtfs "local,path=/,mount_tag=hostroot,security_model=none,multidevs=remap,id=hostroot" \
    -virtfs "local,path=$_run,mount_tag=rundir,security_model=none,id=rundir" \
    "$@" < /dev/null > "$_run/qemu.log" 2>&1 &
  vm_pid=$!
}

vm_kill() {
  if [ -s "$1/qemu.pid" ]; then
    _qp=$(cat "$1/qemu.pid" 2> /dev/null || true)
    if [ -n "$_qp" ] && grep -qs "$1" "/proc/$_qp/cmdline"; then
      kill "$_qp" 2> /dev/null || true; sleep 1; kill -9 "$_qp" 2> /dev/null || true
    fi
  fi
}

vm_console() { sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g; s/^/# console: /' "$1/console" | tr -d '\r'; }

vm_verdict() {
  if [ "$2" = 124 ] || [ "$2" = 137 ]; then
    echo "# $3 timed out after ${4}s; guest console:"
    vm_console "$1" | tail -n 40
    exit 124
  fi
  if [ ! -s "$1/status" ]; then
    echo "# $3 reported no status (qemu exit $2); qemu said:"
    sed 's/^/# qemu: /' "$1/qemu.log"
    vm_console "$1" | tail -n 60
    exit 125
  fi
  [ "${FABSOCK_VM_CONSOLE:-0}" != 1 ] || vm_console "$1"
}
