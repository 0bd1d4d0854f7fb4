#!/bin/bash
# Runs inside the VM (run.sh boots it): every tests/vm/t_rdma_*.sh in turn (smoke first), each bounded by a
# timeout, as ONE TAP stream: test points renumbered and prefixed with the script's name, the
# plan printed at the end.  A script that dies, times out or runs a number of points other than
# its plan adds a failing point.
#
# Environment: FABSOCK_VM_TESTS  space-separated script names to run (default: all, sorted)
#              FABSOCK_VM_TEST_TIMEOUT  seconds per script (default 300)
dir=$(cd "$(dirname "$0")" && pwd -P)
limit=${FABSOCK_VM_TEST_TIMEOUT:-300}
if [ -n "${FABSOCK_VM_TESTS:-}" ]; then
  tests=()
  for t in $FABSOCK_VM_TESTS; do tests+=("$dir/$(basename "$t" .sh).sh"); done
else
  # The smoke test first: when it fails, nothing after it means much.
  tests=("$dir/t_rdma_smoke.sh")
  for t in "$dir"/t_rdma_*.sh; do [ "$t" = "$dir/t_rdma_smoke.sh" ] || tests+=("$t"); done
fi

n=0
for t in "${tests[@]}"; do
  name=$(basename "$t" .sh)
  echo "# ---- $name"
  start=$SECONDS
  points=0 plan= st=
  # A script may need longer than the default: a "# vm-timeout: N" line in it says so.
  tl=$(sed -n 's/^# vm-timeout: \([0-9][0-9]*\)$/\1/p' "$t" | head -n 1)
  [ -n "$tl" ] && [ "$tl" -gt "$limit" ] && tl_use=$tl || tl_use=$limit
  while IFS= read -r line; do
    case $line in
      "__guest_suite_exit "*) st=${line#__guest_suite_exit } ;;
      "ok "* | "not ok "*)
        n=$((n + 1)); points=$((points + 1))
        verdict=${line%%ok *}ok; rest=${line#"$verdict"}
        rest=$(sed -E 's/^ *[0-9]+ *(- *)?//' <<< "$rest")
        echo "$verdict $n - $name: $rest" ;;
      [0-9]*..[0-9]*) plan=${line#*..} ;;
      "#"*) echo "$line" ;;
      *) echo "# $line" ;;
    esac
  done < <(timeout -k 10 "$tl_use" bash "$t" 2>&1; echo "__guest_suite_exit $?")
  echo "# $name: $((SECONDS - start))s"
  if [ "$st" = 124 ] || [ "$st" = 137 ]; then
    n=$((n + 1)); echo "not ok $n - $name: timed out after ${tl_use}s"
  elif [ -z "$plan" ] || [ "$plan" != "$points" ]; then
    n=$((n + 1)); echo "not ok $n - $name: ran $points test points, planned ${plan:-none} (exit $st)"
  fi
done
echo "1..$n"
