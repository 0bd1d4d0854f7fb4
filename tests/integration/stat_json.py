"""`fabsock stat --json` for the test scripts (fabric_check.py, hook_stat.py).

Input format (tools/fabsock):
  {"processes":[{"pid":N,"program":"..","connections":[{"fd":N,"state":"..",
    "fabric":"shm","local":"127.0.0.1:5000","peer":"127.0.0.1:40000",
    "tx_bytes":N,"rx_bytes":N,"reason":"none",...}]}]}
"""
import json
import sys


def port_of(addr):
    if not isinstance(addr, str) or ":" not in addr:
        return None
    return addr.rsplit(":", 1)[1]


def read_doc():
    """The document on stdin, or None after printing why it is not JSON."""
    raw = sys.stdin.read()
    try:
        return json.loads(raw)
    except ValueError as e:
        print("not JSON (%s): %s" % (e, raw.strip()[:200].replace("\n", " ")))
        return None


def listening(c):
    """Is connection entry c a listening socket?"""
    return c.get("listening") is True or str(c.get("state", "")).lower() in ("listen", "listening")


def connections(doc, key):
    """(process, connection) pairs, listening sockets left out, selected by
    KEY: PORT (local or peer port; both ends of a loopback connection when
    both processes run libfabsock), PORT@BYTES (those of them that moved at
    least BYTES either way: a program's data connections, not its small
    control connection, which never reaches the upgrade threshold) or PID:FD
    (that one)."""
    least = 0
    if "@" in key:
        key, least = key.split("@", 1)
        least = int(least)
    pid_fd = key.split(":") if ":" in key else None
    for proc in doc.get("processes", []):
        for c in proc.get("connections", []):
            if listening(c):
                continue
            if pid_fd:
                if str(proc.get("pid")) != pid_fd[0] or str(c.get("fd")) != pid_fd[1]:
                    continue
            elif key not in (port_of(c.get("local")), port_of(c.get("peer"))):
                continue
            if int(c.get("tx_bytes", 0)) + int(c.get("rx_bytes", 0)) < least:
                continue
            yield proc, c
