#!/bin/sh
# GPU tests for a machine with a CUDA driver and a device (TAP on stdout).
#
#   tests/gpu/run.sh              gpu_socket_test under LD_PRELOAD=libfabsock.so
#   tests/gpu/run.sh --core       gpu_core_test (gpu/ over the real driver, no preload)
#   tests/gpu/run.sh --plain      gpu_socket_test without libfabsock (the EFAULT baseline)
#
# Without a driver or a device the programs print "1..0 # SKIP ..." and exit 0,
# so `make check` passes on machines without a GPU.  Environment: top_builddir
# and FABSOCK_LIB (the make check harness exports both), FABSOCK_CUDA_LIB (a
# driver other than libcuda.so.1), GPU_TEST_MAX_MB (largest transfer, default
# 256).  Under the preload every device transfer must arrive intact; with
# --plain the kernel's EFAULT is the expected answer.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${top_builddir:-$here/../..}
bin=$build/tests/gpu
lib=${FABSOCK_LIB:-$build/.libs/libfabsock.so}

case ${1:-} in
--core)
  exec "$bin/gpu_core_test" ;;
--plain)
  exec "$bin/gpu_socket_test" ;;
"")
  if [ ! -e "$lib" ]; then
    echo "1..0 # SKIP libfabsock.so not built ($lib)"
    exit 0
  fi
  LD_PRELOAD=$lib${LD_PRELOAD:+:$LD_PRELOAD} exec "$bin/gpu_socket_test" ;;
*)
  echo "usage: $0 [--core|--plain]" >&2
  exit 2 ;;
esac
