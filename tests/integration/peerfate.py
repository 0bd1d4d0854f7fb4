#!/usr/bin/env python3
"""An accepted end whose connecting end gave up: peerfate.py server PORTFILE
| client PORT HOLDFILE HOW.

The server echoes one connection until EOF (on a dual-stack "::" listener
when PEERFATE_V6=1, so that its end's addresses are IPv4-mapped), then
prints "served 1".  The client connects to 127.0.0.1 and, by HOW, gives up the upgrade for
good before its 50 round trips of 64 KiB (each checked):
  fork    forks a child that holds the socket too until HOLDFILE exists
          (rsync's receiver and generator): one process at a time upgrades
  policy  re-executes itself with FABSOCK_TRANSPORT=tcp (its own rule, not
          the server's)
then prints "exchanged", waits for HOLDFILE (the test reads fabsock stat)
and makes one more round trip.  The server's end never hears of it: the
connecting end alone asks for the upgrade.
"""
import os
import socket
import sys

from itsock import echo_trips, serve_each, wait_path


def server(portfile):
    if os.environ.get('PEERFATE_V6') == '1':
        ls = socket.socket(socket.AF_INET6)
        ls.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        ls.bind(('::', 0))
    else:
        ls = socket.socket()
        ls.bind(('127.0.0.1', 0))
    ls.listen(1)
    with open(portfile + '.tmp', 'w') as f:
        f.write('%d\n' % ls.getsockname()[1])
    os.rename(portfile + '.tmp', portfile)
    serve_each(ls, 1)


def client(port, hold, how):
    if how == 'policy' and os.environ.get('FABSOCK_TRANSPORT') != 'tcp':
        os.environ['FABSOCK_TRANSPORT'] = 'tcp'
        os.execv(sys.executable, [sys.executable] + sys.argv)
    s = socket.create_connection(('127.0.0.1', port))
    child = 0
    if how == 'fork':
        child = os.fork()
        if child == 0:
            wait_path(hold)
            os._exit(0)
    echo_trips(s, 50)
    wait_path(hold)
    echo_trips(s, 1)
    s.close()
    if child and os.waitpid(child, 0)[1] != 0:
        raise SystemExit('the fork child failed')


if __name__ == '__main__':
    if sys.argv[1] == 'server':
        server(sys.argv[2])
    else:
        client(int(sys.argv[2]), sys.argv[3], sys.argv[4])
