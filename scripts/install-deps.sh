#!/bin/bash
# scripts/install-deps.sh: install what libfabsock needs to build and test,
# on Debian 12 (bookworm), as root.  Idempotent: when every package is
# already installed it does nothing (no apt-get update, no network).
#
#   scripts/install-deps.sh [--build-only | --no-vm]
#
#   build  compiler, Autotools, Check, rdma-core headers, jemalloc
#   test   the real programs the integration suite runs (tests/integration)
#   vm     qemu + a Debian kernel + busybox for the Soft-RoCE VM tests
#
# The integration tests start their own redis-server, memcached, nginx, haproxy,
# MariaDB, apache2 and PostgreSQL on free ports; the system services these packages
# install are neither needed nor started by the install (nothing is
# stopped, disabled or reconfigured here).
set -eu

BUILD_PKGS="build-essential autoconf automake libtool pkg-config check
  librdmacm-dev libibverbs-dev libjemalloc-dev liburing-dev clang"
TEST_PKGS="socat curl python3 redis-server redis-tools iperf3 sockperf memcached
  iproute2 procps gdb openjdk-17-jdk-headless systemd nginx-light wrk postgresql-15
  nodejs openssh-server apache2 gunicorn python3-aiohttp haproxy mariadb-server mariadb-client libcap2-bin"
VM_PKGS="qemu-system-x86 linux-image-amd64 busybox-static kmod cpio
  rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest"

want="$BUILD_PKGS"
case "${1:-}" in
  --build-only) ;;
  --no-vm) want="$want $TEST_PKGS" ;;
  "") want="$want $TEST_PKGS $VM_PKGS" ;;
  -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
  *) echo "usage: $0 [--build-only | --no-vm]" >&2; exit 2 ;;
esac

# One dpkg-query for all: a package is present when its status is
# "install ok installed" (unknown names are simply not listed).
list_missing() {
  local have p
  have=$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "$@" 2>/dev/null | awk '$2 == "ii" {print $1}')
  for p in "$@"; do
    printf '%s\n' "$have" | grep -qx -- "$p" || printf ' %s' "$p"
  done
}

# shellcheck disable=SC2086
missing=$(list_missing $want)
if [ -z "$missing" ]; then
  echo "install-deps: all $(echo "$want" | wc -w) packages already installed"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing:$missing -- run as root (or: sudo $0 $*)" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing:$missing"
# A fresh image has no package lists: update once, here and only here.
apt-get update -q
# No service these packages bring is started by their installation: the
# tests run their own, and nginx and apache2 both want port 80 (the second
# to start cannot have it).  A policy-rc.d that says no for the length of
# the install, unless the machine has one already (containers do); the
# services stay enabled, as Debian installs them (at the next boot one of
# those two will not get its port; the tests need neither).
own_policy=
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\n# scripts/install-deps.sh: no service starts during its install\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d
  own_policy=1
  trap '[ -z "$own_policy" ] || rm -f /usr/sbin/policy-rc.d' EXIT
fi
# --no-install-recommends keeps it small.
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $missing

# shellcheck disable=SC2086
still=$(list_missing $missing)
if [ -n "$still" ]; then
  echo "install-deps: failed to install:$still" >&2
  exit 1
fi
echo "install-deps: done"
