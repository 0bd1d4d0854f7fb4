#!/bin/bash
# tests/unit/t_layers_selftest.sh: test scripts/check-layers.sh itself.
#
#   t_layers_selftest.sh            ($CHECK_LAYERS overrides the checker's path)
#
# Builds small synthetic trees in a temporary folder (never the real one, which
# may be mid-change) and asserts, for each, the exact set of checker points
# that fail (1 arrows, 2 cycles, 3 sizes, 4 FABSOCK_ getenv, 5 HAVE_RDMA), the
# exit status, and that the diagnostics name the offending file:line.
# Prints TAP; exits 0 when all passed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
checker=${CHECK_LAYERS:-$here/../../scripts/check-layers.sh}
[ -f "$checker" ] || { echo "Bail out! no checker at $checker"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/t_layers.XXXXXX") || { echo "Bail out! mktemp"; exit 1; }
trap 'rm -rf "$work"' EXIT

n=0 failed=0

# put TREE PATH LINE...: write TREE/PATH with one argument a line.
put() {
  local f=$1/$2
  shift 2
  mkdir -p "${f%/*}" && printf '%s\n' "$@" >"$f"
}

# clean NAME: make a tree that obeys every rule, using each allowance the
# checker must not flag (the exceptions are where a lax or strict bug shows).
clean() {
  local t=$work/$1
  put "$t" include/fabsock/hook.h '#pragma once'
  put "$t" base/log.h '#pragma once' '#include <stdio.h>'
  put "$t" base/log.c '#include "config.h"' '#include "log.h"'
  put "$t" base/clock.h '#pragma once' '#include "base/log.h"'
  put "$t" policy/policy.h '#pragma once' '#include "base/log.h"' '#include "fabsock/hook.h"'
  put "$t" policy/policy.c '#include "policy/policy.h"' \
    'const char *v = getenv("FABSOCK_LOG");' 'const char *w = secure_getenv ("FABSOCK_CONF");'
  put "$t" hooks/hook.h '#pragma once' '#include "fabsock/hook.h"' '#include "base/log.h"'
  put "$t" hooks/hook.c '#include "hooks/hook.h"'
  put "$t" gpu/gpu.h '#pragma once' '#include "base/clock.h"'
  # gpu/ may read its own CUDA driver settings (GETENV_EXCEPTIONS).
  put "$t" gpu/gpu.c '#include "gpu/gpu.h"' 'const char *p = getenv("FABSOCK_CUDA_LIB");'
  put "$t" fabric/fabric.h '#pragma once' '#include "policy/policy.h"'
  put "$t" fabric/ring.h '#pragma once' '#include "fabric/fabric.h"'
  put "$t" fabric/ring.c '#include "ring.h"'
  # registry.c alone names the fabrics, and alone outside fabric/rdma/ says HAVE_RDMA.
  put "$t" fabric/registry.c '#include "fabric/fabric.h"' '#include "fabric/shm/shm.h"' \
    '#ifdef HAVE_RDMA' '#include "fabric/rdma/rdma.h"' '#endif'
  put "$t" fabric/shm/shm.h '#pragma once' '#include "fabric/ring.h"' '#include "gpu/gpu.h"'
  put "$t" fabric/shm/shm.c '#include "shm.h"' '#include "fabric/shm/rdv.h"'
  put "$t" fabric/shm/rdv.h '#pragma once' '#include "base/log.h"'
  put "$t" fabric/rdma/rdma.h '#pragma once' '#if HAVE_RDMA' '#include "fabric/fabric.h"' '#endif'
  put "$t" engine/conn.h '#pragma once' '#include "fabric/fabric.h"' '#include "hooks/hook.h"'
  put "$t" engine/conn.c '#include "conn.h"' '#include "engine/sock.h"' '#include "gpu/gpu.h"'
  # A 4-module cycle inside one folder is tolerated.
  put "$t" engine/sock.h '#pragma once' '#include "engine/wait.h"'
  put "$t" engine/wait.h '#pragma once' '#include "engine/ready.h"'
  put "$t" engine/ready.h '#pragma once' '#include "engine/conn.h"'
  put "$t" preload/export.h '#pragma once' '#include "engine/conn.h"'
  put "$t" preload/export.c '#include "preload/export.h"' '#include "fabric/shm/shm.h"'
  put "$t" tests/unit/check_conn.c '#include "engine/conn.h"' '#ifdef HAVE_RDMA' '#endif'
  put "$t" tools/fabsock.c '#include "tools/fabsock.h"' '#include "engine/conn.h"'
  # Build trees and .git are not sources: each holds a file that breaks every rule.
  local f
  for f in build/engine/bad.c obj/engine/bad.c .git/engine/bad.c; do
    put "$t" "$f" '#include "preload/export.h"' 'getenv("FABSOCK_X"); HAVE_RDMA'
  done
  : >"$t/obj/config.status"
  echo "$t"
}

# expect NAME TREE "FAILING POINTS" [PATTERN...]: run the checker on TREE; pass
# when exactly those points fail (space-separated, "" for none), the exit
# status agrees, and each PATTERN (a fixed string) shows in its output.
expect() {
  local name=$1 tree=$2 want=$3 out rc got p why=
  shift 3
  out=$("$checker" "$tree" 2>&1)
  rc=$?
  got=$(printf '%s\n' "$out" | sed -n 's/^not ok \([0-9]*\) .*/\1/p' | tr '\n' ' ')
  got=${got% }
  printf '%s\n' "$out" | grep -q '^1\.\.5$' || why="no plan 1..5"
  [ "$got" = "$want" ] || why="failing points '$got', want '$want'"
  if [ -z "$want" ] && [ "$rc" -ne 0 ]; then why="exit $rc on a passing tree"; fi
  if [ -n "$want" ] && [ "$rc" -eq 0 ]; then why="exit 0 on a failing tree"; fi
  for p in "$@"; do
    printf '%s\n' "$out" | grep -qF -- "$p" || why="no diagnostic '$p'"
  done
  n=$((n + 1))
  if [ -z "$why" ]; then
    echo "ok $n - $name"
  else
    failed=$((failed + 1))
    echo "not ok $n - $name # $why"
    printf '%s\n' "$out" | sed 's/^/#   /'
  fi
}

echo "1..11"

t=$(clean clean)
expect "clean tree passes" "$t" ""

t=$(clean engine_fabric)
put "$t" engine/x.c '#include <string.h>' '#include "fabric/shm/x.h"'
put "$t" fabric/shm/x.h '#pragma once'
expect "engine/ including fabric/shm/ fails point 1" "$t" "1" \
  'engine/x.c:2 includes "fabric/shm/x.h" (layer engine may not include layer fabric/shm)'

t=$(clean engine_preload)
put "$t" engine/y.c '#include "engine/conn.h"' '  #  include "preload/export.h"'
expect "engine/ including a preload/ header fails point 1" "$t" "1" \
  'engine/y.c:2 includes "preload/export.h" (layer engine may not include layer preload)'

t=$(clean tests_preload)
put "$t" tests/unit/check_export.c '#include "preload/export.h"'
expect "tests/ including a preload/ header fails point 1" "$t" "1" \
  'tests/unit/check_export.c:1 includes "preload/export.h"'

t=$(clean fabric_top)
put "$t" fabric/chan.c '#include "fabric/shm/shm.h"'
expect "fabric/ top level other than registry.c naming a fabric fails point 1" "$t" "1" \
  'fabric/chan.c:1 includes "fabric/shm/shm.h" (layer fabric may not include layer fabric/shm)'

t=$(clean cycle5)
for i in 1 2 3 4 5; do
  put "$t" "policy/m$i.h" '#pragma once'
  put "$t" "policy/m$i.c" "#include \"policy/m$i.h\"" "#include \"policy/m$((i % 5 + 1)).h\""
done
expect "5-module cycle in one folder fails point 2" "$t" "2" \
  'cycle (5 modules, over 4): policy/m1 policy/m2 policy/m3 policy/m4 policy/m5' \
  'policy/m5.c:2 includes "policy/m1.h"'

# Both arrows are allowed (registry.c names fabric/shm/, which sees fabric/),
# so only the cycle rule can catch this one.
t=$(clean cycle2)
put "$t" fabric/registry.h '#pragma once'
put "$t" fabric/shm/shm.c '#include "shm.h"' '#include "fabric/registry.h"'
expect "2-module cycle across two folders fails point 2" "$t" "2" \
  'cycle (across folders fabric/, fabric/shm/): fabric/registry fabric/shm/shm' \
  'fabric/shm/shm.c:2 includes "fabric/registry.h"'

t=$(clean big)
put "$t" base/big.c '#include "base/log.h"'
seq 899 | sed 's,^,/* ,; s,$, */,' >>"$t/base/big.c"
seq 900 >"$t/tools/big.c"               # tools/ is not held to the size rule
expect "900-line library file fails point 3" "$t" "3" 'base/big.c: 900 lines'

t=$(clean getenv)
put "$t" engine/z.c '#include "engine/conn.h"' 'int f(void) { return !!getenv("FABSOCK_X"); }'
put "$t" hooks/z.c 'const char *q = secure_getenv("FABSOCK_CUDA_X");'  # gpu/'s exception only
expect "getenv(\"FABSOCK_X\") outside policy/ fails point 4" "$t" "4" \
  'engine/z.c:2 reads FABSOCK_X' 'hooks/z.c:1 reads FABSOCK_CUDA_X'

t=$(clean rdma)
put "$t" engine/r.c '#include "engine/conn.h"' '#if defined(HAVE_RDMA)' '#endif'
expect "HAVE_RDMA in engine/ fails point 5" "$t" "5" 'engine/r.c:2 mentions HAVE_RDMA'

# A tree with a problem of every kind fails every point at once.
t=$(clean all)
cp -r "$work"/engine_fabric/engine "$work"/cycle5/policy "$work"/big/base "$t"/ &&
  cp -r "$work"/getenv/engine/z.c "$work"/rdma/engine/r.c "$t"/engine/ &&
  cp -r "$work"/engine_fabric/fabric/shm/x.h "$t"/fabric/shm/
expect "a tree with every problem fails every point" "$t" "1 2 3 4 5"

[ "$failed" -eq 0 ]
