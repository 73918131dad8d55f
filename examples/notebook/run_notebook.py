"""examples/notebook/run_notebook.py NOTEBOOK.ipynb: runs a notebook's code
cells in order in one namespace, from the notebook's folder, as Jupyter's
kernel would (without Jupyter, which Debian's test machines lack), and
fails on the first cell that raises."""
import json
import os
import sys
import traceback

path = os.path.abspath(sys.argv[1])
os.chdir(os.path.dirname(path))
cells = [c for c in json.load(open(path))["cells"] if c["cell_type"] == "code"]
ns = {"__name__": "__main__"}
for i, c in enumerate(cells, 1):
    src = "".join(c["source"])
    print("---- cell %d of %d" % (i, len(cells)))
    try:
        exec(compile(src, "%s:cell%d" % (os.path.basename(path), i), "exec"), ns)
    except Exception:
        traceback.print_exc()
        sys.exit("cell %d failed" % i)
print("all %d code cells ran" % len(cells))
