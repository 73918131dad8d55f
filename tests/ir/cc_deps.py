#!/usr/bin/env python3
"""tests/ir/cc_deps.py OBJ...: the compiler's fitness test.

1. No circle of "calls a function defined in" between compiler files,
   read from the objects' symbols (tests/obj_deps.py), except the circles
   listed in ALLOWED below (each may shrink, never grow).
2. Each public function (one that another compiler file uses) is
   declared in a header, in the section of the file that defines it. A
   section starts at a comment whose first words name files, as
   `/* ---- memplan.c: ... */` or `/* sched_pair.c: ... */`, and runs to the
   next such comment. A declaration that no compiler file defines is
   reported too.

Exits 1 on any finding; else prints the layering, files that use nothing
of the others first. --plant A B adds an arrow A -> B (file names) before
the check, to show that a circle it closes is found."""
import glob
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from obj_deps import components, file_uses, print_circle  # noqa: E402

# Circles that may stand, each with its reason (none: the GPU's launch
# decisions, once made inside memplan through the CUDA emitter against the
# GPU model, are sched_gpu.c's pass now, ahead of memplan).
ALLOWED = []
SOURCE = {"lex": "lex.l", "parse": "parse.y"}
FILE = r"[a-z_][a-z0-9_]*\.[cly]"


def source_of(obj):
    base = os.path.basename(obj)[:-2]
    return SOURCE.get(base, base + ".c")


def section_files(comment):
    """The files a comment opens a section for, or None: its first line,
    after `/*`, dashes and an optional one-word label (`plan:`), is a list
    of file names followed by `:`, dashes or its end."""
    first = comment.split("\n")[0]
    first = re.sub(r"^/\*\s*-*\s*", "", first)
    first = re.sub(r"\s*-*\s*(\*/)?\s*$", "", first)
    m = re.match(r"^(?:[a-z]+:\s+)?((?:%s)(?:(?:,\s*|\s+and\s+)%s)*)(?::|$)" % (FILE, FILE), first)
    if not m:
        return None
    return set(re.findall(FILE, m.group(1)))


def declarations(path):
    """(name, section files, line) of each function declared at file scope."""
    text = open(path).read()
    out = []
    section = None
    # walk comments and code in order
    token = re.compile(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\])*\"|\{|\}|;|[^/\"{};]+|/", re.S)
    depth = 0
    stmt = ""
    for m in token.finditer(text):
        t = m.group(0)
        if t.startswith("/*"):
            files = section_files(t) if depth == 0 else None
            if files is not None:
                section = files
            continue
        if t.startswith("//"):
            continue
        if t == "{":
            depth += 1
            stmt += t
            continue
        if t == "}":
            depth -= 1
            stmt += t
            continue
        if t == ";" and depth == 0:
            s = re.sub(r"^\s*(#[^\n]*\n\s*)*", "", stmt)
            d = re.match(r"^(?!typedef|static|struct|enum|union|extern\s+\"C\")[A-Za-z_][\w\s\*]*?\b([a-z_]\w*)\s*\(", s)
            if d and "=" not in s.split("(")[0]:
                out.append((d.group(1), section, text.count("\n", 0, m.start()) + 1))
            stmt = ""
            continue
        stmt += t
    return out


def main(argv):
    plant = None
    if len(argv) > 2 and argv[0] == "--plant":
        plant, argv = (argv[1], argv[2]), argv[3:]
    objs = argv
    if not objs:
        sys.exit("usage: cc_deps.py [--plant A.c B.c] build/compiler/*.o")
    uses, why, defs, kinds, undefs = file_uses(objs, source_of)
    if plant:
        a, b = plant
        if a not in uses or b not in uses:
            sys.exit("cc_deps.py: --plant: %s or %s is not among the objects" % (a, b))
        uses[a].add(b)
        why[(a, b)] = "planted"
    findings = 0

    comps = components(uses)
    for c in comps:
        if len(c) < 2:
            continue
        allowed = next((s for s in ALLOWED if set(c) <= s), None)
        if allowed is None:
            print_circle(c, uses, why)
            findings += 1
        elif set(c) != allowed:
            print("note: the listed circle shrank to %s: shrink ALLOWED in %s" % (", ".join(sorted(c)), __file__))
        else:
            print("listed exception: circle of %s" % ", ".join(sorted(c)))
    for s in ALLOWED:
        if not any(set(c) <= s and len(c) > 1 for c in comps):
            print("note: the listed circle of %s no longer stands alone (gone, or inside a larger one): "
                  "update ALLOWED" % ", ".join(sorted(s)))

    # public functions: defined in one file, used by another
    public = {}
    for f, syms in undefs.items():
        for sym in syms:
            g = defs.get(sym)
            if g and g != f and kinds.get(sym) == "T":
                public.setdefault(sym, g)
    src = os.path.join(HERE, "..", "..", "compiler")
    declared = {}
    for h in sorted(glob.glob(os.path.join(src, "*.h"))):
        for name, section, line in declarations(h):
            declared.setdefault(name, []).append((os.path.basename(h), section, line))
    for name, where in sorted(declared.items()):
        home = defs.get(name)
        for h, section, line in where:
            if home is None:
                print("%s:%d: %s is declared but no compiler file defines it" % (h, line, name))
                findings += 1
            elif section is None or home not in section:
                print("%s:%d: %s is defined in %s but declared in %s" % (
                    h, line, name, home, "the section of " + ", ".join(sorted(section)) if section else "no file's section"))
                findings += 1
    for name, home in sorted(public.items()):
        # yylex: the scanner's entry as the bison bridge names it, declared
        # where the parser calls it (flex writes no header for it here)
        if name not in declared and not name.startswith("yy"):
            users = sorted(f for f in undefs if name in undefs[f])
            print("%s is defined in %s and used by %s, but no header declares it" % (name, home, ", ".join(users)))
            findings += 1
    if findings:
        print("cc_deps: %d finding(s)" % findings)
        return 1
    order = " ".join(c[0] if len(c) == 1 else "{" + ",".join(sorted(c)) + "}" for c in comps)
    print("compiler: no circles%s among %d files, %d public functions each declared in its "
          "file's header section; from the bottom: %s" % (" but the listed ones" if ALLOWED else "", len(uses),
                                                          len(public), order))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
