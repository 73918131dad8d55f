"""tests/obj_deps.py: which source file uses which, from object files.

File A uses file B when A's object calls or reads a symbol B's object
defines (nm). Read from the objects, not the includes: one shared header
would hide every arrow. Shared by tests/runtime/rt_deps.py and
tests/ir/cc_deps.py."""
import os
import subprocess
import sys


def nm(args):
    return subprocess.run(["nm"] + args, capture_output=True, text=True, check=True).stdout


def file_uses(objs, source_of=lambda o: os.path.basename(o)[:-2] + ".c"):
    """(uses, why, defs, kinds): uses[f] the files f uses; why[(f, g)] one
    symbol that makes the arrow; defs[symbol] its file; kinds[symbol] its
    nm type letter (T: a function)."""
    defs, kinds, undefs = {}, {}, {}
    for o in objs:
        name = source_of(o)
        for line in nm(["--defined-only", "-g", o]).splitlines():
            parts = line.split()
            if len(parts) == 3:
                defs[parts[2]] = name
                kinds[parts[2]] = parts[1]
        undefs[name] = {l.split()[-1] for l in nm(["-u", o]).splitlines() if l.strip()}
    uses = {f: set() for f in undefs}
    why = {}
    for f, syms in undefs.items():
        for s in sorted(syms):
            g = defs.get(s)
            if g and g != f:
                uses[f].add(g)
                why.setdefault((f, g), s)
    return uses, why, defs, kinds, undefs


def components(uses):
    """Tarjan's strongly connected components, in reverse topological
    order (a file after every file it uses)."""
    index, low, stack, on, comps, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(uses[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            c = []
            while True:
                w = stack.pop()
                on.discard(w)
                c.append(w)
                if w == v:
                    break
            comps.append(c)

    sys.setrecursionlimit(10000)
    for v in sorted(uses):
        if v not in index:
            visit(v)
    return comps


def print_circle(c, uses, why):
    members = set(c)
    print("circle: " + ", ".join(sorted(c)))
    for f in sorted(c):
        for g in sorted(uses[f] & members):
            print("    %s uses %s (%s)" % (f, g, why[(f, g)]))
