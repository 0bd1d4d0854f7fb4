#!/usr/bin/env python3
"""TCP Fast Open: fastopen.py server PORTFILE | client PORT HOLDFILE.

The client connects with sendto(MSG_FASTOPEN) (no connect() call: the send
is the connect), twice in a row (the second may carry its bytes in the SYN,
with the cookie the first got), then makes 50 echoed round trips of 64 KiB
on the second, each checked, prints "exchanged", waits for HOLDFILE (the
test looks at the connection) and makes one more.  The server echoes each
connection until EOF.  Under the library the socket stayed "unconnected":
never upgraded, no addresses in fabsock stat.
"""
import socket
import sys

from itsock import echo_trips, exact, listen_portfile, serve_each, wait_path

TCP_FASTOPEN = 23


def server(portfile):
    ls = listen_portfile(portfile, backlog=4)
    ls.setsockopt(socket.IPPROTO_TCP, TCP_FASTOPEN, 16)
    serve_each(ls, 2)


def opened(port, first):
    s = socket.socket()
    if s.sendto(first, socket.MSG_FASTOPEN, ('127.0.0.1', port)) != len(first):
        raise SystemExit('sendto MSG_FASTOPEN: short')
    if exact(s, len(first)) != first:
        raise SystemExit('the first echo differs')
    return s


def client(port, hold):
    a = opened(port, b'first connection')
    s = opened(port, b'second connection')
    echo_trips(s, 50)
    wait_path(hold)
    echo_trips(s, 1)
    s.close()
    a.close()


if __name__ == '__main__':
    if sys.argv[1] == 'server':
        server(sys.argv[2])
    else:
        client(int(sys.argv[2]), sys.argv[3])
