#!/usr/bin/env python3
"""An echo server in an SO_REUSEPORT group: reuseport.py PORT READYFILE.

Binds 127.0.0.1:PORT with SO_REUSEPORT, listens, writes READYFILE, and
echoes every connection the kernel hands it (a thread each) until killed.
Two of them on one port: the second process's listener cannot serve the
port's rendezvous name (the first one's), so its connections must be
found by its own name.
"""
import socket
import sys
import threading

from itsock import echo_until_eof


def main():
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    ls.bind(("127.0.0.1", int(sys.argv[1])))
    ls.listen(64)
    with open(sys.argv[2], "w") as f:
        f.write("ok\n")
    while True:
        c, _ = ls.accept()
        threading.Thread(target=echo_until_eof, args=(c,), daemon=True).start()


if __name__ == "__main__":
    main()
