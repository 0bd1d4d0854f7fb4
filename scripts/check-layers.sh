#!/bin/bash
# scripts/check-layers.sh: check libfabsock's layering (HACKING.md, docs/design.md).
#
#   check-layers.sh [SRCDIR]      (SRCDIR defaults to the repo root, this script's parent)
#
# Prints TAP, one point per rule, each failure followed by "# " lines that name
# every offending file:line; exits 1 on any failure, 2 on a usage error.
#   1. no forbidden include arrow between layers
#   2. no module include cycle over MAX_CYCLE modules or across folders
#   3. no library source file over MAX_LINES lines
#   4. only policy/ reads FABSOCK_* settings (getenv/secure_getenv)
#   5. HAVE_RDMA only in its places
# Layers, lowest first (a layer sees those it lists, nothing else):
#   base/                       base/
#   policy/ hooks/ gpu/         base/, itself, the public header "fabsock/hook.h"
#   fabric/ (top level)         base/, policy/, fabric/ top level;
#                               fabric/registry.c alone also fabric/<name>/
#   fabric/<name>/              base/, policy/, gpu/, fabric/ top level, its own folder
#   engine/                     base/, policy/, hooks/, gpu/, public header, fabric/ top level, engine/
#   preload/                    everything; and nothing outside preload/ includes preload/
# Other folders (tools/, tests/, bench/, fuzz/, examples/, include/) are held to
# the preload/ rule only.  The whole check is one python3 pass (well under a second).
set -eu

# Rule 4 exceptions, PATH_PREFIX:NAME_PREFIX (docs/design.md, section 3):
# gpu/ reads its own driver knobs (FABSOCK_CUDA*, FABSOCK_GPU_*) where it
# loads the driver; base/stat.c the stat table's place and switch
# (FABSOCK_STATDIR, FABSOCK_STAT), which the fabsock command reads too.  Both
# sit below policy/.
GETENV_EXCEPTIONS="gpu/:FABSOCK_CUDA gpu/:FABSOCK_GPU_ base/stat.c:FABSOCK_STAT"
# Rule 5: the only paths (prefixes) that may say HAVE_RDMA; tests/, fuzz/ and
# bench/ are not checked.
HAVE_RDMA_PLACES="fabric/rdma/ fabric/registry.c tests/ fuzz/ bench/"
MAX_LINES=800
MAX_CYCLE=4

case ${1-} in
-h|--help) sed -n '2,4p' "$0"; exit 0 ;;
esac
if [ $# -gt 1 ]; then
  echo "usage: $0 [SRCDIR]" >&2
  exit 2
fi
srcdir=${1:-$(cd "$(dirname "$0")/.." && pwd)}
if [ ! -d "$srcdir" ]; then
  echo "Bail out! no such directory: $srcdir"
  exit 2
fi
command -v python3 >/dev/null || { echo "Bail out! python3 not found"; exit 2; }

exec python3 - "$srcdir" "$GETENV_EXCEPTIONS" "$HAVE_RDMA_PLACES" "$MAX_LINES" "$MAX_CYCLE" <<'PY'
import os, re, sys

root, getenv_exc, rdma_places, max_lines, max_cycle = sys.argv[1:]
getenv_exc = [e.split(':', 1) for e in getenv_exc.split()]
rdma_places = tuple(rdma_places.split())
max_lines, max_cycle = int(max_lines), int(max_cycle)
LIB = ('base/', 'policy/', 'hooks/', 'gpu/', 'fabric/', 'engine/', 'preload/')

# Read every .c/.h once.  Skip .git and build trees: build/ at the top, or any
# folder holding config.status (but not SRCDIR itself: an in-tree configure
# puts config.status there, and the sources are still ours to check).
files = {}
for d, subdirs, names in os.walk(root):
    rel = os.path.relpath(d, root)
    rel = '' if rel == '.' else rel + '/'
    subdirs[:] = sorted(s for s in subdirs
                        if s != '.git' and not (rel == '' and s == 'build')
                        and not os.path.exists(os.path.join(d, s, 'config.status')))
    for n in sorted(names):
        if n.endswith(('.c', '.h')):
            try:
                with open(os.path.join(d, n), encoding='utf-8', errors='replace') as f:
                    files[rel + n] = f.read().splitlines()
            except OSError:
                pass                    # a dangling link is not a source file
lib = [p for p in files if p.startswith(LIB)]

def layer(path):
    """The layer a path belongs to: its top folder, 'fabric/<name>' for a
    fabric's folder, 'fabsock' for the public header, '.' at the top."""
    parts = path.split('/')
    if len(parts) == 1:
        return '.'
    if parts[0] == 'fabric' and len(parts) > 2:
        return 'fabric/' + parts[1]
    if parts[0] == 'include' and parts[1] == 'fabsock':
        return 'fabsock'
    return parts[0]

# What each checked layer may include (besides the fabric/<name> cases in allowed()).
SEES = {
    'base': {'base'},
    'policy': {'base', 'policy', 'fabsock'},
    'hooks': {'base', 'hooks', 'fabsock'},
    'gpu': {'base', 'gpu', 'fabsock'},
    'fabric': {'base', 'policy', 'fabric'},
    'engine': {'base', 'policy', 'hooks', 'gpu', 'fabsock', 'fabric', 'engine'},
    'preload': {'base', 'policy', 'hooks', 'gpu', 'fabsock', 'fabric', 'engine', 'preload'},
}

def allowed(src, sl, tl):
    if tl == 'preload':                 # preload/ is the top: nobody includes it
        return sl == 'preload'
    if sl.startswith('fabric/'):        # a fabric: never another fabric, engine/, preload/
        return tl in ('base', 'policy', 'gpu', 'fabric', sl)
    if sl not in SEES:                  # tools/, tests/, ...: only the preload/ rule
        return True
    if tl.startswith('fabric/'):        # fabrics are named by registry.c (and preload/) only
        return sl == 'preload' or src == 'fabric/registry.c'
    return tl in SEES[sl]

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')

def resolve(src, inc):
    """Path from the root of a quoted include, None for config.h."""
    if inc == 'config.h':               # made by configure, forced in with -include
        return None
    if inc.startswith('fabsock/'):      # the public header, include/ is on -I
        return 'include/' + inc
    if '/' not in inc or inc.startswith(('./', '../')):
        inc = os.path.join(os.path.dirname(src), inc)   # beside the includer
    return os.path.normpath(inc)

# One pass over the includes: arrows for rule 1, module edges for rule 2.
bad_arrows, edges = [], {}
def module(path):
    return os.path.splitext(path)[0]    # x.c + x.h in one folder are module folder/x
for src in sorted(files):
    for no, text in enumerate(files[src], 1):
        m = INCLUDE.match(text)
        if not m:
            continue
        dst = resolve(src, m.group(1))
        if dst is None:
            continue
        sl, tl = layer(src), layer(dst)
        if not allowed(src, sl, tl):
            shown = '"%s"' % m.group(1) + ('' if dst == m.group(1) else ' (%s)' % dst)
            bad_arrows.append('%s:%d includes %s (layer %s may not include layer %s)'
                              % (src, no, shown, sl, tl))
        # The module graph is the library's (plus the public header), existing files only.
        if src.startswith(LIB + ('include/',)) and dst in files \
                and dst.startswith(LIB + ('include/',)) and module(src) != module(dst):
            edges.setdefault(module(src), {}).setdefault(module(dst), []).append(
                (src, no, m.group(1)))

# Rule 2: strongly connected components of the module graph (Tarjan).
def sccs(graph):
    index, low, stack, on, out = {}, {}, [], set(), []
    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v); on.add(v)
        for w in sorted(graph.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))
    sys.setrecursionlimit(10000 + 4 * len(graph))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out

bad_cycles = []
for comp in sccs(edges):
    folders = sorted({os.path.dirname(m) for m in comp})
    why = []
    if len(comp) > max_cycle:
        why.append('%d modules, over %d' % (len(comp), max_cycle))
    if len(folders) > 1:
        why.append('across folders ' + ', '.join(f + '/' for f in folders))
    if why:
        bad_cycles.append('cycle (%s): %s' % ('; '.join(why), ' '.join(comp)))
        inside = sorted(e for a in comp for b, es in edges.get(a, {}).items() if b in comp
                        for e in es)    # the includes that close it, to cut one
        bad_cycles += ['  %s:%d includes "%s"' % e for e in inside]

# Rule 3: file sizes.
too_long = ['%s: %d lines' % (p, len(files[p])) for p in sorted(lib)
            if len(files[p]) > max_lines]

# Rule 4: FABSOCK_* settings belong to policy/ (comments are not told apart).
GETENV = re.compile(r'\b(?:secure_)?getenv\s*\(\s*"(FABSOCK_[^"]*)')
getenvs = []
for p in sorted(lib):
    if p.startswith('policy/'):
        continue
    for no, text in enumerate(files[p], 1):
        for name in GETENV.findall(text):
            if not any(p.startswith(d) and name.startswith(n) for d, n in getenv_exc):
                getenvs.append('%s:%d reads %s (only policy/ reads FABSOCK_* settings)'
                               % (p, no, name))

# Rule 5: HAVE_RDMA stays with the RDMA fabric and its registration line.
HAVE_RDMA = re.compile(r'\bHAVE_RDMA\b')
rdma = ['%s:%d mentions HAVE_RDMA' % (p, no)
        for p in sorted(files) if not p.startswith(rdma_places)
        for no, text in enumerate(files[p], 1) if HAVE_RDMA.search(text)]

points = [
    ('no forbidden include between layers', bad_arrows),
    ('no include cycle over %d modules or across folders' % max_cycle, bad_cycles),
    ('no library source file over %d lines' % max_lines, too_long),
    ('FABSOCK_* settings read only in policy/', getenvs),
    ('HAVE_RDMA only in %s' % ', '.join(rdma_places), rdma),
]
print('1..%d' % len(points))
print('# %d source files under %s' % (len(files), root))
failed = 0
for n, (name, problems) in enumerate(points, 1):
    print('%s %d - %s' % ('not ok' if problems else 'ok', n, name))
    for line in problems:
        print('# ' + line)
    failed += bool(problems)
sys.exit(1 if failed else 0)
PY
