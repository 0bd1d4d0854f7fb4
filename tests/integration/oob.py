#!/usr/bin/env python3
"""Urgent data (MSG_OOB): oob.py server PORTFILE | client PORT HOLDFILE [reader].

The server echoes, and answers each urgent byte (select's exceptional
condition, recv MSG_OOB) with b'URG' and the byte, until EOF.  The client
makes 50 round trips of 64 KiB (past the upgrade threshold), prints
"exchanged", waits for HOLDFILE (the test looks at the connection), then
sends b'!' with MSG_OOB and expects b'URG!' back, then one more round
trip.  On a fabric, send(MSG_OOB) failed with EOPNOTSUPP where TCP sends
the urgent byte.  With "reader", a second thread already waits in recv for
the answer when the byte is sent: the send must not wait for that thread
(its answer needs the byte): it sends, or fails with EOPNOTSUPP at once
and the stream goes on (the library cannot bring the connection back to
TCP while a receiver sleeps on it), never a hang.
"""
import errno
import select
import socket
import sys
import threading

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


def client(port, hold, reader):
    s = socket.create_connection(('127.0.0.1', port))
    echo_trips(s, 50)
    wait_path(hold)
    answer = []
    t = threading.Thread(target=lambda: answer.append(exact(s, 4)))
    if reader:
        t.start()
        threading.Event().wait(0.2)  # asleep in recv by now
    try:
        if s.send(b'!', socket.MSG_OOB) != 1:
            raise SystemExit('send MSG_OOB: short')
        sent = True
    except OSError as e:
        if not reader or e.errno != errno.EOPNOTSUPP:
            raise
        sent = False
        s.sendall(b'URG?')  # the reader's four bytes, through the echo
    if reader:
        t.join(10)
        if t.is_alive():
            raise SystemExit('the reader got no answer in 10 s')
        got = answer[0]
    else:
        got = exact(s, 4)
    if got != (b'URG!' if sent else b'URG?'):
        raise SystemExit('urgent byte answered with %r' % got)
    echo_trips(s, 1)
    print('urgent byte %s, the stream goes on' % ('answered' if sent else 'refused (EOPNOTSUPP)'))


if __name__ == '__main__':
    if sys.argv[1] == 'server':
        server(sys.argv[2])
    else:
        client(int(sys.argv[2]), sys.argv[3], len(sys.argv) > 4)
