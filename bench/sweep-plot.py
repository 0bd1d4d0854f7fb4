#!/usr/bin/env python3
"""Plot a size sweep of `fabsock-bench compare --json` as one SVG file.

    sweep-plot.py SWEEP.json OUT.svg

Two panels against message size (log-log): ping-pong round trip (p50 solid,
p99 dashed) for kernel TCP, libfabsock and the raw shared-memory floor; and
stream throughput (receiver GB/s) for kernel TCP and libfabsock, with the
floor's one-way rate (size / half its p50 round trip) for scale.  Plain
Python, no plotting package: the SVG is written by hand.  Prints the table
it plotted.
"""
import json
import math
import sys

W, H = 980, 430          # whole picture
PW, PH = 390, 300        # one panel's plot area
LEFT = (70, 560)         # each panel's left edge
TOP = 60
COLORS = {"tcp": "#d62728", "fabsock": "#1f77b4", "floor": "#2ca02c"}
LABELS = {"tcp": "kernel TCP", "fabsock": "libfabsock (preloaded)", "floor": "raw shm floor"}


def size_label(n):
    for unit, k in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= k and n % k == 0:
            return "%d%s" % (n // k, unit)
    return str(n)


def series(doc):
    """{(panel, who, stat): [(size, value), ...]} from the compare JSON."""
    out = {}

    def add(key, size, v):
        if v is not None and v > 0:
            out.setdefault(key, []).append((size, v))

    for r in doc.get("results", []):
        size = r.get("size", 0)
        if r["test"] == "pingpong":
            for side, who in (("plain", "tcp"), ("preloaded", "fabsock")):
                s = r.get(side, {})
                if s.get("ok"):
                    add(("lat", who, "p50"), size, s.get("p50_us"))
                    add(("lat", who, "p99"), size, s.get("p99_us"))
        elif r["test"] == "stream":
            for side, who in (("plain", "tcp"), ("preloaded", "fabsock")):
                s = r.get(side, {})
                if s.get("ok"):
                    add(("bw", who, "gbps"), size, s.get("gbps"))
        elif r["test"] == "shm-spin":
            s = r.get("raw", {})
            if s.get("ok"):
                add(("lat", "floor", "p50"), size, s.get("p50_us"))
                add(("lat", "floor", "p99"), size, s.get("p99_us"))
                p50 = s.get("p50_us") or 0
                if p50 > 0:  # one way: half a round trip
                    add(("bw", "floor", "gbps"), size, size / (p50 / 2 * 1e-6) / 1e9)
    for v in out.values():
        v.sort()
    return out


def log_range(values):
    lo, hi = min(values), max(values)
    return 10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi))


def panel(svg, x0, title, ylabel, data, xr, yr):
    def px(v):
        return x0 + PW * (math.log10(v) - math.log10(xr[0])) / (math.log10(xr[1]) - math.log10(xr[0]))

    def py(v):
        return TOP + PH - PH * (math.log10(v) - math.log10(yr[0])) / (math.log10(yr[1]) - math.log10(yr[0]))

    svg.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>' % (x0, TOP, PW, PH))
    svg.append('<text x="%d" y="%d" font-size="15" text-anchor="middle" font-weight="bold">%s</text>'
               % (x0 + PW / 2, TOP - 28, title))
    d = yr[0]
    while d <= yr[1] * 1.0001:
        y = py(d)
        svg.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (x0, x0 + PW, y, y))
        svg.append('<text x="%d" y="%.1f" font-size="11" text-anchor="end">%g</text>' % (x0 - 5, y + 4, d))
        d *= 10
    sizes = sorted({s for pts in data.values() for s, _ in pts})
    for s in sizes:
        x = px(s)
        svg.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#eee"/>' % (x, x, TOP, TOP + PH))
        svg.append('<text x="%.1f" y="%d" font-size="11" text-anchor="middle">%s</text>'
                   % (x, TOP + PH + 15, size_label(s)))
    svg.append('<text x="%d" y="%d" font-size="12" text-anchor="middle">message size (bytes)</text>'
               % (x0 + PW / 2, TOP + PH + 34))
    svg.append('<text x="%d" y="%d" font-size="12" text-anchor="middle" transform="rotate(-90 %d %d)">%s</text>'
               % (x0 - 48, TOP + PH / 2, x0 - 48, TOP + PH / 2, ylabel))
    for (who, stat), pts in sorted(data.items()):
        dash = ' stroke-dasharray="5,4"' if stat == "p99" else ""
        path = " ".join("%s%.1f,%.1f" % ("M" if i == 0 else "L", px(s), py(v)) for i, (s, v) in enumerate(pts))
        svg.append('<path d="%s" fill="none" stroke="%s" stroke-width="2"%s/>' % (path, COLORS[who], dash))
        for s, v in pts:
            svg.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>' % (px(s), py(v), COLORS[who]))


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        doc = json.load(f)
    ser = series(doc)
    lat = {(w, st): v for (p, w, st), v in ser.items() if p == "lat"}
    bw = {(w, st): v for (p, w, st), v in ser.items() if p == "bw"}
    if not lat and not bw:
        print("sweep-plot: no ping-pong or stream results in %s" % sys.argv[1], file=sys.stderr)
        return 1
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>']
    for i, (data, title, ylabel) in enumerate(((lat, "ping-pong round trip", "microseconds (p50 solid, p99 dashed)"),
                                                (bw, "stream throughput", "GB/s (receiver)"))):
        if not data:
            continue
        xs = [s for pts in data.values() for s, _ in pts]
        ys = [v for pts in data.values() for _, v in pts]
        panel(svg, LEFT[i], title, ylabel, data, log_range(xs), log_range(ys))
    lx = 70
    for who in ("tcp", "fabsock", "floor"):
        svg.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"/>'
                   % (lx, lx + 24, H - 18, H - 18, COLORS[who]))
        svg.append('<text x="%d" y="%d" font-size="12">%s</text>' % (lx + 30, H - 14, LABELS[who]))
        lx += 230
    rounds = doc.get("options", {}).get("rounds", "?")
    head = "one host (loopback), kernel %s, median of %s alternating rounds; floor on the right: size / half its round trip" % (
        doc.get("kernel", "?"), rounds)
    svg.append('<text x="%d" y="18" font-size="12" text-anchor="middle" fill="#555">%s</text>' % (W / 2, head))
    svg.append("</svg>")
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(svg) + "\n")
    print("%-6s %-8s %12s %12s %12s" % ("panel", "size", "kernel TCP", "libfabsock", "raw floor"))
    for panel_name, data, stat in (("p50 us", lat, "p50"), ("p99 us", lat, "p99"), ("GB/s", bw, "gbps")):
        sizes = sorted({s for (w, st), pts in data.items() if st == stat for s, _ in pts})
        for s in sizes:
            row = []
            for who in ("tcp", "fabsock", "floor"):
                v = dict(data.get((who, stat), [])).get(s)
                row.append("%12.3f" % v if v is not None else "%12s" % "-")
            print("%-6s %-8s %s" % (panel_name, size_label(s), " ".join(row)))
    print("wrote %s" % sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
