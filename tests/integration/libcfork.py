#!/usr/bin/env python3
"""Servers that fork inside the C library:
libcfork.py server PORTFILE PIDFILE daemon|forkpty | client PORT HOLDFILE N.

daemon(3) and forkpty(3) call libc's own fork, never the fork() a preload
interposes (docs/design.md 1.6).  The server listens on 127.0.0.1:0,
writes PORTFILE, then forks that way: with daemon the parent exits 0 at
once and the child (a new session) writes PIDFILE; with forkpty the
parent drains the pty and exits with the child's status.  The child
accepts one connection, echoes it to EOF, and appends "served BYTES" to
PIDFILE.done; it exits 0.  The client makes N round trips of 64 KiB of
random bytes, each echo checked, prints "exchanged", waits for HOLDFILE
(the test looks at the connection's fabric meanwhile), half-closes and
expects EOF; it exits 0 when every byte came back in order.
"""
import ctypes
import os
import socket
import sys

from itsock import echo_trips, listen_portfile, wait_path


def serve(ls, pidfile):
    c, _ = ls.accept()
    ls.close()
    n = 0
    while True:
        b = c.recv(65536)
        if not b:
            break
        c.sendall(b)
        n += len(b)
    c.close()
    with open(pidfile + '.done', 'a') as f:
        f.write('served %d\n' % n)


def server(portfile, pidfile, how):
    ls = listen_portfile(portfile, 4)
    if how == 'daemon':
        libc = ctypes.CDLL(None, use_errno=True)
        sys.stdout.flush()
        if libc.daemon(1, 1) != 0:
            raise SystemExit('daemon: %s' % os.strerror(ctypes.get_errno()))
        with open(pidfile + '.tmp', 'w') as f:
            f.write('%d\n' % os.getpid())
        os.rename(pidfile + '.tmp', pidfile)
        serve(ls, pidfile)
        os._exit(0)
    pid, master = os.forkpty()
    if pid == 0:
        try:
            serve(ls, pidfile)
        finally:
            os._exit(0)
    ls.close()
    with open(pidfile, 'w') as f:
        f.write('%d\n' % pid)
    while True:  # the child's terminal: read it, or a write there blocks it
        try:
            if not os.read(master, 4096):
                break
        except OSError:
            break
    _, st = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(st))



def client(port, hold, n):
    s = socket.create_connection(('127.0.0.1', port))
    echo_trips(s, n)
    wait_path(hold)
    s.shutdown(socket.SHUT_WR)
    if s.recv(1):
        raise SystemExit('bytes after the last echo')
    print('EOF after the echoes')


if __name__ == '__main__':
    if sys.argv[1] == 'server':
        server(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        client(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
