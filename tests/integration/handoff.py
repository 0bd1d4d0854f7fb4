#!/usr/bin/env python3
"""A primary that accepts and hands each connection to a worker process:
handoff.py PORT READYFILE DELAY_MS.

The primary listens on 127.0.0.1:PORT, starts 2 workers (exec'd, each with
one end of a unix socket pair), writes READYFILE, then for each connection:
accept, sleep DELAY_MS without touching it, send it to the next worker with
SCM_RIGHTS, close its copy.  Workers echo every connection they are handed
(a thread each).  Node cluster's primary does the same without the sleep;
the sleep makes the client's rendezvous request reach the primary while it
still holds the connection, which a loaded machine does only now and then.
"""
import os
import socket
import subprocess
import sys
import threading
import time

from itsock import echo_until_eof


def worker(fd):
    ch = socket.socket(fileno=fd)
    while True:
        msg, fds, _, _ = socket.recv_fds(ch, 16, 4)
        if not msg:
            return
        for f in fds:
            threading.Thread(target=echo_until_eof, args=(socket.socket(fileno=f),), daemon=True).start()


def main():
    if sys.argv[1] == "--worker":
        worker(int(sys.argv[2]))
        return
    delay = int(sys.argv[3]) / 1000.0
    chans, procs = [], []
    for _ in range(2):
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", str(b.fileno())], pass_fds=[b.fileno()]))
        b.close()
        chans.append(a)
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", int(sys.argv[1])))
    ls.listen(64)
    with open(sys.argv[2], "w") as f:
        f.write("ok\n")
    n = 0
    try:
        while True:
            c, _ = ls.accept()
            time.sleep(delay)
            socket.send_fds(chans[n % 2], [b"c"], [c.fileno()])
            c.close()
            n += 1
    finally:
        for p in procs:
            p.kill()
        os._exit(0)


if __name__ == "__main__":
    main()
