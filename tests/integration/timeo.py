#!/usr/bin/env python3
"""SO_RCVTIMEO on an accelerated connection, as the kernel keeps it:
timeo.py server PORTFILE HOLDFILE | client PORT.

The library keeps a connection's timeouts where this process knows them
(engine/wait.h, fs_wait_timeo_of) and asks the kernel where another process
may set them unseen.  The server listens with SO_RCVTIMEO 3 s on its
listener (an accepted socket inherits it: the kernel copies it), accepts
one connection and exchanges 64 KiB each way (past the upgrade threshold),
then waits for HOLDFILE (the test has seen the connection on its fabric
meanwhile).  Then, each time with the client asked to send one byte later
than the timeout ("L": 1.5 s, "M": 4.5 s), a blocking recv() must fail
with EAGAIN after the timeout and before that byte:
  inherited   the listener's 3 s;
  set         0.2 s set here (through the library);
  forked      0 (none) set here, then 0.3 s set by a fork child that exits:
              the parent's copy was not told, the kernel was;
  cleared     0 set here, the byte then arrives (no EAGAIN).
Each prints "CASE ok ..." or exits non-zero with what it saw.  The client
echoes the exchange, then sends a byte 1.5 s after each "L" and 4.5 s
after each "M", until EOF.
"""
import errno
import os
import socket
import struct
import sys
import time

from itsock import exact, wait_path

LATE = {b'L': 1.5, b'M': 4.5}


def set_rcvtimeo(s, secs):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                 struct.pack('ll', int(secs), int(round((secs % 1) * 1e6))))


def times_out(s, name, secs):
    s.sendall(b'M' if secs > 1 else b'L')
    t = time.monotonic()
    try:
        b = s.recv(1)
    except OSError as e:
        took = time.monotonic() - t
        if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
            raise SystemExit('%s: recv failed with %s after %.3f s' % (name, e, took))
        if took < secs * 0.95:
            raise SystemExit('%s: EAGAIN after %.3f s, before its %.1f s' % (name, took, secs))
        print('%s ok EAGAIN after %.3f s' % (name, took), flush=True)
    else:
        raise SystemExit('%s: recv returned %r after %.3f s, not EAGAIN after %.1f s'
                         % (name, b, time.monotonic() - t, secs))
    set_rcvtimeo(s, 0)
    if s.recv(1) != b'x':  # the late byte, before the next case
        raise SystemExit('%s: the late byte is not there' % name)
    set_rcvtimeo(s, secs)


def server(portfile, hold):
    lis = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lis.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    set_rcvtimeo(lis, 3)
    lis.bind(('127.0.0.1', 0))
    lis.listen(1)
    with open(portfile + '.tmp', 'w') as f:
        f.write('%d\n' % lis.getsockname()[1])
    os.rename(portfile + '.tmp', portfile)
    s, _ = lis.accept()
    lis.close()
    m = os.urandom(65536)
    s.sendall(m)
    if exact(s, len(m)) != m:
        raise SystemExit('the echo differs')
    print('exchanged 65536 bytes each way', flush=True)
    wait_path(hold)
    times_out(s, 'inherited', 3)
    set_rcvtimeo(s, 0.2)
    times_out(s, 'set', 0.2)
    set_rcvtimeo(s, 0)
    pid = os.fork()
    if pid == 0:
        set_rcvtimeo(s, 0.3)
        os._exit(0)
    os.waitpid(pid, 0)
    times_out(s, 'forked', 0.3)
    set_rcvtimeo(s, 0)
    s.sendall(b'L')
    t = time.monotonic()
    if s.recv(1) != b'x':
        raise SystemExit('cleared: no byte')
    print('cleared ok the byte after %.3f s' % (time.monotonic() - t), flush=True)
    s.close()


def client(port):
    s = socket.create_connection(('127.0.0.1', port))
    s.sendall(exact(s, 65536))
    while True:
        b = s.recv(1)
        if not b:
            break
        time.sleep(LATE.get(b, 1.5))
        s.sendall(b'x')
    s.close()


if __name__ == '__main__':
    if sys.argv[1] == 'server':
        server(sys.argv[2], sys.argv[3])
    else:
        client(int(sys.argv[2]))
