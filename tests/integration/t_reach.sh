#!/bin/bash
# t_reach: `fabsock run` warns where LD_PRELOAD cannot reach the program,
# and the warning is true.  tests/progs/reach_probe prints whether
# libfabsock is mapped into it; built dynamic (no warning, mapped) and
# static (warning, not mapped), and run as nobody from a set-user-ID-root
# copy and from a copy with file capabilities (warning, not mapped: the
# loader's secure-execution mode), beside a plain copy (no warning, mapped).
# A real Go program is tried where one is installed.  (One run: no modes.)
. "$(dirname "$0")/lib.sh"
require_progs reach_probe reach_static
[ -x "$FABSOCK_BIN" ] || skip_all "fabsock tool $FABSOCK_BIN not built"
[ -n "$FABSOCK_LIB" ] || skip_all "FABSOCK_LIB unset"
MODE=tool

# probe NAME WANT_WARN WANT_MAPPED [RUNNER...] -- PROGRAM: one check.
probe() {
  local name=$1 warn=$2 mapped=$3; shift 3
  local runner=() out err
  while [ "$1" != -- ]; do runner+=("$1"); shift; done; shift
  out=$("${runner[@]}" env -u FABSOCK_LOG FABSOCK_LIB="$FABSOCK_LIB" "$FABSOCK_BIN" run -- "$@" 2>"$IT_TMP/err")
  err=$(cat "$IT_TMP/err")
  local said=0; grep -q "^fabsock run: warning: .*stay on kernel TCP" "$IT_TMP/err" && said=1
  if [ $said = "$warn" ] && [ "${out%% *}" = "mapped=$mapped" ]; then
    tap_ok "$name" "$out${err:+; $(echo "$err" | cut -c1-160)}"
  else
    tap_not_ok "$name" "want warning=$warn mapped=$mapped; got warning=$said, ${out:-no output}; stderr: ${err:-none}"
  fi
}

probe "dynamic program: no warning, library loaded" 0 1 -- "$PROGS/reach_probe"
probe "static program: warned, and the library is indeed not loaded" 1 0 -- "$PROGS/reach_static"
out=$(env -u FABSOCK_LOG FABSOCK_LIB=$FABSOCK_LIB "$FABSOCK_BIN" run --log off -- "$PROGS/reach_static" 2>&1)
if [ "$out" = "mapped=0 uid=$(id -u) euid=$(id -u)" ]; then tap_ok "--log off keeps the warning quiet"
else tap_not_ok "--log off keeps the warning quiet" "said: $out"; fi

# Secure execution needs another user, root to make the copies, and a mount
# that honours set-user-ID bits.
dir=$IT_TMP/reach
mkdir -p "$dir" && chmod 755 "$IT_TMP" "$dir"
nosuid=0; findmnt -n -o OPTIONS -T "$dir" 2>/dev/null | grep -qw nosuid && nosuid=1
why=
[ "$(id -u)" = 0 ] || why="needs root"
[ -z "$why" ] && ! id nobody >/dev/null 2>&1 && why="no user nobody"
[ -z "$why" ] && [ $nosuid = 1 ] && why="$dir is on a nosuid mount"
[ -z "$why" ] && ! command -v setpriv >/dev/null && why="setpriv not installed"
# nobody must reach the library and the tool.
[ -z "$why" ] && ! setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups -- \
  test -r "$FABSOCK_LIB" -a -x "$FABSOCK_BIN" && why="nobody cannot read $FABSOCK_LIB or run $FABSOCK_BIN"
if [ -n "$why" ]; then
  tap_skip "set-user-ID and file-capability programs" "$why"
else
  AS_NOBODY=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups)
  cp "$PROGS/reach_probe" "$dir/plain" && cp "$PROGS/reach_probe" "$dir/suid" && chmod 4755 "$dir/suid"
  probe "as nobody, a plain copy: no warning, library loaded" 0 1 "${AS_NOBODY[@]}" -- "$dir/plain"
  probe "as nobody, set-user-ID root: warned, and the loader indeed ignored the library" 1 0 "${AS_NOBODY[@]}" -- "$dir/suid"
  cp "$PROGS/reach_probe" "$dir/caps"
  if command -v setcap >/dev/null && setcap cap_net_bind_service+ep "$dir/caps" 2>"$IT_TMP/setcap.err"; then
    probe "as nobody, file capabilities: warned, and the loader indeed ignored the library" 1 0 "${AS_NOBODY[@]}" -- "$dir/caps"
    probe "as root, file capabilities: no warning, library loaded" 0 1 -- "$dir/caps"
  else
    tap_skip "file capabilities" "setcap: $(command -v setcap >/dev/null && head -c 120 "$IT_TMP/setcap.err" || echo not installed)"
  fi
fi

# A real Go program: the warning only (whether its own sockets bypass libc
# is Go's design, not something a probe can print).
go=
for p in go gofmt kubectl docker containerd etcd hugo gh caddy rclone restic; do
  f=$(command -v "$p" 2>/dev/null) || continue
  f=$(readlink -f "$f")
  if grep -qa -m1 '\.note\.go\.buildid' "$f" 2>/dev/null; then go=$f; break; fi
done
if [ -n "$go" ]; then
  env -u FABSOCK_LOG FABSOCK_LIB=$FABSOCK_LIB "$FABSOCK_BIN" run -- "$go" --help >/dev/null 2>"$IT_TMP/go.err"
  if grep -q "is a Go program" "$IT_TMP/go.err"; then tap_ok "a Go program ($go): warned"
  else tap_not_ok "a Go program ($go): warned" "stderr: $(head -c 200 "$IT_TMP/go.err")"; fi
else
  tap_skip "a Go program: warned" "no Go program installed (go, kubectl, docker, ...)"
fi
it_done
