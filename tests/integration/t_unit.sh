#!/bin/bash
# t_unit: `fabsock unit` prints a systemd drop-in that systemd accepts.
# A test service gets the drop-in in its UNIT.d/ folder and
# `systemd-analyze verify` must report nothing about it: no unknown key, no
# bad quoting, no unresolved specifier, with a config path that holds a
# space, a '%' and a '"'.  A broken drop-in beside it must be reported
# (so the check can fail here), and `fabsock run` must give a program the
# same environment the drop-in names.  (One run: no modes.)
. "$(dirname "$0")/lib.sh"
require_cmd systemd-analyze
[ -x "$FABSOCK_BIN" ] || skip_all "fabsock tool $FABSOCK_BIN not built"
[ -n "$FABSOCK_LIB" ] || skip_all "FABSOCK_LIB unset"
MODE=tool

dir=$IT_TMP/units
mkdir -p "$dir/fstest.service.d" "$IT_TMP/odd dir"
cfg="$IT_TMP/odd dir/100%z \"q\".conf" # %z: no such specifier, so an unescaped % is reported
echo "default transport=auto" >"$cfg"
printf '[Unit]\nDescription=fabsock unit test\n[Service]\nExecStart=/bin/true\n' >"$dir/fstest.service"
verify() { SYSTEMD_UNIT_PATH="$dir:" systemd-analyze verify "$dir/fstest.service" 2>&1; }

name="fabsock unit: systemd-analyze verify takes the drop-in without a word"
out=$IT_TMP/unit.conf
if FABSOCK_LIB=$FABSOCK_LIB "$FABSOCK_BIN" unit --log info --transport shm --config "$cfg" fstest.service >"$out" 2>"$out.err"; then
  cp "$out" "$dir/fstest.service.d/fabsock.conf"
  said=$(verify | grep -F 'fabsock.conf')
  if [ -z "$said" ] && grep -q '^Environment="LD_PRELOAD=' "$out"; then tap_ok "$name" "$(grep -c '^Environment=' "$out") Environment= lines"
  else tap_not_ok "$name" "verify: ${said:-no LD_PRELOAD line}" "$out"; fi
else
  tap_not_ok "$name" "fabsock unit failed: $(head -c 200 "$out.err")"
fi

name="fabsock unit: a broken drop-in is reported (the check can fail)"
printf '[Service]\nEnvironment="FABSOCK_CONFIG=/x/100%%z"\nEnvironmnt=x\n' >"$dir/fstest.service.d/broken.conf"
said=$(verify | grep -cF 'broken.conf')
rm -f "$dir/fstest.service.d/broken.conf"
if [ "$said" -ge 2 ]; then tap_ok "$name" "$said warnings"; else tap_not_ok "$name" "systemd-analyze said $said things about it"; fi

# systemd's unquoting (enough for what fabsock writes): drop the outer
# quotes, then \X -> X and %% -> %.
name="fabsock unit: the drop-in's environment is the one fabsock run gives"
real_python
want=$("$IT_PYTHON" - "$out" <<'PY'
import re, sys
for line in open(sys.argv[1]):
    m = re.match(r'^Environment="(.*)"$', line.rstrip("\n"))
    if m:
        v = re.sub(r'\\(.)', r'\1', m.group(1).replace("%%", "%"))
        print(v)
PY
)
got=$(FABSOCK_LIB=$FABSOCK_LIB "$FABSOCK_BIN" run --log info --transport shm --config "$cfg" -- env |
  grep -E '^(LD_PRELOAD|FABSOCK_TRANSPORT|FABSOCK_CONFIG|FABSOCK_LOG)=' | sort)
want=$(printf '%s\n' "$want" | sort)
# run appends any LD_PRELOAD the caller had; the drop-in names the library alone.
got=$(printf '%s\n' "$got" | sed -E 's/^(LD_PRELOAD=[^:]*):.*/\1/')
if [ -n "$want" ] && [ "$want" = "$got" ]; then tap_ok "$name" "$(echo "$want" | wc -l) variables"
else tap_not_ok "$name" "drop-in: $(echo $want) / run: $(echo $got)"; fi
it_done
