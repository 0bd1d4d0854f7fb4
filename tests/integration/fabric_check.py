#!/usr/bin/env python3
"""Check `fabsock stat --json` (on stdin) for the fabric of some connections.

    fabsock stat --json | fabric_check.py PORT|PORT@BYTES|PID:FD FABRIC

Input format: see stat_json.py.
PORT selects every connection whose local or peer port is PORT (both ends of
a loopback connection when both processes run libfabsock); PORT@BYTES those
of them that moved at least BYTES; PID:FD selects one.
Listening sockets are ignored.  Prints one line; exit 0 when at least one
connection matched and all report FABRIC, 1 when one reports something else,
2 when none matched or the input is not valid JSON, 3 when every one that is
not on FABRIC is still on its way (reason pending, or upgrading): a sample
taken too early says nothing yet.
"""
import sys

from stat_json import connections, read_doc


def main():
    if len(sys.argv) != 3:
        print("usage: fabric_check.py PORT|PORT@BYTES|PID:FD FABRIC")
        return 2
    key, want = sys.argv[1], sys.argv[2]
    doc = read_doc()
    if doc is None:
        return 2
    found = list(connections(doc, key))
    if not found:
        print("no connection on %s in fabsock stat (%d processes)" % (key, len(doc.get("processes", []))))
        return 2
    desc = []
    bad = 0
    early = 0
    for proc, c in found:
        fab = c.get("fabric")
        if fab != want:
            bad += 1
            if want != "tcp" and (c.get("reason") == "pending" or c.get("state") == "upgrading"):
                early += 1
        desc.append("%s[%s] fd %s %s->%s fabric=%s state=%s reason=%s" % (
            proc.get("program", "?"), proc.get("pid"), c.get("fd"), c.get("local"), c.get("peer"),
            fab, c.get("state"), c.get("reason")))
    verdict = "all %s" % want if not bad else "%d of %d not %s" % (bad, len(found), want)
    print("%s: %s" % (verdict, "; ".join(desc)))
    if bad and early == bad:
        return 3
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
