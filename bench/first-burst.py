#!/usr/bin/env python3
"""first-burst.py [-r ROUNDS] [-n BURSTS] [LIB] [KIB ...]: the first burst
of a connection, what a short download is: a new loopback connection, both
ends preloaded with the whole stream on shm (FABSOCK_UPGRADE_BYTES=0 and a
50 ms pause for the upgrade), then the server sends KIB KiB (default 192
and 1024) in 64 KiB writes and the client times them from its go-ahead to
the last byte.  The rings are new, so each burst is the first use of their
pages (docs/design.md, "Kernel copies for cold rings").

Sides, alternating round by round (default 3 rounds of 15 bursts): plain
TCP, LIB with FABSOCK_KCOPY=0 (every copy a memcpy) and LIB as it is.
Prints p50/p99 ms per side and size, then JSON on the last line.
"""
import json
import os
import socket
import subprocess
import sys
import time

CHUNK = 65536


def server(port, nbytes, bursts):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(('127.0.0.1', port))
    ls.listen(8)
    print('ready', flush=True)
    buf = os.urandom(CHUNK)
    for _ in range(bursts):
        c, _ = ls.accept()
        c.recv(1)          # hello: past the threshold of 0
        time.sleep(0.05)   # the upgrade
        c.sendall(b'x')
        c.recv(1)          # go
        left = nbytes
        while left:
            left -= c.send(buf[:min(CHUNK, left)])
        c.recv(1)
        c.close()


def client(port, nbytes, bursts):
    out = []
    b = bytearray(CHUNK)
    for _ in range(bursts):
        s = socket.create_connection(('127.0.0.1', port))
        s.sendall(b'h')
        s.recv(1)
        t0 = time.perf_counter()
        s.sendall(b'g')
        got = 0
        while got < nbytes:
            n = s.recv_into(b)
            if n == 0:
                raise SystemExit('first-burst: connection closed early')
            got += n
        out.append((time.perf_counter() - t0) * 1e3)
        s.sendall(b'z')
        s.close()
    print(json.dumps(out), flush=True)


def run_side(env, kib, bursts, port):
    me = os.path.abspath(__file__)
    args = [str(port), str(kib << 10), str(bursts)]
    srv = subprocess.Popen([sys.executable, me, '--server'] + args, env=env, stdout=subprocess.PIPE, text=True)
    srv.stdout.readline()
    cli = subprocess.run([sys.executable, me, '--client'] + args, env=env, stdout=subprocess.PIPE, text=True,
                         check=True)
    srv.wait(timeout=30)
    return json.loads(cli.stdout.strip().splitlines()[-1])


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]


def main():
    argv = sys.argv[1:]
    if argv and argv[0] in ('--server', '--client'):
        port, nbytes, bursts = (int(x) for x in argv[1:4])
        (server if argv[0] == '--server' else client)(port, nbytes, bursts)
        return
    rounds, bursts = 3, 15
    while argv and argv[0] in ('-r', '-n'):
        if argv[0] == '-r':
            rounds = int(argv[1])
        else:
            bursts = int(argv[1])
        argv = argv[2:]
    here = os.path.dirname(os.path.abspath(__file__))
    lib = argv[0] if argv and not argv[0].isdigit() else os.environ.get(
        'FABSOCK_LIB', os.path.join(here, '..', 'build', '.libs', 'libfabsock.so'))
    sizes = [int(x) for x in (argv[1:] if argv and not argv[0].isdigit() else argv)] or [192, 1024]
    if not os.path.isfile(lib):
        raise SystemExit('first-burst: no library at %s' % lib)
    base = {k: v for k, v in os.environ.items() if k != 'LD_PRELOAD'}
    pre = dict(base, LD_PRELOAD=lib, FABSOCK_UPGRADE_BYTES='0')
    sides = [('plain', base), ('kcopy off', dict(pre, FABSOCK_KCOPY='0')), ('libfabsock', pre)]
    res = {(n, k): [] for n, _ in sides for k in sizes}
    port = 20000 + os.getpid() % 20000
    for r in range(rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        for name, env in order:
            for kib in sizes:
                port += 1
                res[(name, kib)] += run_side(env, kib, bursts, port)
    print('%-12s %8s %10s %10s' % ('side', 'burst', 'p50 ms', 'p99 ms'))
    rows = []
    for kib in sizes:
        for name, _ in sides:
            v = res[(name, kib)]
            rows.append({'side': name, 'kib': kib, 'p50_ms': pct(v, 0.5), 'p99_ms': pct(v, 0.99), 'n': len(v)})
            print('%-12s %5d KiB %10.3f %10.3f' % (name, kib, pct(v, 0.5), pct(v, 0.99)))
    print(json.dumps({'rounds': rounds, 'bursts': bursts, 'rows': rows}))


if __name__ == '__main__':
    main()
