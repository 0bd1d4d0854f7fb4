#!/usr/bin/env python3
"""MSG_ZEROCOPY: zerocopy.py PORT HOLDFILE.

Against an echo server: 50 round trips of 64 KiB (past the upgrade
threshold), "exchanged", waits for HOLDFILE (the test looks at the
connection), then turns SO_ZEROCOPY on and sends 20 messages of 64 KiB with
MSG_ZEROCOPY, each followed by its completion from the error queue
(POLLERR, recvmsg MSG_ERRQUEUE: on loopback the kernel copies and says so),
and reads every echo back.  A send that went to a ring never got its
completion: the program waited 5 s for it and failed.
"""
import os
import select
import socket
import sys

from itsock import echo_trips, exact, wait_path

SO_ZEROCOPY = getattr(socket, 'SO_ZEROCOPY', 60)
MSG_ZEROCOPY = getattr(socket, 'MSG_ZEROCOPY', 0x4000000)
MSG_ERRQUEUE = getattr(socket, 'MSG_ERRQUEUE', 0x2000)


def main(port, hold):
    s = socket.create_connection(('127.0.0.1', port))
    echo_trips(s, 50)
    wait_path(hold)
    s.setsockopt(socket.SOL_SOCKET, SO_ZEROCOPY, 1)
    p = select.poll()
    p.register(s.fileno(), 0)  # POLLERR is always reported
    for i in range(20):
        m = os.urandom(65536)
        if s.send(m, MSG_ZEROCOPY) != len(m):
            raise SystemExit('send %d: short' % i)
        got = 0
        while not got:
            if not p.poll(5000):
                raise SystemExit('send %d: no completion in 5 s' % i)
            try:
                _, anc, _, _ = s.recvmsg(0, 256, MSG_ERRQUEUE)
            except BlockingIOError:
                continue
            got = len(anc)
        if exact(s, len(m)) != m:
            raise SystemExit('send %d: the echo differs' % i)
    print('20 zerocopy sends completed and echoed')


if __name__ == '__main__':
    main(int(sys.argv[1]), sys.argv[2])
