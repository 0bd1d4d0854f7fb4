#!/bin/bash
# t_xuser: a server of another user.  tests/progs/echosrv runs as nobody
# (setpriv), the client as root, as with nginx's www-data workers and a
# root client.  4 connections x 4 MiB verified echo, held open halfway: on
# shm when both ends are preloaded (peers of other users are allowed by
# default, docs/design.md 1.3), and on tcp when the server says uid=same
# (FABSOCK_ANY_UID=0), the client then showing why (peer-uid).  Then the
# same echo against an echosrv that binds as root and then becomes nobody
# (-u nobody, as daemons drop privileges): its rendezvous name keeps the
# uid it listened with, its sockets are nobody's; on shm too (the client
# took it for a squatter: not-owner, and nginx in the foreground, whose
# root master serves the name for www-data workers, stayed on TCP).
. "$(dirname "$0")/lib.sh"
require_cmd setpriv
require_progs echosrv mtclient
[ "$(id -u)" = 0 ] || skip_all "needs root to run the server as nobody"
id nobody >/dev/null 2>&1 || skip_all "no user nobody"
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-30}
AS_NOBODY=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups --)

for MODE in $(it_modes); do
  for uid in any same; do
    [ $uid = same ] && [ "$MODE" != both ] && continue
    name="echosrv as nobody, root client, 4 x 4 MiB echo (server uid=$uid)"
    port=$(pick_port)
    FABSOCK_ANY_UID=$([ $uid = any ] && echo 1 || echo 0) \
      start_server xuser "${AS_NOBODY[@]}" "$PROGS/echosrv" -H 127.0.0.1 -p "$port"
    if ! wait_port "$port" "$SERVER_PID" 20; then
      server_status; tap_not_ok "$name [$MODE]" "echosrv did not start as nobody ($SRV_STATUS)" "$SERVER_LOG"
      stop_server; continue
    fi
    held_mtclient "$name" xuser "$port" "$IT_TMP/xuser.$uid.$MODE.out" -t 4 -n 4M
    if [ $uid = any ]; then
      fabric_report "$name" "$FABRIC_STATUS"
    elif fabric_enabled; then
      # uid=same: expect_fabric asked for shm; what it saw must be tcp, peer-uid.
      case "$FABRIC_DETAIL" in
        *reason=peer-uid*) tap_ok "$name [$MODE] stays on tcp (peer-uid)" "$(echo "$FABRIC_DETAIL" | cut -c1-200)" ;;
        *) tap_not_ok "$name [$MODE] stays on tcp (peer-uid)" "saw: $FABRIC_DETAIL" ;;
      esac
    fi
    stop_server
  done
  name="echosrv binds as root then becomes nobody, root client, 4 x 4 MiB echo"
  port=$(pick_port)
  start_server xuser "$PROGS/echosrv" -H 127.0.0.1 -p "$port" -u nobody
  if ! wait_port "$port" "$SERVER_PID" 20; then
    server_status; tap_not_ok "$name [$MODE]" "echosrv -u nobody did not start ($SRV_STATUS)" "$SERVER_LOG"
    stop_server; continue
  fi
  held_mtclient "$name" xuser "$port" "$IT_TMP/xuser.drop.$MODE.out" -t 4 -n 4M
  fabric_report "$name" "$FABRIC_STATUS"
  stop_server
done
it_done
