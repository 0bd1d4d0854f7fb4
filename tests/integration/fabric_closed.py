#!/usr/bin/env python3
"""Which fabric the connections that closed during a test went over, from
two `fabsock stat --json` documents: one taken before the client started,
one after it ended.

    fabric_closed.py BEFORE.json AFTER.json PORT FABRIC [MIN]

A connection that lived too short for a sample to see it is gone from the
tables, but its process counts it (the "closed" object of each process: by
the fabric that carried some of its data, "tcp" when none did).  The
processes that listen on PORT in AFTER (the server side) are compared with
their counts in BEFORE (0 for a process not there yet).  Prints one line;
exit 0 when at least MIN (default 1) connections closed on FABRIC and none
on another fabric (for FABRIC tcp: none on shm or rdma; for shm or rdma,
connections on TCP alone are allowed, a program's short control
connections never reach the upgrade threshold), 1 when some closed on
another fabric or fewer than MIN on FABRIC while others did, 2 when none
closed at all, a listener is not there, or a document is not valid JSON.
"""
import json
import sys

from stat_json import listening, port_of

FABRICS = ("shm", "rdma", "tcp")


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print("cannot read %s: %s" % (path, e))
        return None


def main():
    if len(sys.argv) not in (5, 6):
        print("usage: fabric_closed.py BEFORE.json AFTER.json PORT FABRIC [MIN]")
        return 2
    before, after = load(sys.argv[1]), load(sys.argv[2])
    if before is None or after is None:
        return 2
    port, want = sys.argv[3], sys.argv[4]
    least = int(sys.argv[5]) if len(sys.argv) == 6 else 1
    was = {p.get("pid"): p.get("closed") or {} for p in before.get("processes", [])}
    delta = dict.fromkeys(FABRICS, 0)
    who = []
    for p in after.get("processes", []):
        if not any(listening(c) and port_of(c.get("local")) == port for c in p.get("connections", [])):
            continue
        now, then = p.get("closed") or {}, was.get(p.get("pid"), {})
        d = {f: int(now.get(f, 0)) - int(then.get(f, 0)) for f in FABRICS}
        for f in FABRICS:
            delta[f] += d[f]
        who.append("%s[%s] %s" % (p.get("program", "?"), p.get("pid"),
                                  " ".join("%s %d" % (f, d[f]) for f in FABRICS if d[f])))
    if not who:
        print("no process listens on %s in fabsock stat" % port)
        return 2
    line = "closed during the test on %s's listeners: %s" % (port, "; ".join(who))
    if sum(delta.values()) == 0:
        print("no connection closed: " + line)
        return 2
    others = [f for f in FABRICS if f != want and delta[f] and (want == "tcp" or f != "tcp")]
    if others or delta[want] < least:
        print("%s (want %d or more on %s, none elsewhere)" % (line, least, want))
        return 1
    print("%d on %s: %s" % (delta[want], want, line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
