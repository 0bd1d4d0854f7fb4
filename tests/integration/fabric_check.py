#!/usr/bin/env python3
"""Check `fabsock stat --json` (on stdin) for the fabric of some connections.

    fabsock stat --json | fabric_check.py PORT|PID:FD FABRIC

Input format (tools/fabsock):
  {"processes":[{"pid":N,"program":"..","connections":[{"fd":N,"state":"..",
    "fabric":"shm","local":"127.0.0.1:5000","peer":"127.0.0.1:40000",
    "tx_bytes":N,"rx_bytes":N,"reason":"none",...}]}]}
PORT selects every connection whose local or peer port is PORT (both ends of
a loopback connection when both processes run libfabsock); PID:FD selects one.
Listening sockets are ignored.  Prints one line; exit 0 when at least one
connection matched and all report FABRIC, 1 when one reports something else,
2 when none matched or the input is not valid JSON.
"""
import json
import sys


def port_of(addr):
    if not isinstance(addr, str) or ":" not in addr:
        return None
    return addr.rsplit(":", 1)[1]


def main():
    if len(sys.argv) != 3:
        print("usage: fabric_check.py PORT|PID:FD FABRIC")
        return 2
    key, want = sys.argv[1], sys.argv[2]
    raw = sys.stdin.read()
    try:
        doc = json.loads(raw)
    except ValueError as e:
        print("not JSON (%s): %s" % (e, raw.strip()[:200].replace("\n", " ")))
        return 2
    pid_fd = key.split(":") if ":" in key else None
    found = []
    for proc in doc.get("processes", []):
        for c in proc.get("connections", []):
            if c.get("listening") is True or str(c.get("state", "")).lower() in ("listen", "listening"):
                continue
            if pid_fd:
                if str(proc.get("pid")) != pid_fd[0] or str(c.get("fd")) != pid_fd[1]:
                    continue
            elif key not in (port_of(c.get("local")), port_of(c.get("peer"))):
                continue
            found.append((proc, c))
    if not found:
        print("no connection on %s in fabsock stat (%d processes)" % (key, len(doc.get("processes", []))))
        return 2
    desc = []
    bad = 0
    for proc, c in found:
        fab = c.get("fabric")
        if fab != want:
            bad += 1
        desc.append("%s[%s] fd %s %s->%s fabric=%s state=%s reason=%s" % (
            proc.get("program", "?"), proc.get("pid"), c.get("fd"), c.get("local"), c.get("peer"),
            fab, c.get("state"), c.get("reason")))
    verdict = "all %s" % want if not bad else "%d of %d not %s" % (bad, len(found), want)
    print("%s: %s" % (verdict, "; ".join(desc)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
