#!/usr/bin/env python3
"""What share of the connections on a port use a fabric, per side.

    fabsock stat --json | fabric_share.py PORT FABRIC MIN_PERCENT both|any [BAD_REASON...]

Server side: connections whose local port is PORT; client side: peer port
PORT (listening sockets left out).  Prints one line: the count on FABRIC
over all, per side, with the reasons of the others.  A connection still on
its way (reason pending, or upgrading) is not counted either way when FABRIC
is not tcp: a client that reconnects always has a few.  Exit 0 when each side
has at least one connection, at least MIN_PERCENT of each side is on
FABRIC and no connection shows one of the BAD_REASONs; 1 otherwise; 2 on
bad input.
"""
import collections
import sys

from stat_json import port_of, read_doc


def main():
    if len(sys.argv) < 5 or sys.argv[4] not in ("both", "any"):
        print("usage: fabric_share.py PORT FABRIC MIN_PERCENT both|any [BAD_REASON...]")
        return 2
    port, want, minpct, need = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    bad = set(sys.argv[5:])
    doc = read_doc()
    if doc is None:
        return 2
    sides = {"server": [0, 0, collections.Counter()], "client": [0, 0, collections.Counter()]}
    badseen = collections.Counter()
    undecided = collections.Counter()
    for proc in doc.get("processes", []):
        for c in proc.get("connections", []):
            if c.get("listening") or c.get("state") in ("listen", "closed"):
                continue
            side = "server" if port_of(c.get("local")) == port else "client" if port_of(c.get("peer")) == port else None
            if side is None:
                continue
            s = sides[side]
            if want != "tcp" and c.get("fabric") != want and (
                    c.get("reason") == "pending" or c.get("state") == "upgrading"):
                # not decided yet (a client that reconnects, as wrk does after
                # nginx's 1000 requests per connection, always has a few)
                undecided[side] += 1
                continue
            s[1] += 1
            if c.get("fabric") == want:
                s[0] += 1
            else:
                s[2]["%s/%s" % (c.get("fabric"), c.get("reason"))] += 1
            if c.get("reason") in bad:
                badseen[c.get("reason")] += 1
    ok = not badseen
    listed = [s[1] > 0 for s in sides.values()]
    ok = ok and (all(listed) if need == "both" else any(listed))
    parts = []
    for name, (on, total, others) in sides.items():
        pct = 100.0 * on / total if total else 0.0
        ok = ok and (total == 0 or pct >= minpct)
        desc = "%s %d/%d on %s (%.0f%%)" % (name, on, total, want, pct)
        if undecided[name]:
            desc += ", %d still pending" % undecided[name]
        if others:
            desc += " [%s]" % ", ".join("%d %s" % (n, r) for r, n in others.most_common(3))
        parts.append(desc)
    if badseen:
        parts.append("bad reasons: %s" % ", ".join("%d %s" % (n, r) for r, n in badseen.items()))
    print("; ".join(parts))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
