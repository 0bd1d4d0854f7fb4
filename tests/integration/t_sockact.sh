#!/bin/bash
# t_sockact: a socket-activated server.  systemd-socket-activate makes the
# listener and execs tests/progs/echosrv -L with it as fd 3 (LISTEN_FDS=1),
# passing LD_PRELOAD on (-E) as a unit's Environment= would: the server never
# calls socket() or listen() itself.  4 connections x 1 MiB verified echo,
# held open halfway: shm when both ends are preloaded.  Then inetd style
# (--inetd -a, systemd's Accept=yes): the manager accepts and execs cat per
# connection with the socket as its stdin and stdout, the connection
# inherited across exec (as sshd's re-exec has it): cat echoes, on shm too.
. "$(dirname "$0")/lib.sh"
require_cmd systemd-socket-activate
require_progs echosrv mtclient
IT_CLIENT_TIMEOUT=${IT_CLIENT_TIMEOUT:-30}

for MODE in $(it_modes); do
 for KIND in listener inetd; do
  port=$(pick_port)
  if [ $KIND = listener ]; then
    name="socket-activated echosrv (listener inherited across exec), 4 x 1 MiB echo"
    start_server sockact systemd-socket-activate -E LD_PRELOAD -l "127.0.0.1:$port" "$PROGS/echosrv" -L -e
  else
    name="inetd-style cat (connection inherited across exec as stdin/stdout), 4 x 1 MiB echo"
    start_server sockact systemd-socket-activate -E LD_PRELOAD --inetd -a -l "127.0.0.1:$port" cat
  fi
  if ! wait_port "$port" "$SERVER_PID" 20; then
    server_status; tap_not_ok "$name [$MODE]" "systemd-socket-activate did not listen ($SRV_STATUS)" "$SERVER_LOG"
    stop_server; continue
  fi
  held_mtclient "$name" sockact "$port" "$IT_TMP/sockact.$KIND.$MODE.out" -t 4 -n 1M
  fabric_report "$name" "$FABRIC_STATUS"
  stop_server
 done
done
it_done
