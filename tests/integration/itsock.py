"""Socket helpers the integration tests' Python programs share."""
import os
import socket
import threading
import time


def exact(s, n):
    """Exactly n bytes from socket s; SystemExit at an early EOF."""
    got = bytearray()
    while len(got) < n:
        b = s.recv(n - len(got))
        if not b:
            raise SystemExit('early EOF after %d of %d bytes' % (len(got), n))
        got += b
    return bytes(got)


def wait_path(path, secs=60):
    """Until path exists (the test's go-ahead); SystemExit after secs."""
    t = time.monotonic()
    while not os.path.exists(path):
        if time.monotonic() - t > secs:
            raise SystemExit('no %s after %d s' % (path, secs))
        time.sleep(0.05)


def echo_trips(s, n, size=65536):
    """n round trips of size random bytes against an echo, each checked;
    prints "exchanged BYTES bytes each way" (the test's cue)."""
    for i in range(n):
        m = os.urandom(size)
        s.sendall(m)
        if exact(s, len(m)) != m:
            raise SystemExit('round trip %d: the echo differs' % i)
    print('exchanged %d bytes each way' % (n * size), flush=True)


def echo_until_eof(c):
    """Echo what socket c receives until EOF, then close it."""
    while True:
        b = c.recv(65536)
        if not b:
            break
        c.sendall(b)
    c.close()


def serve_each(ls, n, fn=echo_until_eof):
    """Accept n connections on ls, each served by fn(conn) on a thread of
    its own; once all are done, print "served N" (the test's check)."""
    threads = []
    for _ in range(n):
        c, _ = ls.accept()
        t = threading.Thread(target=fn, args=(c,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    print('served %d' % n, flush=True)


def listen_portfile(portfile, backlog=1):
    """A listener on 127.0.0.1 at a port of the kernel's choosing, written
    to portfile (atomically: the test reads it once it exists)."""
    ls = socket.socket()
    ls.bind(('127.0.0.1', 0))
    ls.listen(backlog)
    with open(portfile + '.tmp', 'w') as f:
        f.write('%d\n' % ls.getsockname()[1])
    os.rename(portfile + '.tmp', portfile)
    return ls
