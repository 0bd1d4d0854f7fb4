#!/usr/bin/env python3
"""Minimal memcached text-protocol client for t_memcached.sh.

    mc_client.py HOST PORT

Stores binary values (NULs, CR/LF inside) of several sizes up to 500 KiB,
reads them back one by one and with a multi-get, exercises add/incr/decr/
delete, and checks every reply.  Prints "ok ..." and exits 0, or prints the
first mismatch and exits 1.  MC_HOLD_SECONDS: how long to stay connected
before quitting (default 0).
"""
import os
import socket
import sys
import time


class Conn:
    def __init__(self, host, port):
        self.s = socket.create_connection((host, port), timeout=30)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def _fill(self):
        chunk = self.s.recv(65536)
        if not chunk:
            raise EOFError("connection closed by memcached")
        self.buf += chunk

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def get_many(self, keys):
        self.send(b"get " + b" ".join(keys) + b"\r\n")
        out = {}
        while True:
            line = self.line()
            if line == b"END":
                return out
            parts = line.split()
            if parts[0] != b"VALUE":
                raise ValueError("unexpected reply %r" % line[:80])
            n = int(parts[3])
            out[parts[1]] = self.exact(n)
            if self.exact(2) != b"\r\n":
                raise ValueError("value not followed by CRLF")


def expect(got, want, what):
    if got != want:
        raise ValueError("%s: got %r, expected %r" % (what, got[:80] if isinstance(got, bytes) else got, want))


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    c = Conn(host, port)
    values = {}
    for i, size in enumerate([0, 1, 100, 4096, 65536, 100000, 500 * 1024]):
        v = os.urandom(size)
        if size > 10:
            v = v[:5] + b"\r\nEND\r\n\0" + v[5:]
        k = b"fabsock:%d" % i
        values[k] = v
        c.send(b"set %s %d 0 %d\r\n" % (k, i, len(v)) + v + b"\r\n")
        expect(c.line(), b"STORED", "set %s" % k.decode())
    for k, v in values.items():
        got = c.get_many([k])
        expect(got.get(k), v, "get %s" % k.decode())
    got = c.get_many(list(values))
    for k, v in values.items():
        expect(got.get(k), v, "multi-get %s" % k.decode())
    c.send(b"add fabsock:0 0 0 1\r\nx\r\n")
    expect(c.line(), b"NOT_STORED", "add existing")
    c.send(b"set ctr 0 0 2\r\n10\r\nincr ctr 32\r\ndecr ctr 2\r\n")
    expect(c.line(), b"STORED", "set ctr")
    expect(c.line(), b"42", "incr")
    expect(c.line(), b"40", "decr")
    c.send(b"delete ctr\r\ndelete ctr\r\nget ctr\r\n")
    expect(c.line(), b"DELETED", "delete")
    expect(c.line(), b"NOT_FOUND", "delete again")
    expect(c.line(), b"END", "get deleted")
    # MC_HOLD_SECONDS (set when the test checks fabrics): stay connected that
    # long, so that a fabsock stat sample sees this short connection.
    time.sleep(float(os.environ.get("MC_HOLD_SECONDS", "0")))
    c.send(b"quit\r\n")
    total = sum(len(v) for v in values.values())
    print("ok %d values, %d bytes, round trips verified" % (len(values), total))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # any failure is a test failure, with its reason
        print("FAIL %s: %s" % (type(e).__name__, e))
        sys.exit(1)
