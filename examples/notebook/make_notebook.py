"""Writes train.ipynb from the cells below (kept here as plain text so a
review reads them; `python3 make_notebook.py` regenerates the notebook)."""
import json

CELLS = [
    ("markdown", """# Training from a notebook, no multiprocessing

The notes found that `mp.spawn` fails inside Jupyter (the worker function must be importable, and
a notebook's cells are not) and reached for accelerate's `notebook_launcher`. A cddpc program is an
ordinary executable: a cell starts it with `subprocess`, for one rank or for `mpirun -np 2`, and reads
its CSV files back. Nothing forks the kernel's Python process. Run the cells from this folder
(`examples/notebook`), after `make` at the repository root."""),
    ("code", """import csv, os, subprocess, sys
ROOT = os.environ.get("CDDPC_ROOT", os.path.abspath("../.."))
OUT = os.path.join(ROOT, "build", "examples", "notebook")
os.makedirs(OUT, exist_ok=True)
CDDPC = os.path.join(ROOT, "build", "cddpc")
DATA = os.path.join(ROOT, "data", "mnist")

def run(*cmd, **env):
    # the program's output, line by line, as it trains
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=dict(os.environ, **env))
    for line in p.stdout:
        print(line, end="")
    if p.wait() != 0:
        raise RuntimeError("%s exited %d" % (cmd[0], p.returncode))

run(CDDPC, os.path.join(ROOT, "models", "mnist.net"), "-o", os.path.join(OUT, "mnist"))"""),
    ("code", """# one rank: 3 epochs, metrics and the per-step loss to CSV
run(os.path.join(OUT, "mnist"), "--data", DATA, "--epochs", "3", "--threads", "1",
    "--metrics", os.path.join(OUT, "one.csv"), "--step-log", os.path.join(OUT, "one-steps.csv"))"""),
    ("code", """# two ranks: the same program under mpirun (global batch 2 x 32), still no multiprocessing here
mpi_env = dict(OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_hwloc_base_binding_policy="none")
if os.geteuid() == 0:   # as root in a container
    mpi_env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
run("mpirun", "-np", "2", os.path.join(OUT, "mnist"), "--data", DATA, "--epochs", "3", "--threads", "1",
    "--batch", "32", "--metrics", os.path.join(OUT, "two.csv"), **mpi_env)"""),
    ("code", """# the metrics, read back
rows = {name: list(csv.DictReader(open(os.path.join(OUT, name + ".csv")))) for name in ("one", "two")}
print("epoch  one: train_loss test_acc   two: train_loss test_acc")
for a, b in zip(rows["one"], rows["two"]):
    print("%5s  %16.4f %8.4f %16.4f %8.4f" % (a["epoch"], float(a["train_loss"]), float(a["test_acc"]),
                                             float(b["train_loss"]), float(b["test_acc"])))"""),
    ("code", """# the loss curves: matplotlib when the kernel has it, else cddpc's own SVG
svg = os.path.join(OUT, "loss.svg")
run(CDDPC, "plot", "1 rank=" + os.path.join(OUT, "one.csv") + ":" + os.path.join(OUT, "one-steps.csv"),
    "2 ranks=" + os.path.join(OUT, "two.csv"), "-o", svg)
try:
    import matplotlib.pyplot as plt
    for name, r in rows.items():
        plt.plot([int(x["epoch"]) for x in r], [float(x["train_loss"]) for x in r], marker="o", label=name)
    plt.title("Training Loss Curve"); plt.xlabel("Epoch"); plt.ylabel("Loss"); plt.grid(True); plt.legend()
    plt.show()
except ImportError:
    try:
        from IPython.display import SVG, display
        display(SVG(filename=svg))
    except ImportError:
        print("(no matplotlib or IPython here: open %s)" % svg)"""),
]

nb = {
    "cells": [
        {"cell_type": kind, "metadata": {}, "source": text.splitlines(True),
         **({"execution_count": None, "outputs": []} if kind == "code" else {})}
        for kind, text in CELLS
    ],
    "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                 "language_info": {"name": "python"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}
with open("train.ipynb", "w") as f:
    json.dump(nb, f, indent=1)
    f.write("\n")
