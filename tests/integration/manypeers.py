#!/usr/bin/env python3
"""A server of many client processes near its descriptor limit.

manypeers.py server PORTFILE N FILL | clients PORT N GOFILE|- [READY HOLD]

server: an epoll echo server (non-blocking sockets).  It writes its port
  to PORTFILE, accepts until it holds N connections (an accept() that
  fails, EMFILE or other, is counted and retried 10 ms later), then with
  FILL=1 opens /dev/null until it has no descriptor left (but for the
  moment it touches PORTFILE.go), and touches PORTFILE.go.  It echoes until every connection ended (EOF), up to 90 s,
  and prints "accepted A errors E cpu_ms C wall_ms W": the process's CPU
  time (all its threads: the library's agent too) and the wall time from
  PORTFILE.go to the last EOF.  Exit 0 when all N were accepted.
clients: N processes, each one connection: with GOFILE (not -), it waits
  for that file first; then 20 round trips of 8 KiB (checked), 2 s idle,
  close.  With READY and HOLD: once every client made its round trips the
  file READY appears, and each waits for HOLD (up to 60 s) before its 2 s.
  Exit status: the number of clients that failed.
"""
import os
import selectors
import socket
import sys
import time

ROUNDS, SIZE, IDLE_S = 20, 8192, 2.0


def fill_up(dummies):
    """Open /dev/null until no descriptor is left."""
    try:
        while True:
            dummies.append(os.open('/dev/null', os.O_RDONLY))
    except OSError:
        pass


def server(portfile, n, fill):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(('127.0.0.1', 0))
    ls.listen(256)
    ls.setblocking(False)
    with open(portfile + '.tmp', 'w') as f:
        f.write(str(ls.getsockname()[1]))
    os.rename(portfile + '.tmp', portfile)
    sel = selectors.EpollSelector()
    sel.register(ls, selectors.EVENT_READ)
    accepted = errors = live = 0
    deadline = time.monotonic() + 90
    go = None
    dummies = []
    while time.monotonic() < deadline and (live or accepted < n):
        for key, _ in sel.select(0.1):
            if key.fileobj is ls:
                try:
                    s, _ = ls.accept()
                except BlockingIOError:
                    continue
                except OSError:
                    errors += 1
                    time.sleep(0.01)
                    continue
                accepted += 1
                live += 1
                s.setblocking(False)
                sel.register(s, selectors.EVENT_READ)
                continue
            s = key.fileobj
            try:
                data = s.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b''
            if not data:
                sel.unregister(s)
                s.close()
                live -= 1
                continue
            s.setblocking(True)
            s.sendall(data)
            s.setblocking(False)
        if go is None and accepted == n:
            if fill:
                fill_up(dummies)
                os.close(dummies.pop())  # one for the go file, then none left
            go = (time.monotonic(), sum(os.times()[:2]))
            open(portfile + '.go', 'w').close()
            if fill:
                fill_up(dummies)
    for d in dummies:
        os.close(d)
    if go is None:
        go = (time.monotonic(), sum(os.times()[:2]))
    cpu = (sum(os.times()[:2]) - go[1]) * 1000
    wall = (time.monotonic() - go[0]) * 1000
    print('accepted %d errors %d cpu_ms %d wall_ms %d' % (accepted, errors, cpu, wall), flush=True)
    return 0 if accepted == n else 1


def client(port, gofile, done_w, hold):
    try:
        c = socket.create_connection(('127.0.0.1', port), timeout=60)
        if gofile:
            t = time.monotonic() + 60
            while not os.path.exists(gofile) and time.monotonic() < t:
                time.sleep(0.01)
        msg = os.urandom(SIZE)
        for _ in range(ROUNDS):
            c.sendall(msg)
            got = b''
            while len(got) < SIZE:
                b = c.recv(SIZE - len(got))
                if not b:
                    return 1
                got += b
            if got != msg:
                return 1
        if hold:
            os.write(done_w, b'.')
            t = time.monotonic() + 60
            while not os.path.exists(hold) and time.monotonic() < t:
                time.sleep(0.05)
        time.sleep(IDLE_S)
        c.close()
        return 0
    except OSError:
        return 1


def clients(port, n, gofile, ready, hold):
    done_r, done_w = os.pipe()
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            os.close(done_r)
            os._exit(client(port, gofile, done_w, hold))
        pids.append(pid)
    os.close(done_w)
    if ready:
        got = 0
        while got < n:
            b = os.read(done_r, n)
            if not b:
                break  # clients died: their status says so
            got += len(b)
        open(ready, 'w').close()
    failed = 0
    for pid in pids:
        _, st = os.waitpid(pid, 0)
        failed += st != 0
    print('clients %d failed %d' % (n, failed), flush=True)
    return min(failed, 100)


if __name__ == '__main__':
    if sys.argv[1] == 'server':
        sys.exit(server(sys.argv[2], int(sys.argv[3]), sys.argv[4] == '1'))
    go = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] != '-' else None
    rest = sys.argv[5:7] if len(sys.argv) > 6 else [None, None]
    sys.exit(clients(int(sys.argv[2]), int(sys.argv[3]), go, rest[0], rest[1]))
