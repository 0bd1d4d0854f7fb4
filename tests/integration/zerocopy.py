#!/usr/bin/env python3
"""The kernel's error queue: zerocopy.py zerocopy|txstamp PORT HOLDFILE.

Against an echo server: 50 round trips of 64 KiB (past the upgrade
threshold), "exchanged", waits for HOLDFILE (the test looks at the
connection), then turns SO_ZEROCOPY on and sends 20 messages of 64 KiB with
MSG_ZEROCOPY (zerocopy), or turns on software transmit timestamps
(SO_TIMESTAMPING, txstamp) and sends 20 plain ones; each send is followed
by what the kernel queues for it on the error queue (POLLERR, recvmsg
MSG_ERRQUEUE: a completion, which on loopback says the kernel copied; a
timestamp), and every echo is read back.  A send that went to a ring never
got it: the program waited 5 s and failed.
"""
import os
import select
import socket
import sys

from itsock import echo_trips, exact, wait_path

SO_ZEROCOPY = getattr(socket, 'SO_ZEROCOPY', 60)
MSG_ZEROCOPY = getattr(socket, 'MSG_ZEROCOPY', 0x4000000)
MSG_ERRQUEUE = getattr(socket, 'MSG_ERRQUEUE', 0x2000)
SO_TIMESTAMPING = 37
# SOF_TIMESTAMPING_TX_SOFTWARE | SOFTWARE | OPT_ID | OPT_TSONLY
TXSTAMP_FLAGS = (1 << 1) | (1 << 4) | (1 << 7) | (1 << 11)


def main(mode, port, hold):
    s = socket.create_connection(('127.0.0.1', port))
    echo_trips(s, 50)
    wait_path(hold)
    if mode == 'zerocopy':
        s.setsockopt(socket.SOL_SOCKET, SO_ZEROCOPY, 1)
    else:
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, TXSTAMP_FLAGS)
    p = select.poll()
    p.register(s.fileno(), 0)  # POLLERR is always reported
    for i in range(20):
        m = os.urandom(65536)
        if s.send(m, MSG_ZEROCOPY if mode == 'zerocopy' else 0) != len(m):
            raise SystemExit('send %d: short' % i)
        got = 0
        while not got:
            if not p.poll(5000):
                raise SystemExit('send %d: nothing on the error queue in 5 s' % i)
            try:
                _, anc, _, _ = s.recvmsg(0, 256, MSG_ERRQUEUE)
            except BlockingIOError:
                continue
            got = len(anc)
        if exact(s, len(m)) != m:
            raise SystemExit('send %d: the echo differs' % i)
    print('20 sends (%s), each with its error queue message, echoed' % mode)


if __name__ == '__main__':
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
