#!/usr/bin/env python3
"""A poller across its peer's exec: readable only once bytes are there.

    execpoll.py server PORTFILE quiet|reply
                                    listen on 127.0.0.1, write the port, accept
                                    one connection, read a line (reply: and
                                    answer it), then fork: the child execs sh,
                                    which writes "after exec" on the inherited
                                    socket 0.5 s later; the parent closes its
                                    copy once the child exec'd, and exits
    execpoll.py client PORT quiet|reply
                                    send the line (reply: read the answer),
                                    then, non-blocking, poll and read until
                                    EOF: every POLLIN must find a byte or EOF,
                                    never EAGAIN

Preloaded with FABSOCK_UPGRADE_BYTES=0 the connection is on a fabric before
the exec, which brings it back to TCP (a REVERT record in the ring, the
server's end closed behind it).  Once poll said readable from that record
alone (behind the server's data, or behind its SWITCH when it had sent
nothing: sshd) and ssh, reading EAGAIN, gave up.  Prints "ok ..." or a
reason; exit 0 or 1.
"""
import os
import select
import socket
import sys
import time


def read_line(s):
    """Read until b"ping" ends what came; None on EOF first."""
    got = b""
    while not got.endswith(b"ping"):
        b = s.recv(64)
        if not b:
            return None
        got += b
    return got


def server(portfile, how):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    with open(portfile + ".tmp", "w") as f:
        f.write(str(ls.getsockname()[1]))
    os.rename(portfile + ".tmp", portfile)
    s, _ = ls.accept()
    ls.close()
    line = read_line(s)
    if line is None:
        print("EOF before the line")
        return 1
    if how == "reply":
        s.sendall(b"hello " + line)
    time.sleep(0.3)  # the client polls meanwhile, on the fabric
    fd = s.fileno()
    os.set_inheritable(fd, True)
    if os.fork() == 0:
        os.execvp("sh", ["sh", "-c", "sleep 0.5; printf 'after exec' >&%d" % fd])
    time.sleep(0.2)  # closed after the exec: the end closes behind its REVERT
    s.close()
    print("ok server handed its socket to an exec'd child")
    return 0


def client(port, how):
    s = socket.create_connection(("127.0.0.1", int(port)))
    time.sleep(0.3)  # on the fabric by then (an upgrade at 0 bytes takes a moment)
    s.sendall(b"ping")
    if how == "reply" and read_line(s) is None:
        print("EOF before the reply")
        return 1
    s.setblocking(False)
    p = select.poll()
    p.register(s, select.POLLIN)
    data, spurious, deadline = b"", 0, time.time() + 20
    while time.time() < deadline:
        if not p.poll(1000):
            continue
        try:
            b = s.recv(4096)
        except BlockingIOError:
            spurious += 1
            if spurious > 3:
                break
            continue
        if not b:
            break
        data += b
    if spurious:
        print("poll said readable, recv said EAGAIN (%d times); got %r" % (spurious, data))
        return 1
    if data != b"after exec":
        print("got %r, want b'after exec' then EOF" % data)
        return 1
    print("ok %d bytes after the peer's exec, no readable without bytes" % len(data))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("server", "client") or sys.argv[3] not in ("quiet", "reply"):
        print("usage: execpoll.py server PORTFILE quiet|reply | client PORT quiet|reply", file=sys.stderr)
        sys.exit(2)
    sys.exit((server if sys.argv[1] == "server" else client)(sys.argv[2], sys.argv[3]))
