"""t_aslimit's programs: an echo server and a client, each under an
address-space limit (ulimit -v), which after their transfers allocate a
fifth of that limit, as the application's own memory.

  aslimit.py server PORTFILE CONNS LIMIT_BYTES
  aslimit.py client PORT CONNS LIMIT_BYTES

Each connection carries SIZE random bytes each way (the client checks the
echo's sha256).  Both print "allocated N bytes after CONNS connections" at
the end, or the error they met."""
import hashlib
import os
import socket
import sys
import threading

SIZE = 2 << 20


def spare(limit, conns, who):
    try:
        b = bytearray(limit // 5)
        b[-1] = 1
    except MemoryError:
        # What took the address space, for the report: the largest kinds.
        sizes = {}
        for line in open('/proc/self/maps'):
            q = line.split()
            lo, hi = (int(x, 16) for x in q[0].split('-'))
            key = '%s %s' % (q[1], q[5] if len(q) > 5 else '(anonymous)')
            sizes[key] = sizes.get(key, 0) + hi - lo
        for key, n in sorted(sizes.items(), key=lambda kv: -kv[1])[:8]:
            sys.stderr.write('%s: %d KiB %s\n' % (who, n >> 10, key))
        raise SystemExit('%s: MemoryError allocating %d bytes after %d connections' % (who, limit // 5, conns))
    print('%s: allocated %d bytes after %d connections' % (who, len(b), conns), flush=True)


def server(portfile, conns, limit):
    lst = socket.socket()
    lst.bind(('127.0.0.1', 0))
    lst.listen(conns)
    with open(portfile + '.tmp', 'w') as f:
        f.write(str(lst.getsockname()[1]))
    os.rename(portfile + '.tmp', portfile)
    socks = [lst.accept()[0] for _ in range(conns)]
    for s in socks:
        n = 0
        while n < SIZE:
            b = s.recv(1 << 20)
            if not b:
                raise SystemExit('server: early EOF after %d bytes' % n)
            s.sendall(b)
            n += len(b)
    spare(limit, conns, 'server')
    for s in socks:
        s.close()


def client(port, conns, limit):
    data = os.urandom(SIZE)
    want = hashlib.sha256(data).hexdigest()
    socks = [socket.create_connection(('127.0.0.1', port)) for _ in range(conns)]
    for i, s in enumerate(socks):
        t = threading.Thread(target=s.sendall, args=(data,))
        t.start()
        got = bytearray()
        while len(got) < SIZE:
            b = s.recv(1 << 20)
            if not b:
                break
            got += b
        t.join()
        if hashlib.sha256(got).hexdigest() != want:
            raise SystemExit('client: connection %d: %d bytes back, not what was sent' % (i, len(got)))
    spare(limit, conns, 'client')
    for s in socks:
        s.close()


if __name__ == '__main__':
    if sys.argv[1] == 'server':
        server(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        client(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
