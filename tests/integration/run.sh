#!/bin/bash
# tests/integration/run.sh: run the integration tests as one TAP stream.
#
#   run.sh [NAME...]      NAME: t_curl_http, t_curl_http.sh or curl_http
#                         (default: every tests/integration/t_*.sh)
#
# Each t_*.sh covers all modes (see lib.sh).  Their TAP lines are renumbered
# into one stream, anything else is passed on as a "# " comment; the plan
# comes last, then "# N passed, N failed, N skipped".  A script that exits
# non-zero without reporting a failure, reports nothing, or runs longer than
# FABSOCK_IT_SCRIPT_TIMEOUT seconds (default 240) adds a failure.
# FABSOCK_IT_UPGRADE=N, random or random:SEED: every preloaded process
# upgrades its connections at N bytes (FABSOCK_UPGRADE_BYTES), or at a point
# drawn from SEED in [0, 4096), below the default threshold, so whatever a
# test expects at the default holds there too; the point and seed are
# printed and added to every test's name (make check-upgrade-points).
# Exit 0 only when nothing failed.
set -u
dir=$(cd "$(dirname "$0")" && pwd)
script_timeout=${FABSOCK_IT_SCRIPT_TIMEOUT:-240}
export IT_UNDER_RUNNER=1

scripts=()
if [ $# -gt 0 ]; then
  for a in "$@"; do
    a=${a##*/}; a=${a%.sh}; a=${a#t_}
    if [ ! -f "$dir/t_$a.sh" ]; then echo "Bail out! no test t_$a.sh in $dir"; exit 1; fi
    scripts+=("$dir/t_$a.sh")
  done
else
  for f in "$dir"/t_*.sh; do scripts+=("$f"); done
fi

if [ -n "${FABSOCK_LIB:-}" ] && [ ! -f "$FABSOCK_LIB" ]; then
  echo "Bail out! FABSOCK_LIB=$FABSOCK_LIB does not exist (build the library first)"
  exit 1
fi
# Resolve python3 once (a pyenv shim costs a lot to start on every call).
if [ -z "${IT_PYTHON:-}" ] && command -v python3 >/dev/null 2>&1; then
  IT_PYTHON=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null) && export IT_PYTHON
fi
echo "# libfabsock integration tests: modes '${FABSOCK_IT_MODES:-plain client server both}'," \
  "preload '${FABSOCK_LIB:-none (FABSOCK_LIB unset)}', fabric checks '${FABSOCK_EXPECT_FABRIC:-off}'"

if [ -n "${FABSOCK_IT_UPGRADE:-}" ]; then
  seed=
  case $FABSOCK_IT_UPGRADE in
    random) seed=$(( $(date +%s%N) / 1000 % 1000000007 )) ;;
    random:*) seed=${FABSOCK_IT_UPGRADE#random:} ;;
  esac
  if [ -n "$seed" ]; then
    [[ $seed =~ ^[0-9]+$ ]] || { echo "Bail out! FABSOCK_IT_UPGRADE=random:SEED wants a number"; exit 1; }
    point=$(( (seed * 1103515245 + 12345) % 4096 ))
  else
    point=$FABSOCK_IT_UPGRADE
    [[ $point =~ ^[0-9]+$ ]] || { echo "Bail out! FABSOCK_IT_UPGRADE: a byte count, random or random:SEED"; exit 1; }
  fi
  export FABSOCK_UPGRADE_BYTES=$point
  export IT_NAME_SUFFIX=" {upgrade at $point bytes${seed:+, seed $seed}}"
  echo "# every preloaded process upgrades at $point bytes${seed:+ (FABSOCK_IT_UPGRADE=random:$seed replays it)}"
fi
if [ "${FABSOCK_DOORBELL:-1}" = 0 ]; then
  export IT_NAME_SUFFIX="${IT_NAME_SUFFIX:- }{no doorbells}"
  echo "# FABSOCK_DOORBELL=0: every upgraded connection wakes on eventfds of its own"
fi

n=0 pass=0 fail=0 skip=0 todo=0
suite_t0=$(date +%s)
for s in "${scripts[@]}"; do
  name=$(basename "$s" .sh)
  t0=$(date +%s)
  seen=0 failed_here=0 rc=
  while IFS= read -r line; do
    if [[ $line =~ ^(not\ ok|ok)\ [0-9]+(.*)$ ]]; then
      n=$((n + 1)); seen=$((seen + 1))
      verdict=${BASH_REMATCH[1]} rest=${BASH_REMATCH[2]}
      line="$verdict $n$rest"
      if [ "$verdict" = "not ok" ] && [[ $rest =~ \#\ *TODO ]]; then
        todo=$((todo + 1)) # a known open bug: shown, not counted as a failure
      elif [ "$verdict" = "not ok" ]; then
        fail=$((fail + 1)); failed_here=$((failed_here + 1))
      elif [[ $rest =~ \#\ *[Ss][Kk][Ii][Pp] ]]; then
        skip=$((skip + 1))
      else
        pass=$((pass + 1))
      fi
      echo "$line"
    elif [[ $line =~ ^__it_rc=([0-9]+)$ ]]; then
      rc=${BASH_REMATCH[1]}
    elif [[ $line =~ ^1\.\.[0-9]+ ]]; then
      :
    elif [[ $line =~ ^# ]]; then
      echo "$line"
    else
      echo "# $name: $line"
    fi
  done < <(timeout -k 10 "$script_timeout" bash "$s" </dev/null 2>&1; echo "__it_rc=$?")
  secs=$(($(date +%s) - t0))
  if [ "${rc:-1}" = 124 ] || [ "${rc:-1}" = 137 ]; then
    n=$((n + 1)); fail=$((fail + 1))
    echo "not ok $n - $name # failed: script timed out after ${script_timeout}s"
  elif [ "${rc:-1}" != 0 ] && [ "$failed_here" -eq 0 ]; then
    n=$((n + 1)); fail=$((fail + 1))
    echo "not ok $n - $name # failed: script exited with status ${rc:-unknown} without reporting a failure"
  elif [ "$seen" -eq 0 ]; then
    n=$((n + 1)); fail=$((fail + 1))
    echo "not ok $n - $name # failed: script reported no test"
  fi
  echo "# $name took ${secs}s"
done
echo "1..$n"
echo "# integration: $pass passed, $fail failed, $skip skipped, $todo known open bugs (TODO) in $(($(date +%s) - suite_t0))s"
[ "$fail" -eq 0 ]
