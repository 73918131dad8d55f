"""What the csv tests against PyTorch share (csv_equiv.py, float_equiv.py):
writing a csv as Python's csv module does, the oracle's batches in file
order, one short run of the program from PyTorch's initial weights, and
the relative errors of its step losses and parameters."""
import csv
import subprocess

import numpy as np


def write_csv(path, header, rows, quoted=False):
    """rows of strings; quoted: every field quoted, CRLF, blank lines at the end"""
    with open(path, "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL, lineterminator="\r\n") if quoted else csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
        if quoted:
            f.write("\r\n\r\n")


def file_order(x, y, batch, steps):
    """the program's batches with --shuffle off: in file order, the last one
    short, then the set again"""
    s = 0
    for _ in range(steps):
        yield x[s:s + batch], y[s:s + batch]
        s = s + batch if s + batch < len(x) else 0


def train(prog, init_path, steps):
    """steps steps from init_path on one thread: (step losses, saved state,
    the program's output), or (None, None, why)"""
    log, final = prog + ".steps.csv", prog + ".final.st"
    r = subprocess.run([prog, "--init", init_path, "--max-steps", str(steps), "--threads", "1", "--step-log", log,
                        "--save", final], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    out = r.stdout.decode("utf-8", "replace")
    if r.returncode != 0:
        return None, None, "program exited with %d: %s" % (r.returncode, out[-600:])
    with open(log, newline="") as f:
        losses = [float(row["loss"]) for row in csv.DictReader(f)]
    if len(losses) != steps:
        return None, None, "%d steps logged, expected %d" % (len(losses), steps)
    return losses, final, out


def rel_errors(got, ref_losses, got_sd, ref_sd):
    """worst relative step-loss error, worst relative L2 over the tensors"""
    lw = max(abs(a - b) / abs(b) for a, b in zip(got, ref_losses))
    pw = max(np.linalg.norm(got_sd[k].astype(np.float64) - ref_sd[k]) / np.linalg.norm(ref_sd[k]) for k in ref_sd)
    return lw, pw
