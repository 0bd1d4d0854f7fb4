"""Socket helpers the integration tests' Python programs share."""
import os
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
