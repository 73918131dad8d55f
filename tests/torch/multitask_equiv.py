#!/usr/bin/python3
"""PyTorch equivalence test for several targets: a multi-task model on CSV.

usage: multitask_equiv.py CDDPC

The CSV written here has 8 features, a class column (4 classes, integers)
and a regression column; `targets = ["cls", "reg"]` and a loss block that
unpacks them (`c, t = y`, or indexes them: `y[0]`, `y[1]`) train a model
(the same data as an npz whose targets are separate arrays, `y_train =
["cls_train", "reg_train"]`, trains the same)
with a class head and a regression head on
    F.cross_entropy(logits, c) + 0.5 * F.mse_loss(r.view(-1), t)
against PyTorch's same code from the same weights on the same batches (file
order, SGD with momentum, STEPS steps): every step's loss within 1e-4
relative, the weights within 1e-4 relative L2. The evaluation must report
both heads' metrics as PyTorch computes them from the trained weights in
float64: test_acc exactly (argmax, the first of ties) and test_mse within
1e-6; test_loss the whole test set's loss (a mean: the batches' weighting
gives it). With `metric accuracy(out[0], y[0])` only test_acc, with
`metric mse(out[1].view(-1), y[1])` test_mse and test_mae, each
PyTorch's. Controls: the regression term left out must not match. Bad
class columns are refused with the file, the sample and the value: a class
index past the head's 4 classes and a fractional one; so are an npz missing
a target array and one whose target array has two columns.
"""
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
from dropout_equiv import read_csv, rel  # noqa: E402

SEED = 3
STEPS = 100
BATCH = 16
LR, MOMENTUM = 0.05, 0.9
NTRAIN, NTEST = STEPS * BATCH + 40, 300

NET = """model TwoHeads {
    fc1 = nn.Linear(8, 32)
    cls = nn.Linear(32, 4)
    reg = nn.Linear(32, 1)

    forward(x: f32[N, 8]) {
        h = torch.tanh(self.fc1(x))
        return self.cls(h), self.reg(h)
    }
}

train {
    model     TwoHeads
    data      %s
    loss(out, y) {
%s
    }
    optimizer sgd(lr = %g, momentum = %g)
    batch     %d
    epochs    1
    shuffle   true
    seed      %d
%s}
"""
UNPACKED = ("        logits, r = out\n        c, t = y\n"
            "        return F.cross_entropy(logits, c) + 0.5 * F.mse_loss(r.view(-1), t)")
# name: (loss block, a metric line, the metrics the evaluation must report)
BODIES = {
    "unpacked": (UNPACKED, "", ("test_acc", "test_mse")),
    "indexed": ("        return F.cross_entropy(out[0], y[0]) + 0.5 * F.mse_loss(out[1].view(-1), y[1])", "",
                ("test_acc", "test_mse")),
    "metric_acc": (UNPACKED, "    metric    accuracy(out[0], y[0])\n", ("test_acc",)),
    "metric_mse": (UNPACKED, "    metric    mse(out[1].view(-1), y[1])\n", ("test_mse", "test_mae")),
    "npz": (UNPACKED, "", ("test_acc", "test_mse")),
}
CSV = 'csv("%s", test = "%s", targets = ["cls", "reg"], normalize = (0.0, 1.0))'
NPZ = ('npz("%s", normalize = (0.0, 1.0), y_train = ["cls_train", "reg_train"], '
       'y_test = ["cls_test", "reg_test"])')


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.cls = nn.Linear(32, 4)
        self.reg = nn.Linear(32, 1)

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        return self.cls(h), self.reg(h)


def loss_fn(out, c, t, reg=0.5):
    return F.cross_entropy(out[0], c) + reg * F.mse_loss(out[1].view(-1), t)


def write_csv(path, X, c, y, bad=None):
    with open(path, "w") as f:
        f.write(",".join("f%d" % i for i in range(8)) + ",cls,reg\n")
        for i in range(len(X)):
            cv = bad if bad is not None and i == 5 else "%d" % c[i]
            f.write(",".join("%.6f" % v for v in X[i]) + ",%s,%.6f\n" % (cv, y[i]))


def oracle(init_sd, X, C, Y, reg=0.5):
    model = TwoHeads()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init_sd.items()})
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for s in range(STEPS):
        sl = slice(s * BATCH, (s + 1) * BATCH)
        opt.zero_grad()
        loss = loss_fn(model(X[sl]), C[sl], Y[sl], reg)
        loss.backward()
        losses.append(loss.item())
        opt.step()
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}, losses


def run(cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)


def main(argv):
    if len(argv) != 1:
        sys.stderr.write(__doc__)
        return 2
    cddpc = os.path.abspath(argv[0])
    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix="cddpc-multitask-")
    r = np.random.default_rng(3)
    A, B = r.standard_normal((8, 4)), r.standard_normal(8)
    data = {}
    for name, n in (("train", NTRAIN), ("test", NTEST)):
        X = r.standard_normal((n, 8))
        c = (X @ A + 0.5 * r.standard_normal((n, 4))).argmax(1)
        y = np.tanh(X @ B) * 2 + 0.1 * r.standard_normal(n)
        write_csv(os.path.join(work, name + ".csv"), X, c, y)
        # what the program reads: the printed values, as float32
        data[name] = (torch.tensor(np.round(X, 6), dtype=torch.float32), torch.from_numpy(c),
                      torch.tensor(np.round(y, 6), dtype=torch.float32))
    # the same as an npz: the targets as separate arrays, a class vector and a [N, 1] column
    np.savez(os.path.join(work, "data.npz"), x_train=data["train"][0].numpy(), x_test=data["test"][0].numpy(),
             cls_train=data["train"][1].numpy().astype(np.int64), cls_test=data["test"][1].numpy().astype(np.int16),
             reg_train=data["train"][2].numpy().reshape(-1, 1), reg_test=data["test"][2].numpy().astype(np.float64))
    torch.manual_seed(SEED)
    init_sd = {k: v.detach().numpy().copy() for k, v in TwoHeads().state_dict().items()}
    init_path = os.path.join(work, "init.safetensors")
    st.save(init_path, init_sd)
    failures, got_first = [], None
    ref_sd, ref = oracle(init_sd, *data["train"])
    for tag, (body, metric_line, want) in BODIES.items():
        net, prog = os.path.join(work, tag + ".net"), os.path.join(work, tag)
        with open(net, "w") as f:
            src = NPZ % os.path.join(work, "data.npz") if tag == "npz" else \
                CSV % (os.path.join(work, "train.csv"), os.path.join(work, "test.csv"))
            f.write(NET % (src, body, LR, MOMENTUM, BATCH, SEED, metric_line))
        p = run([cddpc, net, "-o", prog])
        if p.returncode != 0:
            failures.append("%s: cddpc failed: %s" % (tag, p.stdout.decode()[-2000:]))
            continue
        steps, final, metrics = (os.path.join(work, tag + e) for e in (".steps.csv", ".st", ".metrics.csv"))
        p = run([prog, "--init", init_path, "--shuffle", "off", "--max-steps", str(STEPS), "--batch", str(BATCH),
                 "--threads", "1", "--step-log", steps, "--save", final, "--metrics", metrics])
        if p.returncode != 0:
            failures.append("%s: program exited with %d: %s" % (tag, p.returncode, p.stdout.decode()[-2000:]))
            continue
        got = [float(row["loss"]) for row in read_csv(steps)]
        got_sd = st.load(final)
        lw = max(rel(a, b) for a, b in zip(got, ref)) if len(got) == len(ref) else float("inf")
        pw = max(np.linalg.norm(got_sd[k].astype(np.float64) - ref_sd[k]) / np.linalg.norm(ref_sd[k]) for k in ref_sd)
        m64 = TwoHeads().double()
        m64.load_state_dict({k: torch.from_numpy(v.astype(np.float64)) for k, v in got_sd.items()})
        X, C, Y = data["test"]
        with torch.no_grad():
            out = m64(X.double())
            acc = (out[0].argmax(1) == C).double().mean().item()
            mse = ((out[1].view(-1) - Y.double()) ** 2).mean().item()
            mae = (out[1].view(-1) - Y.double()).abs().mean().item()
            tl = loss_fn(out, C, Y.double()).item()
        ref_m = {"test_acc": acc, "test_mse": mse, "test_mae": mae}
        row = read_csv(metrics)[-1]
        g_tl = float(row["test_loss"])
        cols = [k for k in ("test_acc", "test_mse", "test_mae") if k in row]
        text = ", ".join("%s %.6f (torch %.6f)" % (k, float(row[k]), ref_m[k]) for k in cols)
        print("%-10s %d steps: step loss rel err %.2e, params rel L2 %.2e; %s, test_loss %.6f (torch %.6f)"
              % (tag, STEPS, lw, pw, text, g_tl, tl))
        if not (lw <= 1e-4 and pw <= 1e-4):
            failures.append("%s does not train as PyTorch does" % tag)
        if tuple(cols) != want or not rel(g_tl, tl) <= 1e-5 \
                or any(not abs(float(row[k]) - ref_m[k]) <= 1e-6 * max(1, ref_m[k]) for k in cols):
            failures.append("%s: the metrics (%s) differ from PyTorch's (%s)" % (tag, ", ".join(cols), ", ".join(want)))
        got_first = got_first or got
    if got_first:
        _, wrong = oracle(init_sd, *data["train"], reg=0.0)
        lw = max(rel(a, b) for a, b in zip(got_first, wrong))
        print("control, the regression term left out: step loss rel err %.2e (must exceed 1e-2)" % lw)
        if not lw > 1e-2:
            failures.append("the program also matches PyTorch without the regression term")
    # bad class columns: refused with the file, the sample and the value
    X, C, Y = (v.numpy() for v in data["train"])
    for bad, want in (("7", "7 is not a class index"), ("1.5", "1.5 is not a class index")):
        path = os.path.join(work, "bad.csv")
        write_csv(path, X, C, Y, bad=bad)
        p = run([os.path.join(work, "unpacked"), "--data", path, "--max-steps", "1"])
        text = p.stdout.decode()
        ok = p.returncode != 0 and want in text and "bad.csv" in text and "sample 5" in text
        print("bad class %s: exit %d: %s" % (bad, p.returncode, text.strip().splitlines()[-1] if text else ""))
        if not ok:
            failures.append("a class column holding %s is not refused as it should be" % bad)
    # bad target arrays in the npz: one missing, one of two columns
    tr, te = data["train"], data["test"]
    base = dict(x_train=tr[0].numpy(), x_test=te[0].numpy(), cls_train=tr[1].numpy(), cls_test=te[1].numpy(),
                reg_train=tr[2].numpy(), reg_test=te[2].numpy())
    for what, change, want in (("no reg_test", {"reg_test": None}, "has no array 'reg_test'"),
                               ("reg_train [N, 2]", {"reg_train": np.stack([tr[2].numpy()] * 2, 1)},
                                "reg_train has shape [%d, 2]: a target array is [samples] or [samples, 1]" % NTRAIN)):
        arrays = {k: v for k, v in dict(base, **change).items() if v is not None}
        path = os.path.join(work, "data.npz")
        np.savez(path, **arrays)
        p = run([os.path.join(work, "npz"), "--max-steps", "1"])
        text = p.stdout.decode()
        print("npz with %s: exit %d: %s" % (what, p.returncode, text.strip().splitlines()[-1] if text else ""))
        if p.returncode != 1 or want not in text:
            failures.append("an npz with %s is not refused as it should be" % what)
    if failures:
        print("multitask_equiv: FAIL: %s (work dir %s)" % ("; ".join(failures), work))
        return 1
    print("multitask_equiv: PASS: a class and a regression target as a tuple train as PyTorch's and report both metrics")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
