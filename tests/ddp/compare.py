#!/usr/bin/python3
"""compare.py A.safetensors B.safetensors A_steps.csv B_steps.csv A_metrics.csv B_metrics.csv TOL

Data-parallel equivalence: every tensor within TOL relative L2, every
per-step loss and the epoch's train/test loss within TOL relative, test
accuracy within one sample of the test set in 2000. Prints the largest
differences either way.
"""
import csv
import json
import struct
import sys

import numpy as np


def load_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] in ("F32", "I64"), v     # I64: batch norm's num_batches_tracked
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(raw[base + a:base + b], dtype="<f4" if v["dtype"] == "F32" else "<i8").reshape(v["shape"])
    return out


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-30)


def main():
    wa, wb, sa, sb, ma, mb, tol = sys.argv[1:8]
    tol = float(tol)
    bad = 0
    A, B = load_st(wa), load_st(wb)
    assert sorted(A) == sorted(B), (sorted(A), sorted(B))
    worst_w = 0.0
    for k in sorted(A):
        d = float(np.linalg.norm(A[k].astype(np.float64) - B[k]) /
                  max(np.linalg.norm(A[k].astype(np.float64)), 1e-30))
        worst_w = max(worst_w, d)
        if d > tol:
            print("tensor %s: relative L2 difference %.3g > %g" % (k, d, tol))
            bad = 1
    la, lb = rows(sa), rows(sb)
    if len(la) != len(lb) or not la:
        print("step logs differ in length: %d vs %d" % (len(la), len(lb)))
        return 1
    worst_s = 0.0
    for x, y in zip(la, lb):
        assert x["step"] == y["step"] and x["epoch"] == y["epoch"], (x, y)
        d = rel(float(x["loss"]), float(y["loss"]))
        worst_s = max(worst_s, d)
        if d > tol:
            print("step %s: loss %s vs %s (relative %.3g > %g)" % (x["step"], x["loss"], y["loss"], d, tol))
            bad = 1
    ea, eb = rows(ma), rows(mb)
    assert len(ea) == len(eb), (ea, eb)
    worst_e = 0.0
    for x, y in zip(ea, eb):
        for key in ("train_loss", "test_loss"):
            d = rel(float(x[key]), float(y[key]))
            worst_e = max(worst_e, d)
            if d > tol:
                print("epoch %s %s: %s vs %s" % (x["epoch"], key, x[key], y[key]))
                bad = 1
        if abs(float(x["test_acc"]) - float(y["test_acc"])) > 1.0 / 2000 + 1e-12:
            print("epoch %s test_acc: %s vs %s" % (x["epoch"], x["test_acc"], y["test_acc"]))
            bad = 1
    print("%d tensors, %d steps: max relative L2 %.2g, max step-loss difference %.2g, "
          "max epoch-loss difference %.2g (tolerance %g)" % (len(A), len(la), worst_w, worst_s,
                                                            worst_e, tol))
    return bad


if __name__ == "__main__":
    sys.exit(main())
