#!/usr/bin/python3
"""PyTorch equivalence test for the npz reader and normalize = auto on real
data: models/digits.net on scikit-learn's 8x8 digits.

usage: digits_equiv.py PROGRAM

PROGRAM is models/digits.net compiled (npz source, normalize = auto, SGD
with momentum 0.9, lr 0.05, batch 32). The test writes the data sets
with scripts/sklearn_data.py into a work directory, then:

1. Writes the same arrays in other encodings of the .npz: savez
   (stored members) as well as savez_compressed, x float64 and uint8
   (0..16 as bytes: the program scales uint8 by 1/255, and normalize =
   auto measures the scaled values, so the normalized inputs are the
   same), y int32, int64 and uint8. For each, the program trains
   STEPS steps from PyTorch's initial weights in file order (--shuffle
   off); PyTorch trains the same network with x normalized by
   x_train.mean() and x_train.std() (torch's std: n - 1) on the same
   batches. Every step's loss must agree to relative 1e-4, the final
   parameters to relative L2 1e-4; the means and stds --save keeps in
   the metadata must equal torch's to relative 1e-6, and must differ
   from the population std (n) by more than that (the control).
2. Trains the model as it is (20 epochs, shuffled) and prints its final
   test accuracy beside scikit-learn's LogisticRegression on the same
   split (standardized the same way); it fails if ours is more than 0.05
   below it.
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402

SEED = 11
STEPS = 84      # two epochs of 1347 samples in batches of 32 (the 43rd of each has 3)
BATCH = 32
LR = 0.05
MOMENTUM = 0.9
LOSS_TOL = 1e-4
PARAM_TOL = 1e-4


class DigitsNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def oracle(init_sd, xtr, ytr, unbiased=True):
    x = torch.from_numpy(xtr.astype(np.float32))
    x = (x - x.mean()) / x.std(unbiased=unbiased)
    y = torch.from_numpy(ytr.astype(np.int64))
    model = DigitsNet()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init_sd.items()})
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses, n, s = [], len(x), 0
    while len(losses) < STEPS:
        xb, yb = x[s:s + BATCH], y[s:s + BATCH]
        s = s + BATCH if s + BATCH < n else 0
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        losses.append(loss.item())
        opt.step()
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}, losses


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def run(cmd, log):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    with open(log, "w") as f:
        f.write(r.stdout.decode("utf-8", "replace"))
    return r.returncode, r.stdout.decode("utf-8", "replace")


def main(argv):
    if len(argv) != 1:
        sys.stderr.write(__doc__)
        return 2
    program = os.path.abspath(argv[0])
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    work = tempfile.mkdtemp(prefix="cddpc-digits-equiv-")
    subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "scripts", "sklearn_data.py"), work], check=True)
    z = np.load(os.path.join(work, "digits.npz"))
    xtr, ytr, xte, yte = z["x_train"], z["y_train"], z["x_test"], z["y_test"]
    init_path = os.path.join(work, "init.safetensors")
    init_sd = {k: v.detach().numpy().copy() for k, v in DigitsNet().state_dict().items()}
    st.save(init_path, init_sd)
    ref_sd, ref_losses = oracle(init_sd, xtr, ytr)
    xt = torch.from_numpy(xtr.astype(np.float32))
    ref_mean, ref_std = xt.mean().item(), xt.std().item()

    encodings = [
        ("compressed, x float32, y int64", np.savez_compressed, np.float32, np.int64),
        ("stored, x float64, y int32", np.savez, np.float64, np.int32),
        ("compressed, x uint8, y uint8", np.savez_compressed, np.uint8, np.uint8),
    ]
    failures = []
    for name, save, xt_, yt_ in encodings:
        path = os.path.join(work, "digits_%s_%s.npz" % (np.dtype(xt_).name, np.dtype(yt_).name))
        save(path, x_train=xtr.astype(xt_), y_train=ytr.astype(yt_), x_test=xte.astype(xt_), y_test=yte.astype(yt_))
        steps, final = path + ".steps.csv", path + ".final.st"
        rc, out = run([program, "--data", path, "--init", init_path, "--shuffle", "off", "--epochs", "2",
                       "--max-steps", str(STEPS), "--threads", "1", "--step-log", steps, "--save", final],
                      path + ".log")
        if rc != 0:
            failures.append("%s: program exited with %d: %s" % (name, rc, out[-600:]))
            continue
        got = [float(r["loss"]) for r in read_rows(steps)]
        got_sd, meta = st.load_with_metadata(final)
        if len(got) != STEPS:
            failures.append("%s: %d steps logged, expected %d" % (name, len(got), STEPS))
            continue
        lw = max(abs(a - b) / abs(b) for a, b in zip(got, ref_losses))
        pw = max(np.linalg.norm(got_sd[k].astype(np.float64) - ref_sd[k]) / np.linalg.norm(ref_sd[k])
                 for k in ref_sd)
        scale = 255.0 if xt_ == np.uint8 else 1.0
        m, s = float.fromhex(meta["data.mean.0"]) * scale, float.fromhex(meta["data.std.0"]) * scale
        nw = max(abs(m - ref_mean) / ref_mean, abs(s - ref_std) / ref_std)
        print("digits, %s: %d steps, losses %.4f .. %.4f, worst rel err %.2e (tol %.0e); final params rel L2 "
              "%.2e (tol %.0e); saved mean %.6g std %.6g vs torch %.6g %.6g (rel %.1e)"
              % (name, STEPS, got[0], got[-1], lw, LOSS_TOL, pw, PARAM_TOL, m, s, ref_mean, ref_std, nw))
        if not (lw <= LOSS_TOL and pw <= PARAM_TOL and nw <= 1e-6):
            failures.append("%s: the program does not train as PyTorch does" % name)
        if name.startswith("compressed, x float32"):
            pop = xt.std(unbiased=False).item()
            cw = abs(s - pop) / pop
            print("control, the population std (n) %.7g: saved std rel err %.1e (must exceed 1e-6)" % (pop, cw))
            if cw <= 1e-6:
                failures.append("the control with the population std matches too: the test cannot tell")

    # 2. the model as it is, beside scikit-learn
    metrics = os.path.join(work, "metrics.csv")
    rc, out = run([program, "--data", os.path.join(work, "digits.npz"), "--threads", "1", "--metrics", metrics],
                  os.path.join(work, "full.log"))
    if rc != 0:
        failures.append("full run exited with %d: %s" % (rc, out[-600:]))
    else:
        from sklearn.linear_model import LogisticRegression
        ours = float(read_rows(metrics)[-1]["test_acc"])
        a, b = xtr.reshape(len(xtr), -1), xte.reshape(len(xte), -1)
        mu, sd = a.mean(), a.std(ddof=1)
        lr = LogisticRegression(max_iter=2000).fit((a - mu) / sd, ytr)
        theirs = lr.score((b - mu) / sd, yte)
        print("digits: test accuracy %.4f after %d epochs; scikit-learn's LogisticRegression on the same split "
              "%.4f" % (ours, len(read_rows(metrics)), theirs))
        if ours < theirs - 0.05:
            failures.append("test accuracy %.4f is more than 0.05 below LogisticRegression's %.4f" % (ours, theirs))
    if failures:
        print("digits_equiv: FAIL: " + "; ".join(failures) + " (work dir %s)" % work)
        return 1
    print("digits_equiv: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
