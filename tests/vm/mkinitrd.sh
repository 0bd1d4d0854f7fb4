#!/bin/sh
# Build the initramfs of the Soft-RoCE test VM (see run-in-vm.sh) for one installed Debian kernel.
#
# Usage: mkinitrd.sh KVER OUTPUT.gz
# Needs: the kernel's modules (linux-image-amd64), a static busybox (busybox-static), kmod, cpio, gzip.
#
# The initramfs is generic (no path of this checkout is baked in): it loads the virtio, 9p and
# Soft-RoCE modules, mounts this machine's root over 9p at /host (cached: cache=loose) and the run
# directory RUN named on the kernel command line (fabsock_vm_run=) over it, uncached (share
# "rundir": what the guest writes there shows up here at once), sets up eth0 as qemu's user
# network expects (10.0.2.15/24, host 10.0.2.2) and runs "$RUN/boot" inside the chroot.  All the
# guest does lives in that run directory and in the repository's scripts, so changing a test
# never needs a new initramfs.  run-in-vm.sh caches the output, keyed on KVER and this file.
set -eu
kver=${1:?usage: mkinitrd.sh KVER OUTPUT.gz}
out=${2:?usage: mkinitrd.sh KVER OUTPUT.gz}
root=$(mktemp -d "${TMPDIR:-/tmp}/fabsock-initrd.XXXXXX")
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/lib/modules" "$root/proc" "$root/sys" "$root/dev" "$root/host"
cp /bin/busybox "$root/bin/busybox"
for applet in sh mount insmod chroot ip cat echo poweroff tr sed; do
  ln -s busybox "$root/bin/$applet"
done
# Order matters: modprobe --show-depends lists dependencies first.  crc32_generic is only a soft
# dependency of rdma_rxe (its crc32 comes through the crypto API), so it is named before it:
# without it "rdma link add" fails with ENOENT.
for m in virtio_pci virtio_net 9pnet_virtio 9p crc32_generic rdma_ucm rdma_rxe; do
  modprobe -S "$kver" --show-depends "$m" | awk '$1 == "insmod" { print $2 }'
done | awk '!seen[$0]++' | while read -r ko; do
  case $ko in
    *.ko) cp "$ko" "$root/lib/modules/" ;;
    # Compressed modules (other distributions): busybox insmod reads plain .ko only.
    *.ko.xz) xz -dc "$ko" > "$root/lib/modules/$(basename "$ko" .xz)"; ko=${ko%.xz} ;;
    *.ko.zst) zstd -qdc "$ko" > "$root/lib/modules/$(basename "$ko" .zst)"; ko=${ko%.zst} ;;
    *) echo "mkinitrd: unexpected module file $ko" >&2; exit 1 ;;
  esac
  basename "$ko" >> "$root/lib/modules/order"
done
grep -qx 'rdma_rxe.ko' "$root/lib/modules/order" || { echo "mkinitrd: kernel $kver has no rdma_rxe" >&2; exit 1; }

cat > "$root/init" <<'INIT'
#!/bin/sh
# Guest pid 1.  Its "vm: ..." lines go to the serial console, which run-in-vm.sh prints when the
# guest reports no status.
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for ko in $(cat /lib/modules/order); do insmod "/lib/modules/$ko" || echo "vm: insmod $ko failed"; done
run=$(tr ' ' '\n' < /proc/cmdline | sed -n 's/^fabsock_vm_run=//p')
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=loose hostroot /host || echo "vm: 9p mount failed"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 rundir "/host$run" || echo "vm: run dir mount failed"
mount -t proc proc /host/proc; mount -t sysfs sys /host/sys; mount -t devtmpfs dev /host/dev
ip link set lo up; ip link set eth0 up; ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
echo "vm: booted, running $run/boot"
chroot /host /bin/sh "$run/boot"
echo "vm: boot script exit status $?"
poweroff -f
INIT
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc 2>/dev/null | gzip -1) > "$out.tmp.$$"
mv -f "$out.tmp.$$" "$out"
