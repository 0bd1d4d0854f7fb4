#!/usr/bin/env python3
"""A rendezvous name whose server goes away without answering:
namegone.py ADDRESS PORT READYFILE

Binds the shm rendezvous name of ADDRESS:PORT (fabric/shm/rdvio.h) before
the real server listens, so that the server cannot serve it, writes
READYFILE, takes the first request it is sent, closes it unanswered and
exits (as a process serving the name does when it exec's: a socket
activator handing the listener to its service).  Exits 0 after 20 s if
nobody asked (the client is not preloaded), 2 if it could not bind.
"""
import os
import select
import socket
import sys


def main():
    addr, port, ready = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    name = b'\0fabsock1/4/%s/%d' % (addr.encode(), port)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.bind(name)
        s.listen(8)
    except OSError as e:
        print('bind %r: %s' % (name, e), flush=True)
        return 2
    with open(ready + '.tmp', 'w') as f:
        f.write('ready\n')
    os.rename(ready + '.tmp', ready)
    if not select.select([s], [], [], 20)[0]:
        print('nobody asked', flush=True)
        return 0
    c, _ = s.accept()
    c.recvmsg(256, socket.CMSG_SPACE(64))  # its descriptors go with it
    c.close()
    print('closed one request unanswered', flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
