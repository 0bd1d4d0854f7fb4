#!/usr/bin/env python3
"""An accepted connection held by several children of its server, one of
them idle: the child that serves it must stay on TCP while another holds
the socket, or bytes would go to a ring the idle one never reads.

    forkshare.py idle|gone STATDIR FABSOCK_BIN

Both ends in this process tree, run under LD_PRELOAD.  The server accepts
one connection and forks three children with it: the first (C1) keeps it
and sleeps ("idle"), or exits at once ("gone"); the second exits at once;
the third echoes.  The parent closes its copy.  The first child forked with
a connection may keep its stat table in its own memory (engine/sockfork.c),
so only the pid the third child's copy names reaches it (fs_sock_forked_hold).
The client sends 256 KiB, reads the echo back, checks it, and a process
forked before any socket looks at the server side of the connection in
`fabsock stat` for 3 s while the client keeps it.  Prints one line:
"ok FABRIC" (what the serving child's row said last, and its reason), or
"bad ..." with what went wrong.  Exit 0 when the echo was intact."""
import json
import os
import socket
import subprocess
import sys
import time


def serve(lsock, mode, go_r):
    conn, _ = lsock.accept()
    lsock.close()
    kids = []
    for role in ("first", "second", "third"):
        pid = os.fork()
        if pid == 0:
            if role == "third":
                while True:
                    b = conn.recv(65536)
                    if not b:
                        break
                    conn.sendall(b)
                os._exit(0)
            if role == "first" and mode == "idle":
                os.read(go_r, 1)  # holds conn until the client is done
            os._exit(0)
        kids.append(pid)
        if role == "first":
            time.sleep(0.05)
    conn.close()
    return kids


def sample(fabsock, port_r, out_w):
    """The look at `fabsock stat`, from a process that holds no connection
    (a fork of the client would take its connection off any fabric)."""
    port = int(os.read(port_r, 32) or b"0")
    seen = []
    end = time.time() + 3
    while port and time.time() < end:
        out = subprocess.run([fabsock, "stat", "--json"], capture_output=True, text=True, timeout=10).stdout
        rows = []
        for p in json.loads(out).get("processes", []):
            for cn in p.get("connections", []):
                if str(cn.get("local", "")).endswith(":%d" % port) and cn.get("state") != "listen":
                    rows.append("%s/%s" % (cn.get("fabric"), cn.get("reason")))
        if rows:
            seen = rows
        time.sleep(0.2)
    os.write(out_w, (",".join(seen) if seen else "no-row").encode())


def main():
    mode, statdir, fabsock = sys.argv[1], sys.argv[2], sys.argv[3]
    os.environ["FABSOCK_STATDIR"] = statdir
    go_r, go_w = os.pipe()
    port_r, port_w = os.pipe()
    look_r, look_w = os.pipe()
    seen_r, seen_w = os.pipe()
    looker = os.fork()  # before any socket
    if looker == 0:
        sample(fabsock, look_r, seen_w)
        os._exit(0)
    srv = os.fork()  # before any socket: the server's listener is its own
    if srv == 0:
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(4)
        os.write(port_w, b"%d\n" % lsock.getsockname()[1])
        kids = serve(lsock, mode, go_r)
        for k in kids:
            os.waitpid(k, 0)
        os._exit(0)
    port = int(os.read(port_r, 32))
    c = socket.create_connection(("127.0.0.1", port))
    payload = bytes((i * 7 + 3) & 0xFF for i in range(256 * 1024))
    got = bytearray()
    sent = 0
    while sent < len(payload) or len(got) < len(payload):
        if sent < len(payload):
            sent += c.send(payload[sent:sent + 16384])
        b = c.recv(65536)
        if not b:
            break
        got += b
    verdict = "ok"
    if bytes(got) != payload:
        verdict = "bad echo (%d of %d bytes)" % (len(got), len(payload))
    # The serving child's row, sampled for 3 s (an upgrade is asynchronous;
    # its peer asks again for up to the set-up bound while others hold it).
    os.write(look_w, b"%d\n" % port)
    time.sleep(1.5)
    c.sendall(b"x" * 1000)  # bytes still arrive whole, whichever way they go
    back = b""
    while len(back) < 1000:
        b = c.recv(1000 - len(back))
        if not b:
            break
        back += b
    if back != b"x" * 1000 and verdict == "ok":
        verdict = "bad echo after 1.5 s (%d bytes)" % len(back)
    seen = os.read(seen_r, 4096).decode()
    os.write(go_w, b"x")
    c.close()
    os.waitpid(srv, 0)
    os.waitpid(looker, 0)
    print("%s %s" % (verdict, seen))
    return 0 if verdict == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
