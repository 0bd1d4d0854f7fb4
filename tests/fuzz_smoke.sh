#!/bin/bash
# make check-fuzz: every libFuzzer target builds, replays its seed corpus and
# then runs a fixed number of inputs from a fixed seed, under ASan and UBSan.
# Not fuzzing (`make fuzz-NAME` is, for minutes): the guard that the fuzzers
# still link against the code they test (two had stopped building unseen),
# and that the seeds and the first inputs after them still pass.  A crash
# here is a real bug, never noise: the seed and the count are fixed.
# TAP, one point per fuzzer.  Usage: fuzz_smoke.sh BUILD_DIR SRC_DIR [RUNS]
set -u
build=$1 src=$2 runs=${3:-20000}
cd "$build" || exit 1
if ! command -v clang >/dev/null 2>&1; then
  echo "1..0 # SKIP clang is not installed (scripts/install-deps.sh installs it)"
  exit 0
fi
# name, make target, seed directories (in the source tree) or files to copy
fuzzers="policy:fuzz/fuzz_policy:fuzz/corpus/policy
frame:fuzz/fuzz_frame:fuzz/corpus/hook-frame
dpi:fuzz/fuzz_dpi_patterns:fuzz/corpus/hook-dpi
rdmacm:fuzz/fuzz_rdmacm:fuzz/corpus/rdmacm
reach:fuzz/fuzz_reach:
ring:fuzz/fuzz_ring:"
n=$(printf '%s\n' "$fuzzers" | wc -l)
echo "1..$n"
i=0 fail=0
while IFS=: read -r name bin seeds; do
  i=$((i + 1))
  work=$(mktemp -d "${TMPDIR:-/tmp}/fuzz-smoke.$name.XXXXXX")
  log=$work/log
  if ! make -s "$bin" >"$log" 2>&1; then
    echo "not ok $i - fuzz $name: does not build"
    sed 's/^/# /' "$log" | tail -n 15
    fail=1; rm -rf "$work"; continue
  fi
  dirs=$work/corpus
  mkdir -p "$dirs"
  [ -n "$seeds" ] && dirs="$dirs $src/$seeds"
  # fuzz_reach reads program files: the test programs built to be looked into
  [ "$name" = reach ] && cp tests/progs/reach_probe tests/progs/reach_gonote "$work/corpus/" 2>/dev/null
  # -max_len bounds each input as `make fuzz-NAME` does; the corpus directory
  # is a scratch copy, so the source tree's seeds are only read.
  if ./"$bin" -seed=1 -runs="$runs" -max_len=4096 -artifact_prefix="$work/" $dirs >"$log" 2>&1; then
    echo "ok $i - fuzz $name: seeds and $runs inputs, no finding ($(ls "$work/corpus" | wc -l) inputs kept)"
  else
    echo "not ok $i - fuzz $name: a finding (input kept in $work)"
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" | head -n 10 | sed 's/^/# /'
    fail=1; continue
  fi
  rm -rf "$work"
done <<<"$fuzzers"
exit $fail
