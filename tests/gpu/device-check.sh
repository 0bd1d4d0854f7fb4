#!/usr/bin/env bash
# device-check.sh: everything that needs a real NVIDIA GPU, in one command, for
# a machine lent for minutes (nothing installed there but the driver): the
# builds travel, prebuilt, and this script only runs them.
#
#   tests/gpu/device-check.sh OUT NEW_BUILD [OLD_BUILD]
#
# NEW_BUILD (and OLD_BUILD) are build trees, or copies holding at least
# .libs/libfabsock.so, fabsock, tests/gpu/gpu_core_test,
# tests/gpu/gpu_socket_test and bench/gpu-stream (all link libc alone).
# It runs, each a TAP stream, on NEW_BUILD:
#   gpu_core_test                 gpu/ over the real driver, no preload
#   gpu_socket_test --plain       the kernel's EFAULT for device pointers
#   gpu_socket_test preloaded     auto (shm), FABSOCK_UPGRADE_BYTES=0, TCP only
# then bench/gpu.sh for NEW_BUILD and, when given, OLD_BUILD, then NEW_BUILD
# again (ratios mean something only within one machine's run), writing
# OUT/gpu-new.json, OUT/gpu-old.json, OUT/gpu-new2.json and OUT/log.
# The last line is "N passed, N failed"; the exit status is 0 only if every
# test passed.  GPU_CHECK_ROUNDS sets bench rounds (default 3);
# GPU_CHECK_BENCH=0 skips the benchmark.
set -u
out=${1:?usage: device-check.sh OUT NEW_BUILD [OLD_BUILD]}
new=$(cd "${2:?usage: device-check.sh OUT NEW_BUILD [OLD_BUILD]}" && pwd) || exit 2
old=${3:+$(cd "$3" && pwd)}
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
rounds=${GPU_CHECK_ROUNDS:-3}
mkdir -p "$out" || exit 2
exec > >(tee -a "$out/log") 2>&1

echo "# $(date -u +%FT%TZ) $(uname -r)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed "s/^/# gpu: /" || echo "# gpu: nvidia-smi not found"
nproc | sed 's/^/# cpus: /'

pass=0 fail=0
tap() { # LABEL CMD...: run a TAP program, count its lines, a non-zero exit is a failure
  local label=$1 f rc
  shift
  f=$(mktemp)
  "$@" >"$f" 2>&1
  rc=$?
  sed "s/^/  /" "$f"
  local p n s
  p=$(grep -c '^ok ' "$f")
  n=$(grep -c '^not ok ' "$f")
  s=$(grep -c '^1\.\.0 # SKIP' "$f")
  pass=$((pass + p))
  fail=$((fail + n))
  if [ "$rc" != 0 ]; then
    fail=$((fail + 1))
    echo "not ok - $label exited $rc"
  elif [ "$s" != 0 ]; then
    fail=$((fail + 1)) # on this machine a skip means the GPU was not seen
    echo "not ok - $label skipped on a machine lent for its GPU"
  else
    echo "ok - $label: $p passed, $n failed"
  fi
  rm -f "$f"
}

export top_builddir=$new FABSOCK_LIB=$new/.libs/libfabsock.so
tap "gpu_core_test" "$here/run.sh" --core
tap "gpu_socket_test without libfabsock" "$here/run.sh" --plain
for env in FABSOCK_TRANSPORT=auto FABSOCK_UPGRADE_BYTES=0 FABSOCK_TRANSPORT=tcp; do
  tap "gpu_socket_test preloaded, $env" env "$env" "$here/run.sh"
done

if [ "${GPU_CHECK_BENCH:-1}" != 0 ]; then
  bench() { # NAME BUILD
    echo "# bench/gpu.sh $1 ($2)"
    mkdir -p "$out/b-$1"
    "$src/bench/gpu.sh" "$2/.libs/libfabsock.so" "$out/b-$1" "$rounds" &&
      mv "$out/b-$1/gpu.json" "$out/gpu-$1.json"
    rmdir "$out/b-$1" 2>/dev/null
  }
  bench new "$new"
  if [ -n "$old" ]; then
    bench old "$old"
    bench new2 "$new"
  fi
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
