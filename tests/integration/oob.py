#!/usr/bin/env python3
"""Urgent data (MSG_OOB): oob.py server PORTFILE | client PORT HOLDFILE.

The server echoes, and answers each urgent byte (select's exceptional
condition, recv MSG_OOB) with b'URG' and the byte, until EOF.  The client
makes 50 round trips of 64 KiB (past the upgrade threshold), prints
"exchanged", waits for HOLDFILE (the test looks at the connection), then
sends b'!' with MSG_OOB and expects b'URG!' back, then one more round
trip.  On a fabric, send(MSG_OOB) failed with EOPNOTSUPP where TCP sends
the urgent byte.
"""
import select
import socket
import sys

from itsock import echo_trips, exact, listen_portfile, wait_path


def server(portfile):
    ls = listen_portfile(portfile)
    c, _ = ls.accept()
    urgent = 0
    while True:
        r, _, x = select.select([c], [], [c])
        if x:
            try:
                b = c.recv(1, socket.MSG_OOB)
            except BlockingIOError:
                b = b''
            if b:
                c.sendall(b'URG' + b)
                urgent += 1
                continue
        if r:
            b = c.recv(65536)
            if not b:
                break
            c.sendall(b)
    print('urgent bytes: %d' % urgent)


def client(port, hold):
    s = socket.create_connection(('127.0.0.1', port))
    echo_trips(s, 50)
    wait_path(hold)
    if s.send(b'!', socket.MSG_OOB) != 1:
        raise SystemExit('send MSG_OOB: short')
    got = exact(s, 4)
    if got != b'URG!':
        raise SystemExit('urgent byte answered with %r' % got)
    echo_trips(s, 1)
    print('urgent byte answered, the stream goes on')


if __name__ == '__main__':
    if sys.argv[1] == 'server':
        server(sys.argv[2])
    else:
        client(int(sys.argv[2]), sys.argv[3])
