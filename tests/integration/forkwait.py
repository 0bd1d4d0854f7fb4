#!/usr/bin/env python3
"""Waits in a fork child on a connection its parent upgraded:
forkwait.py server PORTFILE HOLDFILE N [child-first|child-only] | client PORT.

The server accepts one connection and exchanges 8 KiB each way (past the
upgrade threshold), then waits for HOLDFILE (the test has seen the
connection on its fabric meanwhile) and makes N round trips, so that each
direction carries its bytes on the fabric before the fork; with
child-first it makes none, and the child's are the first bytes after the
upgrade.  It forks: the child makes N round trips of 64 bytes sleeping in
recv(), then N sleeping in poll(), then N in epoll_wait() (a set of its
own), while the parent sits in waitpid() (it
never drains anything); then the parent makes N itself (with child-first,
on directions its own copy of the connection never switched), or with
child-only closes it at once (its peer must read EOF).  Each phase
prints "PHASE N round trips in S s".  The client echoes until EOF, each
echo 1 ms late (every wait sleeps).
"""
import os
import select
import socket
import sys
import time

from itsock import exact



def trips(s, n, phase, how=None):
    p = select.epoll() if how == 'epoll' else select.poll()
    p.register(s.fileno(), select.POLLIN)
    t = time.monotonic()
    for i in range(n):
        msg = (b'%08d' % i) * 8
        s.sendall(msg)
        if how:  # 10 s (epoll's timeout is in seconds, poll's in ms)
            while not p.poll(10 if how == 'epoll' else 10000):
                pass
        if exact(s, 64) != msg:
            raise SystemExit('%s: wrong echo at %d' % (phase, i))
    print('%s %d round trips in %.3f s' % (phase, n, time.monotonic() - t), flush=True)


def main():
    if sys.argv[1] == 'client':
        c = socket.create_connection(('127.0.0.1', int(sys.argv[2])))
        c.sendall(b'c' * 8192)
        exact(c, 8192)
        while True:
            b = c.recv(64)
            if not b:
                return
            time.sleep(0.001)  # so that every wait at the other end sleeps
            c.sendall(b)
    pf, hold, n = sys.argv[2], sys.argv[3], int(sys.argv[4])
    how = sys.argv[5] if len(sys.argv) > 5 else 'parent-first'
    child_first = how in ('child-first', 'child-only')

    ls = socket.socket()
    ls.bind(('127.0.0.1', 0))
    ls.listen(1)
    with open(pf + '.tmp', 'w') as f:
        f.write(str(ls.getsockname()[1]))
    os.rename(pf + '.tmp', pf)
    s, _ = ls.accept()
    exact(s, 8192)
    s.sendall(b's' * 8192)
    print('exchanged', flush=True)
    for _ in range(600):
        if os.path.exists(hold):
            break
        time.sleep(0.05)
    # Both directions switch to the fabric before the fork, or (child-first)
    # in the child: each process's copy of the connection keeps its own flow
    # state, and the parent's must find that the child's moved them.
    if not child_first:
        trips(s, n, 'parent before')
    pid = os.fork()
    if pid == 0:
        trips(s, n, 'child recv')
        trips(s, n, 'child poll', 'poll')
        trips(s, n, 'child epoll', 'epoll')
        os._exit(0)
    _, st = os.waitpid(pid, 0)
    if how != 'child-only':
        trips(s, n, 'parent after')
    s.close()
    time.sleep(float(os.environ.get('FW_LINGER', '0')))
    sys.exit(0 if st == 0 else 1)


if __name__ == '__main__':
    main()
