#!/usr/bin/env python3
"""Threads blocked each on its own connection: herd.py server PORTFILE |
client PORT HOLDFILE.

The client opens 4 connections, each from a thread of its own that
upgrades it (20 echoed round trips of 64 KiB, checked) and then blocks on
it: in recv(), or in poll() first (half of them, as MariaDB's threads).  Its main thread then makes 300 round trips of 64 B on its
own fifth connection, each of which the server holds 1 ms before its
echo, so that the main thread sleeps for every reply.  The four idle
threads must sleep through them: under the library each reply's wake used
to go to the process's door, on which every blocked thread slept, so each
reply woke all of them (docs/design.md 1.7, thread doors).  Their context
switches over the trips are counted (/proc/self/task/TID/status); each
may wake at the library's wait bound (every 20 ms), never per reply.
With PAUSE_MS (client PORT HOLDFILE PAUSE_MS), each connection
waits that long after connect before its first byte: upgraded at connect,
its rendezvous is then over before its thread ever waited on it.
Prints "exchanged", waits for HOLDFILE (the test looks at the
connections), then wakes each idle thread with a byte echoed on its
connection and ends every connection.  The server echoes each
connection on a thread of its own until EOF.
"""
import os
import select
import socket
import sys
import threading
import time

from itsock import echo_trips, exact, listen_portfile, serve_each, wait_path

IDLE = 4
TRIPS = 300
BOUND_S = 0.020  # FS_WAIT_BOUND_MS: a sleeper looks again at least this often


def serve(c):
    while True:
        b = c.recv(65536)
        if not b:
            break
        if b[:1] == b'P':
            time.sleep(0.001)
        c.sendall(b)
    c.close()


def server(portfile):
    ls = listen_portfile(portfile, backlog=IDLE + 1)
    serve_each(ls, IDLE + 1, serve)


def switches(tid):
    with open('/proc/self/task/%d/status' % tid) as f:
        for line in f:
            if line.startswith('voluntary_ctxt_switches:'):
                return int(line.split()[1])
    raise SystemExit('no voluntary_ctxt_switches for thread %d' % tid)


def client(port, holdfile, pause_s=0.0):
    ready = threading.Barrier(IDLE + 1)
    tids = [0] * IDLE
    socks = [None] * IDLE
    errors = []

    def idle(i):
        try:
            s = socks[i] = socket.create_connection(('127.0.0.1', port))
            time.sleep(pause_s)  # an upgrade at connect is done before any wait
            echo_trips(s, 20)
            tids[i] = threading.get_native_id()
            ready.wait()
            if i % 2:  # half wait in poll() first, as MariaDB's threads do
                p = select.poll()
                p.register(s, select.POLLIN)
                p.poll()
            m = exact(s, 1)  # asleep here while the main thread works
            if m != b'x':
                errors.append('idle %d: got %r' % (i, m))
        except BaseException as e:  # noqa: B902 (reported by the main thread)
            errors.append('idle %d: %s' % (i, e))
            ready.abort()

    threads = [threading.Thread(target=idle, args=(i,), daemon=True) for i in range(IDLE)]
    for t in threads:
        t.start()
    main = socket.create_connection(('127.0.0.1', port))
    time.sleep(pause_s)
    echo_trips(main, 20)
    try:
        ready.wait()
    except threading.BrokenBarrierError:
        raise SystemExit('; '.join(errors)) from None
    time.sleep(0.2)  # the idle threads are in recv(), asleep
    before = [switches(t) for t in tids]
    t0 = time.monotonic()
    for i in range(TRIPS):
        m = b'P' + os.urandom(63)
        main.sendall(m)
        if exact(main, len(m)) != m:
            raise SystemExit('trip %d: the echo differs' % i)
    spent = time.monotonic() - t0
    woke = [switches(t) - b for t, b in zip(tids, before)]
    print('idle threads woke %s times over %d trips in %.2f s' % (woke, TRIPS, spent), flush=True)
    # A few wakes per bound, none per trip (a herd woke each one TRIPS times).
    allowed = TRIPS // 4 + int(3 * spent / BOUND_S)
    if max(woke) > allowed:
        raise SystemExit('an idle thread woke %d times (at most %d): a herd' % (max(woke), allowed))
    print('exchanged', flush=True)
    wait_path(holdfile)
    for s in socks:  # each idle thread's wake: its byte, echoed
        s.sendall(b'x')
    for t in threads:
        t.join()
    main.close()
    if errors:
        raise SystemExit('; '.join(errors))


if __name__ == '__main__':
    if sys.argv[1] == 'server':
        server(sys.argv[2])
    else:
        client(int(sys.argv[2]), sys.argv[3], float(sys.argv[4]) / 1000 if len(sys.argv) > 4 else 0.0)
