#!/bin/bash
# t_sshd: Debian's OpenSSH server as it runs: a listener that re-execs
# itself per connection (the socket arrives on fd 0, is dup'd and fd 0
# becomes /dev/null), a privileged monitor, a pre-authentication child that
# drops RLIMIT_NOFILE to 1 and confines itself with a seccomp filter, then
# the session.  ssh logs in with a key and moves 8 MiB each way (checked
# with md5sum); a session held 3 s shows where its connection went.
# (Under the library sshd once failed every login: a wake fd added to the
# sandboxed child's ppoll made it EINVAL; then a session hung, its
# connection's own fd pointing at fd 0 after the re-exec had moved it.)
# The library logs at info level here, into sshd's log file: the pre-auth
# child sets RLIMIT_FSIZE to 0 first, and a line written then once killed
# it with SIGXFSZ (every login failed under FABSOCK_LOG=info or debug).
. "$(dirname "$0")/lib.sh"
export FABSOCK_LOG=${FABSOCK_LOG:-info}
require_cmd ssh ssh-keygen md5sum
[ -x /usr/sbin/sshd ] || skip_all "sshd not installed (openssh-server)"
[ "$(id -u)" = 0 ] || skip_all "sshd needs root here (privilege separation)"
mkdir -p /run/sshd

d=$IT_TMP/sshd
mkdir -p "$d" && chmod 700 "$d"
ssh-keygen -q -t ed25519 -N '' -f "$d/hostkey" && ssh-keygen -q -t ed25519 -N '' -f "$d/userkey" ||
  skip_all "ssh-keygen failed"
cp "$d/userkey.pub" "$d/authorized_keys"
head -c 8M /dev/urandom >"$d/blob"
want=$(md5sum <"$d/blob")

for MODE in $(it_modes); do
  port=$(pick_port)
  cat >"$d/sshd_config" <<EOF
Port $port
ListenAddress 127.0.0.1
HostKey $d/hostkey
AuthorizedKeysFile $d/authorized_keys
PidFile $d/sshd.$MODE.pid
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
EOF
  start_server sshd /usr/sbin/sshd -D -e -f "$d/sshd_config"
  if ! wait_port "$port" "$SERVER_PID" 20; then
    server_status; tap_not_ok "sshd [$MODE]" "sshd did not start ($SRV_STATUS)" "$SERVER_LOG"; stop_server; continue
  fi
  ssh_cmd=(ssh -i "$d/userkey" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes
    -o LogLevel=ERROR -p "$port" root@127.0.0.1)

  name="sshd: key login, 8 MiB up and 8 MiB down intact"
  up=$(run_client "${ssh_cmd[@]}" "md5sum" <"$d/blob" 2>"$IT_TMP/ssh-up.$MODE.err")
  rc_up=$?
  down=$(run_client "${ssh_cmd[@]}" "cat $d/blob" 2>"$IT_TMP/ssh-down.$MODE.err" | md5sum)
  WHY=
  [ $rc_up -eq 0 ] && [ "$up" = "$want" ] || WHY="upload: ssh exit $rc_up, md5 '${up:-none}' (want '$want')"
  [ "$down" = "$want" ] || WHY="${WHY:+$WHY; }download: md5 '$down' (want '$want')"
  tap_result "$([ -z "$WHY" ]; echo $?)" "$name [$MODE]" "${WHY:-md5 ${want%% *}}" \
    "$IT_TMP/ssh-up.$MODE.err" "$IT_TMP/ssh-down.$MODE.err" "$SERVER_LOG"

  # A session held open: where its connection went.
  name="sshd: a held session"
  start_bg_client ssh-hold "${ssh_cmd[@]}" "sleep 3; echo held"
  hpid=$BG_PID hlog=$BG_LOG
  expect_fabric "$port" "$(fabric_expected)" 10
  fst=$?
  { wait "$hpid"; } 2>/dev/null
  hrc=$?
  it_forget "$hpid"
  if [ $hrc -eq 0 ] && grep -qx held "$hlog"; then tap_ok "$name [$MODE]";
  else tap_not_ok "$name [$MODE]" "ssh exit $hrc" "$hlog" "$SERVER_LOG"; fi
  # Upgraded at a forced point (make check-upgrade-points), the connection
  # reaches shm in the re-exec'd monitor (a request waits out the listener's
  # fork and the child's re-exec: engine/hold.h), before the monitor forks
  # the pre-authentication child, which confines itself (seccomp, one fd)
  # and takes the end it shares back to TCP for good (reason sandbox): an
  # end is not upgraded again, so only the default threshold's is checked.  (The
  # session itself must work at any point: once, at 0 bytes, ssh gave up
  # now and then, its poll told readable by a REVERT alone.)
  if [ -n "${FABSOCK_IT_UPGRADE:-}" ] && [ "$fst" != 0 ] && [ -n "$(fabric_expected)" ]; then
    tap_todo "$name [$MODE] fabric=$(fabric_expected)" \
      "open bug: upgraded at a forced point, the session ends on TCP (the sandboxed pre-authentication child takes the end it shares back, reason sandbox; never upgraded again)" \
      "${FABRIC_DETAIL:-}"
  else
    fabric_report "$name" $fst
  fi
  stop_server
done
it_done
