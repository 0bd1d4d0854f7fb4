#!/usr/bin/env python3
"""List the connections on a port from `fabsock stat --json` (on stdin).

    fabsock stat --json | hook_stat.py PORT

One line per connection whose local or peer port is PORT (listening sockets
are ignored), as KEY=VALUE words the shell can pick apart:

    pid=N fd=N dir=connect|accept fabric=F state=S reason=R tx_bytes=N
    rx_bytes=N tx_msgs=N rx_msgs=N fabric_tx=N fabric_rx=N

Exit 0 when at least one connection matched, 1 when none did, 2 when the
input is not JSON.
"""
import sys

from stat_json import connections, read_doc


def main():
    if len(sys.argv) != 2:
        print("usage: hook_stat.py PORT")
        return 2
    doc = read_doc()
    if doc is None:
        return 2
    n = 0
    for proc, c in connections(doc, sys.argv[1]):
        n += 1
        print("pid=%s fd=%s dir=%s fabric=%s state=%s reason=%s tx_bytes=%s rx_bytes=%s "
              "tx_msgs=%s rx_msgs=%s fabric_tx=%s fabric_rx=%s" % (
                  proc.get("pid"), c.get("fd"), c.get("dir"), c.get("fabric"), c.get("state"),
                  c.get("reason"), c.get("tx_bytes"), c.get("rx_bytes"), c.get("tx_msgs"),
                  c.get("rx_msgs"), c.get("fabric_tx_bytes"), c.get("fabric_rx_bytes")))
    return 0 if n else 1


if __name__ == "__main__":
    sys.exit(main())
