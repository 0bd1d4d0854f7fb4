#!/usr/bin/env python3
"""Clients whose bytes pass through C stdio (tests/integration/t_stdio.sh):
stdio.py lines PORT N HOLDFILE [same] | fdopen PORT HOLDFILE.

stdio reads and writes a stream's fd inside libc, past the read() and
write() a preload interposes.  lines: N lines of 100 bytes, each answer
read back and checked (a sed server replaces the first "a" with "b"; with
"same" an echo), then "exchanged", then it waits for HOLDFILE and closes.
fdopen: 50 round trips of 64 KiB with send/recv (past the upgrade
threshold), "exchanged", waits for HOLDFILE (the connection is on its
fabric by then), then fdopen(3)s the socket twice (a dup for writing, as
classic servers do), writes 200 lines with fputs/fflush and reads each
echo with fgets, fclose(3)s both streams and opens a file, which must
read as that file (the lowest free number, where a socket just was).
"""
import ctypes
import os
import socket
import sys

from itsock import echo_trips, wait_path




def lines(port, n, hold, same):
    s = socket.create_connection(('127.0.0.1', port))
    f = s.makefile('rb')
    for i in range(n):
        line = b'a' * 100 + b'%d\n' % i
        s.sendall(line)
        got = f.readline()
        want = line if same else line.replace(b'a', b'b', 1)
        if got != want:
            raise SystemExit('line %d: got %r' % (i, got[:40]))
    print('exchanged %d lines' % n, flush=True)
    wait_path(hold)
    s.close()


def fdopen(port, hold):
    with open('/etc/passwd', 'rb') as f:
        want = f.read(256)
    s = socket.create_connection(('127.0.0.1', port))
    echo_trips(s, 50)
    wait_path(hold)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fdopen.restype = ctypes.c_void_p
    libc.fdopen.argtypes = [ctypes.c_int, ctypes.c_char_p]
    for name in ('fputs', 'fflush', 'fclose'):
        getattr(libc, name).argtypes = ([ctypes.c_char_p, ctypes.c_void_p] if name == 'fputs' else [ctypes.c_void_p])
    libc.fgets.restype = ctypes.c_char_p
    libc.fgets.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p]
    fd = s.detach()
    rd = libc.fdopen(fd, b'r')
    wr = libc.fdopen(os.dup(fd), b'w')
    if not rd or not wr:
        raise SystemExit('fdopen: %s' % os.strerror(ctypes.get_errno()))
    buf = ctypes.create_string_buffer(256)
    for i in range(200):
        line = b'b' * 50 + b'%d\n' % i
        if libc.fputs(line, wr) < 0 or libc.fflush(wr) != 0:
            raise SystemExit('fputs: %s' % os.strerror(ctypes.get_errno()))
        got = libc.fgets(buf, 256, rd)
        if got != line:
            raise SystemExit('stdio line %d: got %r' % (i, got))
    print('200 lines through stdio', flush=True)
    libc.fclose(wr)
    libc.fclose(rd)
    nfd = os.open('/etc/passwd', os.O_RDONLY)
    try:
        got = os.read(nfd, 256)
    except OSError as e:
        raise SystemExit('fd %d (the socket was %d): read: %s' % (nfd, fd, e))
    if got != want:
        raise SystemExit('fd %d (the socket was %d) read %r, not the file' % (nfd, fd, got[:40]))
    print('fd %d (the socket was %d) reads its file' % (nfd, fd))


if __name__ == '__main__':
    if sys.argv[1] == 'lines':
        lines(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], len(sys.argv) > 5)
    else:
        fdopen(int(sys.argv[2]), sys.argv[3])
