#!/usr/bin/python3
"""PyTorch equivalence test for class weights (tests/torch/weight_mlp.net).

usage: weight_equiv.py CDDPC DATA_DIR

The model file is compiled once per case: cross_entropy(weight = W) with
reduction mean, sum and none, with label_smoothing (mean 0.1, sum 0.2),
and nll_loss(weight = W) of a forward returning F.log_softmax. Each program
trains from PyTorch's initialization on the data in file order, SGD with
momentum, STEPS steps; PyTorch trains the same MLP with F.cross_entropy /
F.nll_loss and the same weight from the same weights on the same batches.
PyTorch's weighted mean divides by the sum of the weights of the batch's
targets (the smoothing term too). Every step's loss must agree to relative
1e-4, the final parameters to relative L2 1e-4. Controls that must not
match: no weights; the weighted losses' plain mean over the batch; the
smoothing term unweighted.
"""
import csv
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from simplenet_ref import read_idx  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 2024
STEPS = 100
BATCH = 64
LR = {"mean": 0.05, "sum": 0.02 / 64, "none": 0.02 / 64}   # sum at 0.05 / 64: float32 drift reaches 5.6e-5 by step 100
MOMENTUM = 0.9
MEAN, STD = 0.1307, 0.3081
LOSS_TOL = 1e-4
PARAM_TOL = 1e-4
W = [0.5, 1.0, 2.0, 1.5, 0.25, 1.0, 3.0, 0.75, 1.25, 2.5]
WT = torch.tensor(W)
WLIST = "[" + ", ".join(str(w) for w in W) + "]"


class WeightMLP(nn.Module):
    def __init__(self, log_probs=False):
        super().__init__()
        self.fc1 = nn.Linear(784, 32)
        self.fc2 = nn.Linear(32, 10)
        self.log_probs = log_probs

    def forward(self, x):
        z = self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))
        return F.log_softmax(z, dim=1) if self.log_probs else z


def cases():
    ce = lambda e: (lambda z, y, r: F.cross_entropy(z, y, weight=WT, reduction=r, label_smoothing=e))
    return [
        ("ce_mean", "cross_entropy(weight = %s)" % WLIST, "mean", False, ce(0.0)),
        ("ce_sum", "cross_entropy(reduction = sum, weight = %s)" % WLIST, "sum", False, ce(0.0)),
        ("ce_none", "cross_entropy(reduction = none, weight = %s)" % WLIST, "none", False, ce(0.0)),
        ("ce_mean_smooth", "cross_entropy(weight = %s, label_smoothing = 0.1)" % WLIST, "mean", False, ce(0.1)),
        ("ce_sum_smooth", "F.cross_entropy(reduction = sum, label_smoothing = 0.2, weight = %s)" % WLIST, "sum", False,
         ce(0.2)),
        ("nll_mean", "F.nll_loss(weight = %s)" % WLIST, "mean", True,
         lambda z, y, r: F.nll_loss(z, y, weight=WT, reduction=r)),
    ]


def controls():
    """(case, what, wrong oracle)"""
    def unsmoothed_term(z, y, r):
        lp = F.log_softmax(z, dim=1)
        nll = F.nll_loss(lp, y, weight=WT)
        return 0.9 * nll + 0.1 / 10 * (-lp.sum(1)).mean()
    return [
        ("ce_mean", "no weights", lambda z, y, r: F.cross_entropy(z, y, reduction=r)),
        ("ce_mean", "the weighted losses' plain mean",
         lambda z, y, r: F.cross_entropy(z, y, weight=WT, reduction="none").mean()),
        ("ce_mean_smooth", "the smoothing term unweighted", unsmoothed_term),
    ]


def oracle(init_sd, X, Y, red, log_probs, fn):
    model = WeightMLP(log_probs)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init_sd.items()})
    opt = torch.optim.SGD(model.parameters(), lr=LR[red], momentum=MOMENTUM)
    losses = []
    for s in range(STEPS):
        x, y = X[s * BATCH:(s + 1) * BATCH], Y[s * BATCH:(s + 1) * BATCH]
        opt.zero_grad()
        loss = fn(model(x), y, red)
        if red == "none":
            loss.backward(torch.ones_like(loss))
            losses.append(loss.sum().item())
        else:
            loss.backward()
            losses.append(loss.item())
        opt.step()
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}, losses


def read_csv(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    head = [c.strip() for c in rows[0]]
    return [dict(zip(head, r)) for r in rows[1:]]


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    cddpc, data_dir = os.path.abspath(argv[0]), os.path.abspath(argv[1])
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    work = tempfile.mkdtemp(prefix="cddpc-weight-equiv-")
    init_path = os.path.join(work, "init.safetensors")
    init_sd = {k: v.detach().numpy().copy() for k, v in WeightMLP().state_dict().items()}
    st.save(init_path, init_sd)
    Xu8 = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz"))
    Yu8 = read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz"))
    X = torch.from_numpy(np.array(Xu8[:STEPS * BATCH])).to(torch.float32).div(255.0).sub(MEAN).div(STD)
    X = X.reshape(-1, 1, 28, 28)
    Y = torch.from_numpy(Yu8[:STEPS * BATCH].astype(np.int64))
    src = open(os.path.join(HERE, "weight_mlp.net")).read()
    line = [l for l in src.split("\n") if l.startswith("    loss ")][0]
    failures, runs, worst = [], {}, [0.0, 0.0]
    for tag, loss_line, red, log_probs, fn in cases():
        text = src.replace(line, "    loss      " + loss_line)
        if log_probs:
            text = text.replace("        return self.fc2(x)", "        return F.log_softmax(self.fc2(x), dim = 1)")
        net, prog = os.path.join(work, tag + ".net"), os.path.join(work, tag)
        open(net, "w").write(text)
        r = subprocess.run([cddpc, net, "-o", prog], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            failures.append("%s: cddpc: %s" % (tag, r.stdout.decode()[-2000:]))
            continue
        steps, final = os.path.join(work, tag + ".steps.csv"), os.path.join(work, tag + ".st")
        r = subprocess.run([prog, "--data", data_dir, "--init", init_path, "--shuffle", "off", "--epochs", "1",
                            "--max-steps", str(STEPS), "--batch", str(BATCH), "--lr", str(LR[red]), "--threads", "1",
                            "--step-log", steps, "--save", final], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=600)
        if r.returncode != 0:
            failures.append("%s: program exited with %d: %s" % (tag, r.returncode, r.stdout.decode()[-2000:]))
            continue
        got, got_sd = [float(row["loss"]) for row in read_csv(steps)], st.load(final)
        runs[tag] = (got, got_sd, red, log_probs)
        ref_sd, ref = oracle(init_sd, X, Y, red, log_probs, fn)
        lw = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, ref)) if len(got) == len(ref) else float("inf")
        pw = max(np.linalg.norm(got_sd[k].astype(np.float64) - ref_sd[k]) / np.linalg.norm(ref_sd[k]) for k in ref_sd)
        worst = [max(worst[0], lw), max(worst[1], pw)]
        print("%-15s %d steps, losses %.5g .. %.5g: step loss rel err %.2e, params rel L2 %.2e"
              % (tag, STEPS, got[0], got[-1], lw, pw))
        if not (lw <= LOSS_TOL and pw <= PARAM_TOL):
            failures.append("%s does not train as PyTorch does" % tag)
    for tag, what, fn in controls():
        if tag not in runs:
            continue
        got, got_sd, red, log_probs = runs[tag]
        _, ref = oracle(init_sd, X, Y, red, log_probs, fn)
        lw = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, ref))
        print("control, %s: step loss rel err %.2e (must exceed %.0e)" % (what, lw, 100 * LOSS_TOL))
        if not lw > 100 * LOSS_TOL:
            failures.append("the program also matches PyTorch with %s" % what)
    print("worst: step loss %.2e, params %.2e" % tuple(worst))
    if failures:
        print("weight_equiv: FAIL: " + "; ".join(failures) + " (work dir %s)" % work)
        return 1
    print("weight_equiv: PASS: class weights as PyTorch's within 1e-4 over %d steps" % STEPS)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
