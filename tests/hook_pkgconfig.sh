#!/bin/sh
# tests/hook_pkgconfig.sh: build a hook the way a third party does, against
# an installed libfabsock, and load it through FABSOCK_HOOKS by path.
#
#   hook_pkgconfig.sh ROOT LIBDIR HOOK_SOURCE HOOKIO
#
# ROOT is a DESTDIR libfabsock was installed into (make install
# DESTDIR=ROOT), LIBDIR the configured libdir, HOOK_SOURCE
# examples/hook_example.c (a byte quota), HOOKIO tests/progs/hookio.
# $CC and $PKG_CONFIG name the compiler and pkg-config.  The source is copied
# out of the tree and compiled with nothing but `pkg-config --cflags fabsock`
# (the header must come from ROOT); then two hookio transfers of 1 MiB each
# way run with ROOT's libfabsock.so preloaded on both ends and the hook
# loaded by path: max_recv=1048576 (exactly the stream) must pass,
# max_recv=1048575 must close the connection with the hook's log line.
# Prints TAP; exit 0 when all passed.
set -u
root=$1 libdir=$2 src=$3 hookio=$4
: "${CC:=cc}" "${PKG_CONFIG:=pkg-config}"
work=$root/hook-src
n=0 failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1 # failed: $2"; }

mkdir -p "$work" && cp "$src" "$work/quota.c" || { echo "Bail out! cannot copy $src"; exit 1; }
cflags=$(PKG_CONFIG_PATH="$root$libdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$root" "$PKG_CONFIG" --cflags fabsock)
rc=$?
echo "# pkg-config --cflags fabsock: $cflags"
# shellcheck disable=SC2086 # cflags is a list of words
hdr=$(echo '#include <fabsock/hook.h>' | "$CC" -E -x c - $cflags 2>&1 | sed -n 's/^# [0-9]* "\(.*fabsock\/hook\.h\)".*/\1/p' | head -n 1)
case "$rc:$hdr" in
  0:"$root"/*) ok "pkg-config finds the installed <fabsock/hook.h> ($hdr)" ;;
  *) not_ok "pkg-config finds the installed <fabsock/hook.h>" "pkg-config exit $rc, header from '${hdr:-nowhere}'" ;;
esac
# shellcheck disable=SC2086
if out=$(cd "$work" && "$CC" -std=gnu11 -Wall -Wextra -Werror -shared -fPIC $cflags -o quota.so quota.c 2>&1) &&
  nm -D --defined-only "$work/quota.so" | grep -qw fabsock_hook_entry; then
  ok "out-of-tree hook builds with pkg-config alone and exports fabsock_hook_entry"
else
  not_ok "out-of-tree hook builds with pkg-config alone" "$(echo "$out" | head -n 3 | tr '\n' ' ')"
fi

lib=$root$libdir/libfabsock.so
# run QUOTA: a 1 MiB hookio transfer each way, both ends preloaded with the
# hook at max_recv=QUOTA; sets SRV, CLI (result lines) and LOGS.
run() {
  rm -f "$work/port" "$work/srv" "$work/cli"
  FABSOCK_HOOKS="$work/quota.so:max_recv=$1" LD_PRELOAD=$lib timeout 60 "$hookio" -l -P "$work/port" -n 1M >"$work/srv" 2>&1 &
  spid=$!
  i=0
  while [ ! -s "$work/port" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
  FABSOCK_HOOKS="$work/quota.so:max_recv=$1" LD_PRELOAD=$lib timeout 60 "$hookio" -p "$(cat "$work/port" 2>/dev/null || echo 1)" -n 1M >"$work/cli" 2>&1
  wait $spid
  SRV=$(grep -m1 '^hookio:' "$work/srv") CLI=$(grep -m1 '^hookio:' "$work/cli")
  LOGS=$(grep -h 'fabsock\[' "$work/srv" "$work/cli")
}
if [ -f "$work/quota.so" ] && [ -f "$lib" ]; then
  run 1048576
  case "$SRV $CLI" in
    *rx_end=eof*rx_end=eof*) [ -z "$LOGS" ] && ok "hook loaded by path (max_recv=1048576): 1 MiB each way passes" ||
      not_ok "hook loaded by path (max_recv=1048576)" "logged: $LOGS" ;;
    *) not_ok "hook loaded by path (max_recv=1048576): 1 MiB each way passes" "server: $SRV; client: $CLI; $LOGS" ;;
  esac
  run 1048575
  if echo "$SRV" | grep -q 'rx_end=ECONNABORTED' &&
    echo "$LOGS" | grep -Eq 'warn: hook quota: fd [0-9]+: recv quota of 1048575 bytes exceeded; closing \(recv\)'; then
    ok "hook loaded by path (max_recv=1048575): closes the connection at the quota, logs it"
  else
    not_ok "hook loaded by path (max_recv=1048575): closes the connection" "server: $SRV; log: $LOGS"
  fi
else
  not_ok "hook loaded by path" "no quota.so or no $lib"
fi
echo "1..$n"
[ "$failed" -eq 0 ]
