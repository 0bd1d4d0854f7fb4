#!/usr/bin/env python3
"""Connections in an epoll set at both ends, woken through every kind of waiter:
doorbell.py server PORTFILE N HOLDFILE | client PORT N HOLDFILE.

Both ends keep their N connections in one epoll set and exchange 64 bytes
on each through it (an event loop at each end).  Then each prints
"held fds F eventfds E" (its descriptors beyond its N sockets, counted
against itself before the first connection) and waits for HOLDFILE (the
test looks at `fabsock stat` meanwhile).  Then the server waits on its
first connections in four other ways while the client sends, 0.3 s late
so that each waiter is asleep when the bytes come: a blocking recv (the
set idle), poll(), a second epoll set, and the event loop again for 1 MiB
echoed back with its SHA-256.  Each line "ok WAITER" or "bad WAITER: why";
exit status 0 when all are ok.
"""
import hashlib
import os
import select
import socket
import sys
import time

from fdcost import count  # (its directory is on sys.path: the script's own)


def recv_n(c, n):
    got = b''
    while len(got) < n:
        b = c.recv(n - len(got))
        if not b:
            raise SystemExit('early EOF')
        got += b
    return got


def wait_in(ep, fd, secs=10):
    end = time.time() + secs
    while time.time() < end:
        if any(f == fd for f, _ in ep.poll(1)):
            return True
    return False


def hold(t0, e0, n, holdfile):
    t1, e1, _ = count()
    print('held fds %d eventfds %d' % (t1 - t0 - n, e1 - e0), flush=True)
    for _ in range(600):
        if os.path.exists(holdfile):
            return
        time.sleep(0.05)
    raise SystemExit('no hold file')


def server(portfile, n, holdfile):
    ep = select.epoll()
    ls = socket.socket()
    ls.bind(('127.0.0.1', 0))
    ls.listen(n)
    t0, e0, _ = count()
    with open(portfile + '.tmp', 'w') as f:
        f.write(str(ls.getsockname()[1]))
    os.rename(portfile + '.tmp', portfile)
    conns = []
    for _ in range(n):
        c, _ = ls.accept()
        ep.register(c.fileno(), select.EPOLLIN)
        conns.append(c)
    for c in conns:
        if not wait_in(ep, c.fileno()):
            raise SystemExit('event loop: no 64 bytes')
        c.sendall(recv_n(c, 64))
    hold(t0, e0, n, holdfile)
    bad = 0
    # A blocking recv while nobody waits in the set.
    c = conns[0]
    c.setblocking(True)
    c.settimeout(10)
    t = time.time()
    got = recv_n(c, 5)
    ok = got == b'block'
    print('ok blocking recv' if ok else 'bad blocking recv: %r' % got, '(%.3f s)' % (time.time() - t), flush=True)
    bad += not ok
    # poll() on one.
    p = select.poll()
    p.register(conns[1].fileno(), select.POLLIN)
    ev = p.poll(10000)
    ok = bool(ev) and recv_n(conns[1], 4) == b'poll'
    print('ok poll' if ok else 'bad poll: %r' % ev, flush=True)
    bad += not ok
    # A second epoll set holding one.
    ep2 = select.epoll()
    ep2.register(conns[2].fileno(), select.EPOLLIN)
    ok = wait_in(ep2, conns[2].fileno()) and recv_n(conns[2], 4) == b'ep2!'
    print('ok second epoll set' if ok else 'bad second epoll set', flush=True)
    bad += not ok
    ep2.close()
    # The first set again, for 1 MiB with its hash.
    c = conns[3]
    c.setblocking(False)
    data = b''
    end = time.time() + 20
    while len(data) < 1 << 20 and time.time() < end:
        if any(f == c.fileno() for f, _ in ep.poll(1)):
            try:
                data += c.recv(1 << 20)
            except BlockingIOError:
                pass
    c.setblocking(True)
    c.sendall(hashlib.sha256(data).hexdigest().encode())
    ok = len(data) == 1 << 20
    print('ok event loop 1 MiB' if ok else 'bad event loop: %d bytes' % len(data), flush=True)
    bad += not ok
    for c in conns:
        c.setblocking(True)
        c.settimeout(10)
        c.recv(1)
    sys.exit(1 if bad else 0)


def client(port, n, holdfile):
    ep = select.epoll()
    t0, e0, _ = count()
    conns = []
    for _ in range(n):
        c = socket.create_connection(('127.0.0.1', port))
        ep.register(c.fileno(), select.EPOLLIN)
        c.sendall(b'x' * 64)
        conns.append(c)
    for c in conns:
        if not wait_in(ep, c.fileno()):
            raise SystemExit('event loop: no echo')
        recv_n(c, 64)
    hold(t0, e0, n, holdfile)
    for c, msg in zip(conns[:3], (b'block', b'poll', b'ep2!')):
        time.sleep(0.3)
        c.sendall(msg)
    blob = os.urandom(1 << 20)
    conns[3].sendall(blob)
    conns[3].settimeout(20)
    got = recv_n(conns[3], 64).decode()
    want = hashlib.sha256(blob).hexdigest()
    print('ok hash' if got == want else 'bad hash: %s != %s' % (got, want), flush=True)
    for c in conns:
        c.close()
    sys.exit(0 if got == want else 1)


def main():
    role, arg, n, holdfile = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if role == 'server':
        server(arg, n, holdfile)
    else:
        client(int(arg), n, holdfile)


main()
