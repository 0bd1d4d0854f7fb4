#!/usr/bin/env python3
"""sleep-pingpong.py [ROUNDTRIPS]: a blocking 64-byte ping-pong over one
loopback TCP connection between two processes (fork), after 8 KiB each way
(past libfabsock's upgrade threshold) and a 0.5 s pause (the upgrade).
Prints "p50 X p99 Y us" of the round trips.  Run it under LD_PRELOAD with
FABSOCK_SPIN_US=0 so that every wait sleeps, to measure the sleep and
wake path alone; e.g. wake eventfds against doorbells, alternating:

  for r in 1 2 3 4 5; do for d in 0 1; do
    FABSOCK_DOORBELL=$d FABSOCK_SPIN_US=0 LD_PRELOAD=$LIB bench/sleep-pingpong.py 3000
  done; done
"""
import os
import socket
import sys
import time


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    ls = socket.socket()
    ls.bind(('127.0.0.1', 0))
    ls.listen(1)
    port = ls.getsockname()[1]
    if os.fork() == 0:  # the echoing end
        ls.close()
        c = socket.create_connection(('127.0.0.1', port))
        c.sendall(b'x' * 8192)
        got = 0
        while got < 8192:
            got += len(c.recv(65536))
        while True:
            b = c.recv(64)
            if not b:
                break
            c.sendall(b)
        os._exit(0)
    s, _ = ls.accept()
    got = 0
    while got < 8192:
        got += len(s.recv(65536))
    s.sendall(b'y' * 8192)
    time.sleep(0.5)
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        s.sendall(b'p' * 64)
        got = 0
        while got < 64:
            got += len(s.recv(64))
        lat.append(time.perf_counter() - t)
    lat.sort()
    print('p50 %.1f p99 %.1f us' % (lat[n // 2] * 1e6, lat[n * 99 // 100] * 1e6))
    s.close()
    os.wait()


if __name__ == '__main__':
    main()
