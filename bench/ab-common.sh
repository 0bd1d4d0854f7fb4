# ab-common.sh: what the builds-alternating benchmarks share (libs-ab.sh, calls-ab.sh,
# proxy-db.sh; doorbell.sh its arguments and rounds), sourced by them, and
# median for servers-common.sh too.
#   ab_parse NAME "$@"   -r ROUNDS -s SECONDS LIB...: sets rounds (default 3),
#                        secs (default $ab_default_secs, else 5) and libs (each
#                        a library's full path, "plain", or
#                        LIB,VAR=VALUE[,...]); exits 2 with the usage, 1 for a
#                        library that is not there
#   ab_pre LIB           the env(1) words that run a program under LIB
#   ab_rounds FN         calls FN LIB I ROUND for every LIB of every round,
#                        each round starting one LIB later
#   ab_report W...       per workload W, from $tmp/W.I (one figure per line
#                        and round): the table and the JSON line
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

ab_parse() {
  local name=$1 o l
  shift
  rounds=3 secs=${ab_default_secs:-5}
  OPTIND=1
  while getopts r:s: o; do
    case $o in
    r) rounds=$OPTARG ;;
    s) secs=$OPTARG ;;
    *) echo "usage: $name [-r ROUNDS] [-s SECONDS] LIB..." >&2; exit 2 ;;
    esac
  done
  shift $((OPTIND - 1))
  [ $# -ge 1 ] || { echo "usage: $name [-r ROUNDS] [-s SECONDS] LIB..." >&2; exit 2; }
  libs=()
  for l in "$@"; do
    if [ "$l" = plain ]; then libs+=(plain); continue; fi
    [ -f "${l%%,*}" ] || { echo "$(basename "$name" .sh): no library at ${l%%,*}" >&2; exit 1; }
    libs+=("$(readlink -f "${l%%,*}")${l#"${l%%,*}"}")
  done
}

ab_pre() { if [ "$1" = plain ]; then echo env; else echo "env LD_PRELOAD=${1%%,*} ${1#"${1%%,*}"}" | tr , ' '; fi; }

ab_rounds() {
  local r k i n=${#libs[@]}
  for r in $(seq "$rounds"); do
    # Each round starts one LIB later (round 2 of plain A B: A B plain): the
    # second of two runs is often slower whatever it runs (never-slower.sh).
    for k in $(seq 0 $((n - 1))); do
      i=$(((k + r - 1) % n))
      "$1" "${libs[$i]}" "$i" "$r"
    done
  done
}

ab_report() {
  local w i first m ratio paired json sep=
  printf '\n%-10s %-40s %14s %8s %8s\n' workload lib median "vs first" "paired"
  json="{\"rounds\": $rounds, \"seconds\": $secs, \"results\": ["
  for w in "$@"; do
    [ -e "$tmp/$w.0" ] || continue
    first=$(median <"$tmp/$w.0")
    for i in "${!libs[@]}"; do
      m=$(median <"$tmp/$w.$i")
      ratio=$(awk -v p="$first" -v q="$m" 'BEGIN { if (p > 0 && q == q + 0) printf "%.2f", q / p; else print "nan" }')
      paired=$(paste "$tmp/$w.0" "$tmp/$w.$i" | awk '$1 > 0 && $2 == $2 + 0 { printf "%.4f\n", $2 / $1 }' | median)
      paired=$(awk -v v="$paired" 'BEGIN { if (v == v + 0 && v != "") printf "%.2f", v; else print "nan" }')
      printf '%-10s %-40s %14s %7sx %7sx\n' "$w" "${libs[$i]}" "$m" "$ratio" "$paired"
      json="$json$sep{\"workload\": \"$w\", \"lib\": \"${libs[$i]}\", \"median\": $m, \"vs_first\": $ratio, \"paired\": $paired}"
      sep=", "
    done
  done
  echo "$json]}"
}
