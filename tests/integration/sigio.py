#!/usr/bin/env python3
"""Signal-driven I/O: sigio.py server PORTFILE fcntl|ioctl | client PORT N HOLDFILE.

The server accepts one connection, asks for SIGIO on it (fcntl F_SETOWN,
then O_ASYNC with F_SETFL, or ioctl FIOASYNC), and echoes: it reads what
the socket has without blocking and writes it back, then waits for the
signal (sigwait, SIGIO blocked), until EOF (it reads before its first
wait: bytes that came before O_ASYNC raised no signal).  A connection
whose bytes went to a ring never raised the signal, and the server waited
for good.  The
client makes N round trips of 64 KiB of random bytes, each echo checked,
prints "exchanged", waits for HOLDFILE (the test looks at the connection
meanwhile), and closes.
"""
import fcntl
import os
import signal
import socket
import struct
import sys
import termios

from itsock import echo_trips, listen_portfile, wait_path

FIOASYNC = getattr(termios, 'FIOASYNC', 0x5452)


def server(portfile, how):
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGIO])
    ls = listen_portfile(portfile)
    c, _ = ls.accept()
    fd = c.fileno()
    fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
    if how == 'ioctl':
        fcntl.ioctl(fd, FIOASYNC, struct.pack('i', 1))
    else:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
    c.setblocking(False)
    n = 0
    while True:  # bytes that came before O_ASYNC raised no signal: read first
        while True:
            try:
                b = c.recv(65536)
            except BlockingIOError:
                break
            if not b:
                print('echoed %d bytes' % n)
                return
            c.setblocking(True)
            c.sendall(b)
            c.setblocking(False)
            n += len(b)
        signal.sigwait([signal.SIGIO])


def client(port, n, hold):
    s = socket.create_connection(('127.0.0.1', port))
    echo_trips(s, n)
    wait_path(hold)
    s.close()


if __name__ == '__main__':
    if sys.argv[1] == 'server':
        server(sys.argv[2], sys.argv[3])
    else:
        client(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
