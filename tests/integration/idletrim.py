#!/usr/bin/env python3
"""Idle rings give their pages back: idletrim.py server PORTFILE N BYTES | client PORT N BYTES.

Each end holds N connections: 8 KiB each way on each (past the upgrade
threshold), a pause for the upgrades, then BYTES each way on each, one
connection after the other (the client writes, the server echoes).  Each
end then prints "burst B" (its RssShmem growth in KiB since before its
first connection, /proc/self/status) and waits, up to 60 s, for the growth
to fall to at most N * 4 KiB (a connection's control page) + 32 KiB (the
process's own pages: its doorbell, its stat rows); it prints "idle I after
S s" either way.  With IT_HOLD=FILE the client then waits (up to 30 s) for
FILE before it closes its connections; the server exits 0 once it has read
the client's EOF on every one.  With IT_SLOW_READ=B, the first connection
then carries B bytes more each way, the client reading the server's 3 s
late: the server's ring holds them unread meanwhile (a slow reader), and
its pages go once they are read.
"""
import os
import socket
import sys
import time

WARM = 8192
SLOW = int(os.environ.get('IT_SLOW_READ', '0'))


def shmem_kb():
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('RssShmem:'):
                return int(line.split()[1])
    return 0


def recvn(c, n):
    got = 0
    while got < n:
        b = c.recv(min(65536, n - got))
        if not b:
            raise SystemExit('early EOF after %d of %d bytes' % (got, n))
        got += len(b)


def idle_wait(base, n):
    limit = n * 4 + 32
    t0 = time.monotonic()
    grown = shmem_kb() - base
    while grown > limit and time.monotonic() - t0 < 60:
        time.sleep(0.2)
        grown = shmem_kb() - base
    print('idle %d after %.1f s' % (grown, time.monotonic() - t0), flush=True)


def main():
    role, arg, n, nbytes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    conns = []
    if role == 'server':
        ls = socket.socket()
        ls.bind(('127.0.0.1', 0))
        ls.listen(n)
        base = shmem_kb()
        with open(arg + '.tmp', 'w') as f:
            f.write(str(ls.getsockname()[1]))
        os.rename(arg + '.tmp', arg)
        for _ in range(n):
            conns.append(ls.accept()[0])
        for size in (WARM, nbytes):
            for c in conns:
                recvn(c, size)
                c.sendall(b's' * size)
        if SLOW:
            recvn(conns[0], SLOW)
            conns[0].sendall(b's' * SLOW)
        print('burst %d' % (shmem_kb() - base), flush=True)
        idle_wait(base, n)
        for c in conns:
            if c.recv(1):
                raise SystemExit('bytes after the burst')
    else:
        base = shmem_kb()
        for _ in range(n):
            conns.append(socket.create_connection(('127.0.0.1', int(arg))))
        for size in (WARM, nbytes):
            for c in conns:
                c.sendall(b'c' * size)
                recvn(c, size)
            if size == WARM:
                time.sleep(0.5)  # the upgrades, on the library's thread
        if SLOW:
            conns[0].sendall(b'c' * SLOW)
            time.sleep(3)  # the server's idle passes find its ring unread
            recvn(conns[0], SLOW)
        print('burst %d' % (shmem_kb() - base), flush=True)
        idle_wait(base, n)
        hold = os.environ.get('IT_HOLD')
        for _ in range(300):  # the test looks at where they went meanwhile
            if not hold or os.path.exists(hold):
                break
            time.sleep(0.1)
        for c in conns:
            c.close()


if __name__ == '__main__':
    main()
