#!/usr/bin/env bash
# Configure and build libfabsock out of tree in ./build (or $BUILD_DIR).
# Usage: scripts/build.sh [configure options...]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}
cd "$top"
if [ ! -x configure ] || [ configure.ac -nt configure ] || [ -n "$(find . -name Makefile.include -newer configure 2>/dev/null | head -1)" ]; then
  autoreconf -fi >/dev/null
fi
mkdir -p "$build"
cd "$build"
if [ ! -f Makefile ] || [ "$top/configure" -nt Makefile ] || [ $# -gt 0 ]; then
  "$top/configure" "$@"
fi
make -j"$(nproc)" >/dev/null

echo "built: $build/.libs/libfabsock.so and $build/fabsock"
