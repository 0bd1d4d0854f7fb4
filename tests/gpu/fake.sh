#!/bin/sh
# gpu_socket_test under LD_PRELOAD=libfabsock.so over the fake CUDA driver
# (tests/unit/fakecuda.c: "device" memory the kernel answers EFAULT for and a
# CPU touch faults on), so the engine's staging path runs end to end on every
# machine, a GPU or not: default threshold, upgrade at 0 bytes, TCP only.
# One TAP stream on stdout; a pass that exits non-zero (a crash, a bail out)
# is a failed line of its own.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${top_builddir:-$here/../..}
build=$(cd "$build" && pwd)
fake=$build/tests/unit/.libs/fakecuda.so
if [ ! -e "$fake" ]; then
  echo "1..0 # SKIP fake driver not built ($fake)"
  exit 0
fi
export FABSOCK_CUDA_LIB="$fake" GPU_TEST_MAX_MB="${GPU_TEST_MAX_MB:-16}" top_builddir="$build"
out=$(mktemp) || exit 1
n=0
all=""
for env in FABSOCK_TRANSPORT=auto FABSOCK_UPGRADE_BYTES=0 FABSOCK_TRANSPORT=tcp; do
  env "$env" "$here/run.sh" >"$out" 2>&1
  rc=$?
  all="$all$(awk -v tag=" [$env]" -v n=$n '
    /^1\.\./ { next }
    /^(not )?ok [0-9]+/ { n++; sub(/ok [0-9]+/, "ok " n); print $0 tag; next }
    { print }
    END { print "#n " n }' "$out")
"
  n=$(printf '%s' "$all" | sed -n 's/^#n //p' | tail -1)
  if [ $rc != 0 ]; then
    n=$((n + 1))
    all="${all}not ok $n - gpu_socket_test [$env] exited $rc
"
  fi
done
rm -f "$out"
echo "1..$n"
printf '%s' "$all" | grep -v '^#n '
