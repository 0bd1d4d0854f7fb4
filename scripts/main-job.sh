#!/usr/bin/env bash
# The main job: on a fresh Debian 12 machine (as root) install what is needed,
# build, then run unmodified programs side by side, plain TCP against
# libfabsock (shm on one host), printing the speed-up and `fabsock stat`.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/install-deps.sh"
"$top/scripts/build.sh"
exec "$top/bench/run-main.sh" "${BUILD_DIR:-$top/build}"
