#!/usr/bin/env python3
"""The library's own descriptors stay out of the application's numbers.

  lowfds.py server PORTFILE N | client PORT N

The server listens and serves N connections from an epoll set (an echo of
256 KiB each way on each, so that they upgrade); the client connects N and
blocks in recv.  Each then lists /proc/self/fd and prints "stray: none", or
"stray:" and each descriptor below half its RLIMIT_NOFILE that it neither
inherited nor made itself (the library keeps its own in the top quarter:
one at the lowest free number takes the number the application's next
socket() or open() expects, and a program that sizes its tables by its own
count runs out).
"""
import os
import resource
import select
import socket
import sys
import time

SIZE = 256 << 10


def fds():
    return {int(n) for n in os.listdir('/proc/self/fd')}


def report(inherited, mine):
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    low = soft // 2 if soft > 0 else 512
    stray = []
    for fd in sorted(fds() - inherited - mine):
        try:
            link = os.readlink('/proc/self/fd/%d' % fd)
        except OSError:
            continue  # the listing's own
        if fd < low:
            stray.append('%d -> %s' % (fd, link))
    print('stray: ' + (', '.join(stray) if stray else 'none'), flush=True)


def server(portfile, n):
    inherited = fds()
    lst = socket.socket()
    lst.bind(('127.0.0.1', 0))
    lst.listen(n)
    ep = select.epoll()
    mine = {lst.fileno(), ep.fileno()}
    with open(portfile + '.tmp', 'w') as f:
        f.write(str(lst.getsockname()[1]))
    os.rename(portfile + '.tmp', portfile)
    conns, left = {}, {}
    ep.register(lst, select.EPOLLIN)
    while len(conns) < n or any(left.values()):
        for fd, _ in ep.poll(10):
            if fd == lst.fileno():
                c, _ = lst.accept()
                c.setblocking(False)
                conns[c.fileno()] = c
                left[c.fileno()] = SIZE
                mine.add(c.fileno())
                ep.register(c, select.EPOLLIN)
                continue
            try:
                b = conns[fd].recv(65536)
            except BlockingIOError:
                continue
            if not b:
                raise SystemExit('server: early EOF')
            conns[fd].setblocking(True)
            conns[fd].sendall(b)
            conns[fd].setblocking(False)
            left[fd] -= len(b)
    time.sleep(0.5)  # upgrades finish on the library's thread
    report(inherited, mine)
    for c in conns.values():
        c.setblocking(True)
        c.recv(1)  # the client's close


def client(port, n):
    inherited = fds()
    socks = [socket.create_connection(('127.0.0.1', port)) for _ in range(n)]
    mine = {s.fileno() for s in socks}
    data = os.urandom(SIZE)
    for s in socks:
        s.sendall(data)
        got = 0
        while got < SIZE:
            b = s.recv(65536)
            if not b:
                raise SystemExit('client: early EOF')
            got += len(b)
    time.sleep(0.5)
    report(inherited, mine)
    for s in socks:
        s.close()


if __name__ == '__main__':
    if sys.argv[1] == 'server':
        server(sys.argv[2], int(sys.argv[3]))
    else:
        client(int(sys.argv[2]), int(sys.argv[3]))
