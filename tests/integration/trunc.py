#!/usr/bin/env python3
"""Discarding receives (MSG_TRUNC): trunc.py server PORTFILE | client PORT HOLDFILE.

On Linux TCP, recv with MSG_TRUNC consumes the bytes without copying them
(the buffer may be NULL; with MSG_PEEK it only counts them): HAProxy drains
a connection it closes with recv(fd, NULL, INT_MAX, MSG_TRUNC |
MSG_DONTWAIT).  On a fabric that call failed with EFAULT and dropped
nothing.  The server echoes 50 round trips of 64 KiB (past the upgrade
threshold); the client prints "exchanged" and waits for HOLDFILE (the test
looks at the connection).  Then, each after the server's b'G': 5000 bytes
the server drops with one blocking recv(NULL, 5000, MSG_TRUNC |
MSG_WAITALL); 300 bytes it counts with MSG_PEEK | MSG_TRUNC, then reads;
7000 bytes it drains HAProxy's way (non-blocking, NULL, INT_MAX, until it
has them all, polling between); 2000 it drops through recvmsg; then a
last round trip must come back exact.  The server prints what each step
got: "discarded 5000 300/300 7000 2000".
"""
import ctypes
import os
import select
import socket
import sys

from itsock import echo_trips, exact, listen_portfile, wait_path

MSG_TRUNC, MSG_DONTWAIT, MSG_WAITALL, MSG_PEEK = 0x20, 0x40, 0x100, 0x2
libc = ctypes.CDLL(None, use_errno=True)
libc.recv.restype = ctypes.c_ssize_t
libc.recv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def crecv(fd, n, flags):
    r = libc.recv(fd, None, n, flags)
    if r < 0:
        e = ctypes.get_errno()
        if e == 11:
            return None
        raise SystemExit('recv(NULL, %d, %#x): %s' % (n, flags, os.strerror(e)))
    return r


def server(portfile):
    ls = listen_portfile(portfile)
    c, _ = ls.accept()
    for i in range(50):
        c.sendall(exact(c, 65536))
    fd, out = c.fileno(), []
    c.sendall(b'G')
    out.append(str(crecv(fd, 5000, MSG_TRUNC | MSG_WAITALL)))
    c.sendall(b'G')
    n = crecv(fd, 300, MSG_PEEK | MSG_TRUNC | MSG_WAITALL)
    m = exact(c, 300)
    out.append('%d/%d' % (n, len(m) if m == b'p' * 300 else -1))
    c.sendall(b'G')
    got = 0
    while got < 7000:
        select.select([c], [], [], 10)
        r = crecv(fd, 0x7fffffff, MSG_TRUNC | MSG_DONTWAIT)
        if r == 0:
            raise SystemExit('EOF while draining')
        got += r or 0
    out.append(str(got))
    c.sendall(b'G')
    data = c.recvmsg(2000, 0, MSG_TRUNC | MSG_WAITALL)[0]
    out.append(str(len(data)))
    c.sendall(exact(c, 16))
    print('discarded ' + ' '.join(out), flush=True)
    if c.recv(1):
        raise SystemExit('bytes after the last round trip')


def client(port, hold):
    s = socket.create_connection(('127.0.0.1', port))
    echo_trips(s, 50)
    wait_path(hold)
    for part in (b'a' * 5000, b'p' * 300, b'b' * 7000, b'c' * 2000):
        if exact(s, 1) != b'G':
            raise SystemExit('no go-ahead')
        s.sendall(part)
    m = os.urandom(16)
    s.sendall(m)
    if exact(s, 16) != m:
        raise SystemExit('the last round trip differs')
    print('last round trip exact', flush=True)
    s.close()


if __name__ == '__main__':
    if sys.argv[1] == 'server':
        server(sys.argv[2])
    else:
        client(int(sys.argv[2]), sys.argv[3])
