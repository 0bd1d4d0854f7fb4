#!/usr/bin/env python3
"""What connections cost in descriptors: fdcost.py server|eserver PORTFILE N [WANT] | client PORT N [WANT].

Each end holds N connections open at once after 64 bytes each way (plain
blocking sockets: the server accepts and receives, the client connects and
receives), then prints "extra E eventfds V": the descriptors it holds beyond
its N sockets, and how many of them are eventfds, counted against the same
process before its first connection, 0.2 s after the last exchange (or, with
WANT, once it holds WANT eventfds more, up to 10 s: upgrades finish on the
library's own thread).  The client closes everything after
counting; the server counts, then waits for the client's EOF on each.
With FC_HOLD=FILE both ends then wait for FILE and print "held extra E
eventfds V doors D", counted again (the test touches it once every
connection is on its fabric; D: the doorbell pages it holds, its own doors).
eserver is the server as an event loop: each connection stays in an epoll
set (made before the first count), and is read when epoll says so.
"""
import os
import select
import socket
import sys
import time


def count():
    total = events = doors = 0
    for name in os.listdir('/proc/self/fd'):
        try:
            link = os.readlink('/proc/self/fd/' + name)
        except OSError:
            continue  # the listing's own fd, gone
        total += 1
        events += link == 'anon_inode:[eventfd]'
        doors += link.startswith('/memfd:fabsock-bell')  # our doorbells' pages
    return total, events, doors


def recv64(c):
    got = b''
    while len(got) < 64:
        b = c.recv(64 - len(got))
        if not b:
            raise SystemExit('early EOF')
        got += b
    return got


def main():
    role, arg, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    want = int(sys.argv[4]) if len(sys.argv) > 4 else None
    conns = []
    if role in ('server', 'eserver'):
        ep = select.epoll() if role == 'eserver' else None
        ls = socket.socket()
        ls.bind(('127.0.0.1', 0))
        ls.listen(n)
        t0, e0, _ = count()
        with open(arg + '.tmp', 'w') as f:
            f.write(str(ls.getsockname()[1]))
        os.rename(arg + '.tmp', arg)
        for _ in range(n):
            c, _ = ls.accept()
            if ep:
                ep.register(c.fileno(), select.EPOLLIN)
                while not any(fd == c.fileno() for fd, _ in ep.poll(10)):
                    pass
            c.sendall(recv64(c))
            conns.append(c)
    else:
        t0, e0, _ = count()
        for _ in range(n):
            c = socket.create_connection(('127.0.0.1', int(arg)))
            c.sendall(b'x' * 64)
            recv64(c)
            conns.append(c)
    time.sleep(0.2)
    t1, e1, _ = count()
    for _ in range(100):
        if want is None or e1 - e0 >= want:
            break
        time.sleep(0.1)
        t1, e1, _ = count()
    print('extra %d eventfds %d' % (t1 - t0 - n, e1 - e0), flush=True)
    hold = os.environ.get('FC_HOLD')
    if hold:  # counted again once the test saw every connection upgraded
        for _ in range(600):
            if os.path.exists(hold):
                break
            time.sleep(0.05)
        t1, e1, d1 = count()
        print('held extra %d eventfds %d doors %d' % (t1 - t0 - n, e1 - e0, d1), flush=True)
    if role != 'client':
        for c in conns:
            c.recv(1)
    for c in conns:
        c.close()


if __name__ == '__main__':
    main()
