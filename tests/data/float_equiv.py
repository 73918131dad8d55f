#!/usr/bin/python3
"""The float-target tasks on real data against PyTorch and scikit-learn.

usage: float_equiv.py CDDPC

Three of scikit-learn's data sets as scripts/data.sh lays them out in
data/sklearn, each with the network and training settings of its model in
models/:
  breast_cancer      binary, one logit, binary_cross_entropy_with_logits, SGD
  diabetes           regression, mse_loss, Adam
  digits_multilabel  three labels at once (is_even, is_gt4, is_prime), BCE
The test splits each file with sklearn's train_test_split (stratified for
the binary task, a fixed seed) into a training and a test csv, compiles the
model with csv(TRAIN, test = TEST, target(s) = ..., normalize = auto) and
trains STEPS steps in file order from PyTorch's initial weights. PyTorch
trains the same network on the same rows, each feature normalized by the
training rows' mean and std (torch.std, n - 1; a zero std taken as 1):
every step's loss must agree to relative 1e-4 and the parameters after
STEPS steps to relative L2 1e-4. Then the program trains the model's whole
run and its final test score is printed beside scikit-learn's on the same
split (LogisticRegression per label, LinearRegression): reported, and only
checked to be no worse than a bound that a broken model cannot reach.
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
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.metrics import f1_score, mean_squared_error
from sklearn.model_selection import train_test_split

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))
import st  # noqa: E402
from csv_run import file_order, rel_errors, train, write_csv  # noqa: E402

STEPS = 30
BATCH = 32
TOL = 1e-4

# name: file, targets, hidden width, loss, optimizer (ours, torch's), epochs, bound on the final score
TASKS = {
    "breast_cancer": dict(file="breast_cancer.csv", targets=["benign"], hidden=16, loss="bce", epochs=30,
                          opt="sgd(lr = 0.05, momentum = 0.9)", stratify=True,
                          torch_opt=lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)),
    "diabetes": dict(file="diabetes.csv", targets=["progression"], hidden=32, loss="mse", epochs=200,
                     opt="adam(lr = 0.01)", stratify=False,
                     torch_opt=lambda p: torch.optim.Adam(p, lr=0.01)),
    "digits_multilabel": dict(file="digits_multilabel.csv", targets=["is_even", "is_gt4", "is_prime"], hidden=64,
                              loss="bce", epochs=30, opt="sgd(lr = 0.05, momentum = 0.9)", stratify=False,
                              torch_opt=lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)),
}

NET = """
model Net {
    fc1 = Linear(%(f)d, %(h)d)
    fc2 = Linear(%(h)d, %(k)d)
    forward(x: f32[N, %(f)d]) {
        return fc2(relu(fc1(x)))
    }
}
train {
    model     Net
    data      csv("%(train)s", test = "%(test)s", targets = [%(targets)s], normalize = auto)
    loss      %(loss)s(reduction = mean)
    optimizer %(opt)s
    batch     %(batch)d
    epochs    %(epochs)d
    shuffle   false
    seed      0
}
"""


class Net(nn.Module):
    def __init__(self, f, h, k):
        super().__init__()
        self.fc1 = nn.Linear(f, h)
        self.fc2 = nn.Linear(h, k)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def read(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], np.array(rows[1:], dtype=np.float64)


def oracle(t, init_sd, x, y, f, k):
    model = Net(f, t["hidden"], k)
    model.load_state_dict({n: torch.from_numpy(v) for n, v in init_sd.items()})
    opt = t["torch_opt"](model.parameters())
    losses = []
    for xb, yb in file_order(x, y, BATCH, STEPS):
        opt.zero_grad()
        out = model(xb)
        loss = F.mse_loss(out, yb) if t["loss"] == "mse" else F.binary_cross_entropy_with_logits(out, yb)
        loss.backward()
        losses.append(loss.item())
        opt.step()
    return {n: v.detach().numpy() for n, v in model.state_dict().items()}, losses


def sklearn_score(t, xtr, ytr, xte, yte):
    """scikit-learn's score on the same split: accuracy (binary), MSE, macro-F1 (multi-label)"""
    mu, sd = xtr.mean(0), xtr.std(0, ddof=1)
    sd[sd == 0] = 1
    a, b = (xtr - mu) / sd, (xte - mu) / sd
    if t["loss"] == "mse":
        return mean_squared_error(yte[:, 0], LinearRegression().fit(a, ytr[:, 0]).predict(b))
    pred = np.stack([LogisticRegression(max_iter=5000).fit(a, ytr[:, j]).predict(b) for j in range(ytr.shape[1])], 1)
    if ytr.shape[1] == 1:
        return float(np.mean(pred[:, 0] == yte[:, 0]))
    return f1_score(yte, pred, average="macro")


def last_metric(path, col):
    with open(path, newline="") as f:
        return float(list(csv.DictReader(f))[-1][col])


def main(argv):
    if len(argv) != 1:
        sys.stderr.write(__doc__)
        return 2
    cddpc = os.path.abspath(argv[0])
    torch.set_num_threads(1)
    torch.manual_seed(11)
    work = tempfile.mkdtemp(prefix="cddpc-float-equiv-")
    failures = []
    for name, t in TASKS.items():
        header, data = read(os.path.join("data", "sklearn", t["file"]))
        ti = [header.index(c) for c in t["targets"]]
        fi = [i for i in range(len(header)) if i not in ti]
        x, y = data[:, fi], data[:, ti]
        xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, random_state=1,
                                              stratify=y[:, 0] if t["stratify"] else None)
        paths = {}
        for part, xs, ys in (("train", xtr, ytr), ("test", xte, yte)):
            paths[part] = os.path.join(work, "%s_%s.csv" % (name, part))
            write_csv(paths[part], [header[i] for i in fi] + t["targets"],
                      [[repr(float(v)) for v in r] for r in np.hstack([xs, ys])])
        f, k = len(fi), len(ti)
        xt = torch.from_numpy(xtr.astype(np.float32))
        mu, sd = xt.mean(0), xt.std(0)
        sd[sd == 0] = 1
        xn = (xt - mu) / sd
        yt = torch.from_numpy(ytr.astype(np.float32))
        init_sd = {n: v.detach().numpy().copy() for n, v in Net(f, t["hidden"], k).state_dict().items()}
        init_path = os.path.join(work, name + ".init.safetensors")
        st.save(init_path, init_sd)
        ref_sd, ref_losses = oracle(t, init_sd, xn, yt, f, k)
        net = os.path.join(work, name + ".net")
        loss = "mse_loss" if t["loss"] == "mse" else "binary_cross_entropy_with_logits"
        with open(net, "w") as fh:
            fh.write(NET % dict(f=f, h=t["hidden"], k=k, train=paths["train"], test=paths["test"],
                                targets=", ".join('"%s"' % c for c in t["targets"]), loss=loss, opt=t["opt"],
                                batch=BATCH, epochs=t["epochs"]))
        prog = os.path.join(work, name)
        r = subprocess.run([cddpc, net, "-o", prog], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            failures.append("%s: cddpc failed: %s" % (name, r.stdout.decode()[-600:]))
            continue
        got, final, why = train(prog, init_path, STEPS)
        if got is None:
            failures.append("%s: %s" % (name, why))
            continue
        lw, pw = rel_errors(got, ref_losses, st.load(final), ref_sd)
        # the whole run, for the score
        metrics = prog + ".metrics.csv"
        r = subprocess.run([prog, "--init", init_path, "--threads", "1", "--metrics", metrics],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
        if r.returncode != 0:
            failures.append("%s: the whole run exited with %d" % (name, r.returncode))
            continue
        col = "test_mse" if t["loss"] == "mse" else "test_label_acc" if k == 1 else "test_macro_f1"
        ours, ref = last_metric(metrics, col), sklearn_score(t, xtr, ytr, xte, yte)
        what = {"test_mse": "test MSE", "test_label_acc": "test accuracy", "test_macro_f1": "test macro-F1"}[col]
        print("%-18s %d train / %d test rows, %d features, %d target(s): %d steps, worst step-loss rel err %.2e, "
              "params rel L2 %.2e (tol %.0e); after %d epochs %s %.4f, scikit-learn's %s on the same split %.4f"
              % (name, len(xtr), len(xte), f, k, STEPS, lw, pw, TOL, t["epochs"], what, ours,
                 "LinearRegression" if col == "test_mse" else "LogisticRegression", ref))
        if not (lw <= TOL and pw <= TOL):
            failures.append("%s: the program does not train as PyTorch does (%.2e, %.2e)" % (name, lw, pw))
        # a loose bound: the model trained at all (a constant prediction scores
        # about 0.63, 6000 and 0.5 here)
        bad = ours > 2 * ref if col == "test_mse" else ours < ref - 0.1
        if bad:
            failures.append("%s: %s %.4f is far from scikit-learn's %.4f" % (name, what, ours, ref))
    if failures:
        print("float_equiv: FAIL: " + "; ".join(failures) + " (work dir %s)" % work)
        return 1
    print("float_equiv: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
