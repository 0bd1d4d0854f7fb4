#!/usr/bin/env python3
"""Small helpers for the VM tests (plain socket code: run it with or without LD_PRELOAD).

  vmtool.py echo-server [--bind ADDR] [--port N] [--port-file F]
      Echo every byte of every connection back until EOF (one thread per connection).
  vmtool.py echo-client HOST:PORT [--bytes N] [--chunk N] [--seed S] [--nonblock-connect]
                        [--ready-file F --hold-file F --hold-timeout S [--ready-at-end]]
                        [--gate-file F [--gate-at N]]
      Send N deterministic pseudo-random bytes in chunks, read each chunk's echo back, and compare
      everything received with what was sent.  --nonblock-connect connects as event loops do
      (O_NONBLOCK set with fcntl, connect in progress, poll() for writable, SO_ERROR).  With --ready-file, after half the bytes it creates
      F and waits until the hold file is gone (so a test can inspect the live connection);
      with --ready-at-end, once every byte came back, before it shuts the connection down.
      With --gate-file, after N bytes (default one chunk) came back it waits (up to the hold
      timeout) until F exists: a test lets it go on once the connection is on the fabric, so
      what follows runs there however long the upgrade took.
      Prints one JSON line: ok, bytes sent and received, sha256 of both, connect_s, elapsed_s
      (from before connect to the end, less held_s, the time spent waiting on the hold file).
      Exit 0 when the echo matched, 1 when it did not, 2 on a socket error.
  vmtool.py many-client HOST:PORT [--conns N] [--bytes N] [--big N] [--ready-file F --hold-file F]
      Open N connections from this one process; on each, echo N pseudo-random bytes (default 8 KiB:
      past the upgrade threshold), rest 2 s, echo another round on each (--big bytes, default
      --bytes, in 64 KiB pieces, each sent whole before its echo is read), then create the ready
      file and wait until the hold file is gone, and close them all.  Prints {ok, conns, ...};
      exit 0 when every echo matched.
  vmtool.py sink-server [--bind ADDR] --port N --out F [--wait-file W]
      Take one connection, read it to EOF, write {"bytes": N, "sha": ...} to F and exit.  With
      --wait-file, it creates W once it has the connection and reads nothing while W exists (up
      to 120 s): a peer that does not read, as a server busy elsewhere.
  vmtool.py burst-client HOST:PORT --bytes N --end close|exit|_exit [--chunk N] [--seed S]
                         [--ready-file F --hold-file F]
      Send half the bytes, create the ready file and wait until the hold file is gone (the test
      sees the connection go rdma meanwhile), send the rest and end at once through C's exit():
      after close() (--end close) or with the socket still open (--end exit), as programs that
      write their last bytes and quit do; --end _exit: socket open, through _exit() (no exit
      handler runs).  Prints {"bytes", "sha"} of what it sent first.
  vmtool.py stat [--peer A:P] [--local A:P] [--pid N] < fabsock-stat.json
      Print the matching connections of `fabsock stat --json`, one per line:
      "pid program fd state fabric reason tx_bytes rx_bytes local peer resumes" (A:* matches any
      port);
      listening sockets are
      left out.  Exit 0 (even when none match), 2 when the input is not the documented JSON.
  vmtool.py iperf3 FILE
      Print "sent_bytes received_bytes receiver_MBps" from an iperf3 --json result (exit 2 on an
      iperf3 error, whose message is printed).
  vmtool.py flood-client HOST:PORT [--ready-file F --ready-bytes N] [--timeout S]
      Send 64 KiB chunks with blocking send() and never read (so against an echo server it soon
      blocks), until send fails; creates F after N bytes (1 MiB).  Prints one JSON line: error
      (the errno name), sent, and at (time.time() of the failure).  Exit 0 when send failed
      with an error, 1 when S seconds (60) passed without one.
  vmtool.py sync TAG [--value V] [--timeout S] [--port N]
      Two-host runs (run-two-hosts.sh): a barrier between this guest and the other one.  Both
      call it with the same TAG; each returns once both have arrived, and prints the value the
      other passed (e.g. a port number).  Over TCP between FABSOCK_VM_SELF and FABSOCK_VM_PEER,
      port 7999 (run it without LD_PRELOAD).  Exit 1 after S seconds (120) without the peer, or
      when the peer arrived at another TAG (the two scripts are out of step)."""

import errno
import fcntl
import hashlib
import json
import os
import random
import select
import socket
import sys
import threading
import time


def opt(args, name, default=None, conv=str):
    if name in args:
        i = args.index(name)
        val = args[i + 1]
        del args[i:i + 2]
        return conv(val)
    return default


def listener(args, backlog):
    """A listening socket on --bind (all addresses) and --port (any free)."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((opt(args, "--bind", "0.0.0.0"), opt(args, "--port", 0, int)))
    srv.listen(backlog)
    return srv


def echo_server(args):
    port_file = opt(args, "--port-file")
    srv = listener(args, 16)
    if port_file:
        tmp = port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % srv.getsockname()[1])
        os.rename(tmp, port_file)

    def serve(conn):
        with conn:
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                conn.sendall(data)

    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def ready_hold(ready, hold, seconds):
    """Say ready (create the file READY), then wait while the file HOLD exists, at most SECONDS.
    Returns the seconds it waited."""
    with open(ready, "w"):
        pass
    t = time.monotonic()
    while hold and os.path.exists(hold) and time.monotonic() < t + seconds:
        time.sleep(0.05)
    return round(time.monotonic() - t, 3)


def echo_client(args):
    target = args.pop(0)
    nbytes = opt(args, "--bytes", 1 << 20, int)
    chunk = opt(args, "--chunk", 16384, int)
    seed = opt(args, "--seed", 1, int)
    ready = opt(args, "--ready-file")
    hold = opt(args, "--hold-file")
    hold_timeout = opt(args, "--hold-timeout", 60.0, float)
    gate = opt(args, "--gate-file")
    gate_at = opt(args, "--gate-at", chunk, int)
    nonblock = "--nonblock-connect" in args
    host, port = target.rsplit(":", 1)
    data = random.Random(seed).randbytes(nbytes)
    got = bytearray()
    res = {"ok": False, "bytes": nbytes, "sent": 0, "received": 0}
    t0 = time.monotonic()
    try:
        if nonblock:
            # As iperf3, redis-cli and most event loops do: O_NONBLOCK with fcntl (Python's
            # setblocking() uses ioctl(FIONBIO) instead), connect in progress, poll, SO_ERROR.
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            fl = fcntl.fcntl(s.fileno(), fcntl.F_GETFL)
            fcntl.fcntl(s.fileno(), fcntl.F_SETFL, fl | os.O_NONBLOCK)
            err = s.connect_ex((host, int(port)))
            if err not in (0, errno.EINPROGRESS):
                raise OSError(err, os.strerror(err))
            p = select.poll()
            p.register(s.fileno(), select.POLLOUT)
            p.poll()
            err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                raise OSError(err, os.strerror(err))
            fcntl.fcntl(s.fileno(), fcntl.F_SETFL, fl)
        else:
            s = socket.create_connection((host, int(port)))
        res["connect_s"] = round(time.monotonic() - t0, 3)
        off = 0
        held = ready is None
        at = nbytes if "--ready-at-end" in args else nbytes // 2

        def hold_here():
            res["held_s"] = ready_hold(ready, hold, hold_timeout)

        while off < nbytes:
            if gate and off >= gate_at:
                deadline = time.monotonic() + hold_timeout
                while not os.path.exists(gate) and time.monotonic() < deadline:
                    time.sleep(0.05)
                gate = None
            if not held and off >= at:
                held = True
                hold_here()
            piece = data[off:off + chunk]
            s.sendall(piece)
            res["sent"] += len(piece)
            want = len(got) + len(piece)
            while len(got) < want:
                b = s.recv(want - len(got))
                if not b:
                    raise ConnectionError("EOF after %d echoed bytes" % len(got))
                got += b
            off += len(piece)
        if not held:
            hold_here()
        s.shutdown(socket.SHUT_WR)
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
        s.close()
        status = 0
    except OSError as e:
        res["error"] = "%s: %s" % (type(e).__name__, e)
        status = 2
    res["received"] = len(got)
    res["elapsed_s"] = round(time.monotonic() - t0 - res.get("held_s", 0), 3)
    res["sha_sent"] = hashlib.sha256(data).hexdigest()[:16]
    res["sha_received"] = hashlib.sha256(bytes(got)).hexdigest()[:16]
    res["ok"] = status == 0 and bytes(got) == data
    if status == 0 and not res["ok"]:
        status = 1
        for i, (a, b) in enumerate(zip(data, got)):
            if a != b:
                res["first_difference"] = i
                break
    print(json.dumps(res), flush=True)
    return status


def many_client(args):
    """Open N connections from this one process, each echoing a round of bytes, rest (their
    upgrades run), echo a second round on each, then hold them all open (ready/hold files)."""
    target = args.pop(0)
    n = opt(args, "--conns", 100, int)
    nbytes = opt(args, "--bytes", 8192, int)
    big = opt(args, "--big", 0, int)
    ready = opt(args, "--ready-file")
    hold = opt(args, "--hold-file")
    host, port = target.rsplit(":", 1)
    res = {"ok": False, "conns": 0, "rounds": 0}
    socks = []
    t0 = time.monotonic()

    def round_trip(s, seed, n=nbytes, chunk=None):
        data = random.Random(seed).randbytes(n)
        chunk = chunk or n
        for off in range(0, n, chunk):
            piece = data[off:off + chunk]
            s.sendall(piece)
            got, sizes = bytearray(), []
            while len(got) < len(piece):
                b = s.recv(len(piece) - len(got))
                if not b:
                    raise ConnectionError("EOF after %d echoed bytes" % (off + len(got)))
                got += b
                sizes.append(len(b))
            if bytes(got) != piece:
                at = next(i for i in range(len(piece)) if got[i] != piece[i])
                where = data.find(bytes(got[at:at + 32]))
                raise ValueError("connection %d: echo differs at %d (+%d; the bytes there are the stream's "
                                 "from %d; received in %s)" % (socks.index(s), off, at, where, sizes[:40]))

    try:
        for i in range(n):
            s = socket.create_connection((host, int(port)))
            socks.append(s)
            round_trip(s, i)
        res["conns"] = len(socks)
        time.sleep(2)  # every upgrade starts 2 ms after the threshold: let them finish
        for i, s in enumerate(socks):
            round_trip(s, n + i, big or nbytes, 65536)
        res["rounds"] = 2
        if ready:
            ready_hold(ready, hold, 120)
        for s in socks:
            s.close()
        res["ok"] = True
    except (OSError, ValueError) as e:
        res["error"] = "%s: %s" % (type(e).__name__, e)
    res["elapsed_s"] = round(time.monotonic() - t0, 3)
    print(json.dumps(res), flush=True)
    return 0 if res["ok"] else 1


def sink_server(args):
    out = opt(args, "--out")
    wait = opt(args, "--wait-file")
    conn, _ = listener(args, 1).accept()
    if wait:
        with open(wait, "w"):
            pass
        deadline = time.monotonic() + 120
        while os.path.exists(wait) and time.monotonic() < deadline:
            time.sleep(0.05)
    h, n = hashlib.sha256(), 0
    while True:
        b = conn.recv(1 << 16)
        if not b:
            break
        h.update(b)
        n += len(b)
    with open(out + ".tmp", "w") as f:
        json.dump({"bytes": n, "sha": h.hexdigest()[:16]}, f)
    os.rename(out + ".tmp", out)
    return 0


def burst_client(args):
    import ctypes
    target = args.pop(0)
    nbytes = opt(args, "--bytes", 8 << 20, int)
    chunk = opt(args, "--chunk", 1 << 16, int)
    seed = opt(args, "--seed", 1, int)
    end = opt(args, "--end", "close")
    ready = opt(args, "--ready-file")
    hold = opt(args, "--hold-file")
    data = random.Random(seed).randbytes(nbytes)
    print(json.dumps({"bytes": nbytes, "sha": hashlib.sha256(data).hexdigest()[:16]}), flush=True)
    host, port = target.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    half = nbytes // 2
    s.sendall(data[:half])
    if ready:
        ready_hold(ready, hold, 60)
    for off in range(half, nbytes, chunk):
        s.sendall(data[off:off + chunk])
    if end == "close":
        s.close()
    sys.stdout.flush()
    if end == "_exit":
        os._exit(0)  # libc's _exit(): no destructor, no atexit handler
    ctypes.CDLL(None).exit(0)  # C's exit(): destructors run, Python's clean-up does not
    return 3


def addr_match(want, have):
    """want "A:P", or "A:*" for any port of A; None matches anything."""
    if want is None:
        return True
    if want.endswith(":*"):
        return (have or "").rsplit(":", 1)[0] == want[:-2]
    return have == want


def stat(args):
    peer = opt(args, "--peer")
    local = opt(args, "--local")
    pid = opt(args, "--pid", None, int)
    try:
        doc = json.load(sys.stdin)
        procs = doc["processes"]
    except (ValueError, KeyError, TypeError) as e:
        print("vmtool stat: not fabsock stat JSON: %s" % e, file=sys.stderr)
        return 2
    for p in procs:
        if pid is not None and p.get("pid") != pid:
            continue
        for c in p.get("connections", []):
            if c.get("state") in ("listen", "listening"):
                continue
            if not addr_match(peer, c.get("peer")) or not addr_match(local, c.get("local")):
                continue
            print(p.get("pid"), p.get("program"), c.get("fd"), c.get("state"), c.get("fabric"),
                  c.get("reason"), c.get("tx_bytes"), c.get("rx_bytes"), c.get("local"),
                  c.get("peer"), c.get("resumes", 0))
    return 0


def iperf3(args):
    try:
        with open(args[0]) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print("iperf3 result unreadable: %s" % e)
        return 2
    if "error" in doc:
        print("iperf3 error: %s" % doc["error"])
        return 2
    end = doc.get("end", {})
    try:
        sent = end["sum_sent"]["bytes"]
        recv = end["sum_received"]["bytes"]
        rate = end["sum_received"]["bits_per_second"] / 8e6
    except KeyError as e:
        print("iperf3 result incomplete: no %s" % e)
        return 2
    print(sent, recv, "%.1f" % rate)
    return 0


def flood_client(args):
    target = args.pop(0)
    ready = opt(args, "--ready-file")
    ready_bytes = opt(args, "--ready-bytes", 1 << 20, int)
    limit = opt(args, "--timeout", 60.0, float)
    host, port = target.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    s.settimeout(limit)
    piece = random.Random(3).randbytes(1 << 16)
    res = {"error": None, "sent": 0}
    try:
        while True:
            res["sent"] += s.send(piece)
            if ready and res["sent"] >= ready_bytes:
                with open(ready, "w"):
                    pass
                ready = None
    except socket.timeout:
        res["error"] = "timeout"
    except OSError as e:
        res["error"] = errno.errorcode.get(e.errno, str(e))
    res["at"] = time.time()
    print(json.dumps(res), flush=True)
    return 0 if res["error"] not in (None, "timeout") else 1


def sync(args):
    value = opt(args, "--value", "-")
    limit = opt(args, "--timeout", 120.0, float)
    port = opt(args, "--port", 7999, int)
    tag = args[0]
    me, peer = os.environ["FABSOCK_VM_SELF"], os.environ["FABSOCK_VM_PEER"]
    deadline = time.monotonic() + limit
    got = {}

    # Our side: the peer connects here and says "TAG VALUE"; we answer "ok" when it is our TAG.
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((me, port))
    srv.listen(4)

    def serve():
        while "peer" not in got and time.monotonic() < deadline:
            srv.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(10)
                try:
                    line = conn.makefile("r").readline().rstrip("\n").split(" ", 1)
                    ok = len(line) == 2 and line[0] == tag
                    conn.sendall(b"ok\n" if ok else b"wrong\n")
                except OSError:
                    continue
                got["peer"] = line[1] if ok else None
                if not ok:
                    got["wrong"] = line[0] if line else "?"

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    # Their side: connect until the peer listens (it may not have arrived yet), tell our TAG.
    told = False
    while not told and time.monotonic() < deadline:
        try:
            with socket.create_connection((peer, port), timeout=5) as c:
                c.sendall(("%s %s\n" % (tag, value)).encode())
                told = c.makefile("r").readline().strip() == "ok"
                if not told:
                    print("sync %s: the peer is at another step" % tag, file=sys.stderr)
                    return 1
        except OSError:
            time.sleep(0.1)
    th.join(max(0, deadline - time.monotonic()))
    srv.close()
    if "wrong" in got:
        print("sync %s: the peer arrived at %s" % (tag, got["wrong"]), file=sys.stderr)
        return 1
    if not told or got.get("peer") is None:
        print("sync %s: no peer within %gs" % (tag, limit), file=sys.stderr)
        return 1
    print(got["peer"])
    return 0


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = sys.argv[1], sys.argv[2:]
    table = {"echo-server": echo_server, "echo-client": echo_client, "many-client": many_client, "stat": stat,
             "iperf3": iperf3, "sink-server": sink_server, "burst-client": burst_client, "sync": sync,
             "flood-client": flood_client}
    if cmd not in table:
        print(__doc__, file=sys.stderr)
        return 2
    return table[cmd](args) or 0


if __name__ == "__main__":
    sys.exit(main())
