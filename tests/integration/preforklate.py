#!/usr/bin/env python3
"""A prefork worker that reads late: its connection must still upgrade.

    preforklate.py STATDIR FABSOCK_BIN

Run under LD_PRELOAD.  A master listens and forks a worker that accepts
(the listener shared since fork: nginx, Apache prefork, gunicorn).  Such
a worker lists an accepted connection's inode, by which its peer finds
it, only once the connection crosses the upgrade threshold (a connection
per request never pays the fstat: engine/sock.c, ino_late), while the
peer, told by the master that the connection is not its own, looks for
the holder.  Here the client sends 64 KiB at once and the worker reads
nothing for 1.5 s, past the client's set-up bound (1 s): the client must
keep looking until the worker lists it, and the connection end on the
fabric.  Then 64 KiB each way more, checked.  A process forked before any
socket samples the worker's row in `fabsock stat` while the client holds
the connection.  Prints "ok FABRIC/REASON,..." (the worker's rows seen
last) or "bad ..."; exit 0 when every echo was intact."""
import os
import socket
import sys
import time

from forkshare import sample  # the look at `fabsock stat`, from a process apart

LATE_S = 1.5
N = 64 * 1024


def recv_n(s, n):
    got = bytearray()
    while len(got) < n:
        b = s.recv(min(65536, n - len(got)))
        if not b:
            break
        got += b
    return bytes(got)


def worker(lsock):
    conn, _ = lsock.accept()
    time.sleep(LATE_S)  # the client crossed the threshold long ago
    for _ in range(2):
        conn.sendall(recv_n(conn, N))
    while conn.recv(65536):
        pass
    conn.close()


def main():
    statdir, fabsock = sys.argv[1], sys.argv[2]
    os.environ["FABSOCK_STATDIR"] = statdir
    port_r, port_w = os.pipe()
    look_r, look_w = os.pipe()
    seen_r, seen_w = os.pipe()
    stop_r, stop_w = os.pipe()
    looker = os.fork()  # before any socket
    if looker == 0:
        sample(fabsock, look_r, seen_w)
        os._exit(0)
    master = os.fork()  # before any socket: the client is a process apart
    if master == 0:
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(4)
        w = os.fork()
        if w == 0:
            worker(lsock)
            os._exit(0)
        os.write(port_w, b"%d\n" % lsock.getsockname()[1])
        os.read(stop_r, 1)  # the master keeps the listener, and serves its names
        os.waitpid(w, 0)
        os._exit(0)
    port = int(os.read(port_r, 32))
    c = socket.create_connection(("127.0.0.1", port))
    verdict = "ok"
    for k in range(2):
        payload = bytes(((i + k) * 7 + 3) & 0xFF for i in range(N))
        c.sendall(payload)
        if recv_n(c, N) != payload:
            verdict = "bad echo %d" % (k + 1)
            break
    os.write(look_w, b"%d\n" % port)
    seen = os.read(seen_r, 4096).decode()
    c.close()
    os.write(stop_w, b"x")
    os.waitpid(master, 0)
    os.waitpid(looker, 0)
    print("%s %s" % (verdict, seen))
    return 0 if verdict == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
