#!/usr/bin/env python3
"""tests/runtime/rt_deps.py OBJ...: the runtime's files must not form circles,
and CUDA's types must stay in the CUDA files.

From each object file's defined and undefined symbols (nm), file A uses
file B when A calls or reads something B defines. Prints every circle
(a strongly connected set of two or more files, with one path through it)
and exits 1 if there is one; else prints the layering, files that use
nothing of the others first, and exits 0. The check is on the objects, so
it sees what the code really uses, not what the headers declare.

Then the sources beside the objects (runtime/NAME.c): only the CUDA files
(rt_cuda*.c, rt_nccl.c, rt_gpu.c) include rt_cuda.h, and rt_internal.h,
which every runtime file includes, names no driver, NVRTC or NCCL type."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from obj_deps import components, file_uses, print_circle  # noqa: E402

objs = sys.argv[1:]
if not objs:
    sys.exit("usage: rt_deps.py build/runtime/*.o")
uses, why, _, _, _ = file_uses(objs)
comps = components(uses)
circles = [sorted(c) for c in comps if len(c) > 1]
for c in circles:
    print_circle(c, uses, why)
cuda_files = re.compile(r"^rt_(cuda.*|nccl|gpu)\.c$")
leaks = []
here = os.path.dirname(os.path.abspath(__file__))
src_dir = os.path.join(here, "..", "..", "runtime")
for f in sorted(uses):
    path = os.path.join(src_dir, f)
    if os.path.exists(path) and '#include "rt_cuda.h"' in open(path).read() and not cuda_files.match(f):
        leaks.append("%s includes rt_cuda.h (the CUDA files' own header)" % f)
internal = open(os.path.join(src_dir, "rt_internal.h")).read()
for t in ("CUresult", "CUstream", "CUdeviceptr", "CUevent", "nvrtcProgram", "nvrtcResult", "rt_nccl ", "ncclComm"):
    if t in internal:
        leaks.append("rt_internal.h names %s (it belongs in rt_cuda.h)" % t.strip())
for l in leaks:
    print("cuda types: " + l)
if circles or leaks:
    sys.exit(1)
# Tarjan emits components in reverse topological order: users last
print("no circles among %d runtime files, CUDA types only in the CUDA files; from the bottom: %s" % (len(uses), " ".join(c[0] for c in comps)))
