#!/usr/bin/python3
"""PyTorch equivalence test for label smoothing (tests/torch/smooth_mlp.net).

usage: smooth_equiv.py PROGRAM DATA_DIR

As tanh_equiv.py: the program trains from PyTorch's initialization on the
data in file order, SGD with momentum, STEPS steps; PyTorch trains the same
MLP with F.cross_entropy(label_smoothing=0.1) from the same weights on the
same batches. Every step's loss must agree to relative 1e-4, the final
parameters to relative L2 1e-4. Controls that must not match: no
smoothing, and smoothing 0.2.
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

SEED = 2024
STEPS = 100
BATCH = 64
LR = 0.05
MOMENTUM = 0.9
MEAN, STD = 0.1307, 0.3081
LOSS_TOL = 1e-4
PARAM_TOL = 1e-4


class SmoothMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


def oracle(init_sd, X, Y, variant):
    model = SmoothMLP()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init_sd.items()})
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for s in range(STEPS):
        x, y = X[s * BATCH:(s + 1) * BATCH], Y[s * BATCH:(s + 1) * BATCH]
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y, label_smoothing={"same": 0.1, "none": 0.0, "more": 0.2}[variant])
        loss.backward()
        losses.append(loss.item())
        opt.step()
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}, losses


def normalize(img_u8):
    x = torch.from_numpy(np.array(img_u8)).to(torch.float32).div(255.0)
    return x.sub(MEAN).div(STD).reshape(-1, 1, 28, 28)


def read_csv(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    head = [c.strip() for c in rows[0]]
    return [dict(zip(head, r)) for r in rows[1:]]


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    program, data_dir = os.path.abspath(argv[0]), os.path.abspath(argv[1])
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    work = tempfile.mkdtemp(prefix="cddpc-smooth-equiv-")
    init_path = os.path.join(work, "init.safetensors")
    init_sd = {k: v.detach().numpy().copy() for k, v in SmoothMLP().state_dict().items()}
    st.save(init_path, init_sd)
    Xu8 = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz"))
    Yu8 = read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz"))
    X, Y = normalize(Xu8[:STEPS * BATCH]), torch.from_numpy(Yu8[:STEPS * BATCH].astype(np.int64))

    steps, final = os.path.join(work, "steps.csv"), os.path.join(work, "final.st")
    cmd = [program, "--data", data_dir, "--init", init_path, "--shuffle", "off", "--epochs", "1",
           "--max-steps", str(STEPS), "--batch", str(BATCH), "--lr", str(LR), "--threads", "1",
           "--step-log", steps, "--save", final]
    print("smooth_equiv: " + " ".join(cmd))
    sys.stdout.flush()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    if r.returncode != 0:
        sys.stdout.write(r.stdout.decode("utf-8", "replace")[-4000:])
        print("smooth_equiv: FAIL: program exited with %d (work dir %s)" % (r.returncode, work))
        return 1
    got = [float(row["loss"]) for row in read_csv(steps)]
    got_sd = st.load(final)

    def compare(ref_sd, ref_losses):
        if len(got) != len(ref_losses):
            return float("inf"), float("inf")
        lw = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, ref_losses))
        pw = max(np.linalg.norm(got_sd[k].astype(np.float64) - ref_sd[k]) / np.linalg.norm(ref_sd[k]) for k in ref_sd)
        return lw, pw

    failures = []
    loss_err, param_err = compare(*oracle(init_sd, X, Y, "same"))
    print("label smoothing: %d steps, losses %.4f .. %.4f; worst step loss rel err %.2e (tol %.0e), final params rel L2 %.2e "
          "(tol %.0e)" % (STEPS, got[0], got[-1], loss_err, LOSS_TOL, param_err, PARAM_TOL))
    if not (loss_err <= LOSS_TOL and param_err <= PARAM_TOL):
        failures.append("the program does not train as PyTorch's network does")
    for act, what in (("none", "no label smoothing"), ("more", "label_smoothing 0.2 for 0.1")):
        l2, p2 = compare(*oracle(init_sd, X, Y, act))
        # the control must fail the test's own tolerances
        print("control, %s: loss rel err %.2e, params rel L2 %.2e (one must exceed its tol)" % (what, l2, p2))
        if l2 <= LOSS_TOL and p2 <= PARAM_TOL:
            failures.append("the program also matches PyTorch with %s" % what)
    if failures:
        print("smooth_equiv: FAIL: " + "; ".join(failures) + " (work dir %s)" % work)
        return 1
    print("smooth_equiv: PASS: losses and parameters equal PyTorch's within 1e-4 over %d steps" % STEPS)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
