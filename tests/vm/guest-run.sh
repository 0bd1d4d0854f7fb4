#!/bin/sh
# Runs inside the test VM, chrooted into this machine's file system (see run-in-vm.sh).
# Usage: guest-run.sh RUN_DIR
# RUN_DIR (on the 9p share, written by run-in-vm.sh) holds: env (the caller's exported
# environment, loaded here; TMPDIR is then pointed at a guest tmpfs), cwd, script.  This
# writes there: started (when the script starts), output (the script's stdout and stderr,
# appended as it runs) and status (its exit status, written last).  A two-host run
# (run-two-hosts.sh) adds net: "HOST SELF PEER", this guest's name (a or b), its address and the
# other guest's on the link that is its eth0.
run=${1:?usage: guest-run.sh RUN_DIR}
out=$run/output
# The guest's /dev is a fresh devtmpfs: give it the usual tmpfs for POSIX shm (libfabsock's stat
# files live there) and ptys.  /tmp stays this machine's /tmp (build trees may live there).
mkdir -p /dev/shm /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd   # bash process substitution needs /dev/fd
for i in 0:stdin 1:stdout 2:stderr; do [ -e "/dev/${i#*:}" ] || ln -s "/proc/self/fd/${i%:*}" "/dev/${i#*:}"; done
. "$run/env"
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
export FABSOCK_VM_GUEST=1
# Temporary files on a guest tmpfs: over 9p, a file cannot be resized once unlinked (iperf3's
# mkstemp+unlink+ftruncate buffer fails with ENOENT).
mkdir -p /dev/shm/tmp && chmod 1777 /dev/shm/tmp && export TMPDIR=/dev/shm/tmp
if [ -s "$run/net" ]; then
  # One of two hosts: eth0 is the link between the guests (no user network, no default route).
  read -r FABSOCK_VM_HOST FABSOCK_VM_SELF FABSOCK_VM_PEER < "$run/net"
  export FABSOCK_VM_HOST FABSOCK_VM_SELF FABSOCK_VM_PEER
  ip route del default > /dev/null 2>&1
  ip addr flush dev eth0
  ip addr add "$FABSOCK_VM_SELF/24" dev eth0
  # Jumbo frames: every frame that crosses the link costs host wake-ups, and RoCE (no
  # segmentation offload) sends one per path-MTU packet: 4096 B payloads need MTU 9000.
  ip link set eth0 mtu "${FABSOCK_VM_MTU:-9000}"
fi
if ! rdma link add rxe0 type rxe netdev eth0 >> "$out" 2>&1; then
  echo "vm: rdma link add rxe0 type rxe netdev eth0 failed" >> "$out"
fi
cd "$(cat "$run/cwd")" 2>/dev/null || cd /
: > "$run/started"
script=$(cat "$run/script")
if [ -x "$script" ]; then
  "$script" >> "$out" 2>&1 < /dev/null
else
  /bin/sh "$script" >> "$out" 2>&1 < /dev/null
fi
st=$?
# The root is mounted with cache=loose: write back what the script wrote before reporting.
sync
echo $st > "$run/status.tmp" && mv -f "$run/status.tmp" "$run/status"
