#!/bin/sh
# bench/dpi-patterns.sh: a dpi pattern file (docs/hooks.md) for benchmarks.
#
#   bench/dpi-patterns.sh COUNT bytes|words [SEED] > FILE
#
# bytes: COUNT patterns of 4..32 random bytes, written as \xNN escapes (the
#        match for fabsock-bench --fill random);
# words: COUNT random lowercase words of 4..12 letters (for --fill text: every
#        position of such text starts some pattern's prefix, the hard case).
# The same COUNT, kind and SEED (default 1) give the same file with the same awk.
# Example, the dpi cost on the receiving side of a stream:
#   bench/dpi-patterns.sh 1000 words > /tmp/words.txt
#   fabsock-bench compare --base lib --fill text --tests stream \
#     --hooks dpi:patterns=/tmp/words.txt,action=count
set -eu
count=${1:?usage: dpi-patterns.sh COUNT bytes|words [SEED]}
kind=${2:?usage: dpi-patterns.sh COUNT bytes|words [SEED]}
seed=${3:-1}
case $kind in bytes | words) ;; *) echo "dpi-patterns.sh: kind is bytes or words" >&2; exit 2 ;; esac
awk -v n="$count" -v kind="$kind" -v seed="$seed" 'BEGIN {
  srand(seed)
  printf "# %d random %s (bench/dpi-patterns.sh, seed %d)\n", n, kind, seed
  for (i = 0; i < n; i++) {
    if (kind == "bytes") {
      len = 4 + int(rand() * 29); line = ""
      for (j = 0; j < len; j++) line = line sprintf("\\x%02x", int(rand() * 256))
    } else {
      len = 4 + int(rand() * 9); line = ""
      for (j = 0; j < len; j++) line = line sprintf("%c", 97 + int(rand() * 26))
    }
    print line
  }
}'
