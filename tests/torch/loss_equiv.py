#!/usr/bin/python3
"""PyTorch equivalence test for the losses of float targets.

usage: loss_equiv.py CDDPC

tests/torch/loss_mlp.net is compiled once per case, its `loss` line
replaced: mse_loss, l1_loss, smooth_l1_loss(beta), huber_loss(delta) and
binary_cross_entropy_with_logits (with and without pos_weight), each with
reduction mean, sum and none. The data are written here as IDX files:
float32 samples [N, 8] (type 0x0D); regression targets [N, 3] as doubles
(0x0E); 0/1 targets [N, 3] as ubyte (0x08). Each program trains from
PyTorch's initialization on the data in file order, SGD with momentum, for
STEPS steps; PyTorch trains the same MLP with the same functional loss from
the same weights on the same batches (reduction none: backward of ones, the
step loss logged as the sum). Every step's loss must agree to relative
1e-4, the final parameters to relative L2 1e-4, and the epoch's test_loss
must be the mean over the test set of each sample's loss (its K elements'
mean under mean, their sum otherwise), computed here in float64.
Controls that must not match: mse's mean taken over N alone, huber with
the default delta, BCE without its pos_weight, smooth_l1 as huber.
"""
import csv
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 2024
STEPS = 120
BATCH = 16
NTRAIN, NTEST = STEPS * BATCH + 40, 300
LR = {"mean": 0.05, "sum": 0.002, "none": 0.002}
MOMENTUM = 0.9
LOSS_TOL = 1e-4
PARAM_TOL = 1e-4
PW = [1.0, 2.5, 0.5]


class LossMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def write_idx(path, a, code):
    dt = {0x08: ">u1", 0x0D: ">f4", 0x0E: ">f8"}[code]
    with open(path, "wb") as f:
        f.write(bytes([0, 0, code, a.ndim]) + b"".join(struct.pack(">I", d) for d in a.shape))
        f.write(np.ascontiguousarray(a).astype(dt).tobytes())


def make_data(root):
    """Two data sets of the same samples: regression and 0/1 targets."""
    r = np.random.default_rng(7)
    A = r.standard_normal((8, 3))
    sets = {}
    for kind in ("reg", "bin"):
        os.makedirs(os.path.join(root, kind), exist_ok=True)
    for pre, n in (("train", NTRAIN), ("t10k", NTEST)):
        X = r.standard_normal((n, 8)).astype(np.float32)
        Z = X.astype(np.float64) @ A
        T = 2.0 * np.tanh(Z) + 0.3 * r.standard_normal((n, 3))    # doubles: read as float
        B = (Z + 0.5 * r.standard_normal((n, 3)) > 0).astype(np.uint8)
        for kind, y, code in (("reg", T, 0x0E), ("bin", B, 0x08)):
            write_idx(os.path.join(root, kind, pre + "-images-idx3-ubyte"), X, 0x0D)
            write_idx(os.path.join(root, kind, pre + "-labels-idx1-ubyte"), y, code)
        sets[pre] = (torch.from_numpy(X), torch.from_numpy(T.astype(np.float32)),
                     torch.from_numpy(B.astype(np.float32)))
    return sets


# case: (name, loss line, data kind, reduction, torch loss(out, target, reduction))
def cases():
    out = []
    pw = torch.tensor(PW)
    fns = [
        ("mse", "mse_loss(reduction = %s)", "reg", lambda o, t, r: F.mse_loss(o, t, reduction=r)),
        ("l1", "l1_loss(reduction = %s)", "reg", lambda o, t, r: F.l1_loss(o, t, reduction=r)),
        ("smooth_l1", "smooth_l1_loss(reduction = %s, beta = 0.5)", "reg",
         lambda o, t, r: F.smooth_l1_loss(o, t, reduction=r, beta=0.5)),
        ("huber", "huber_loss(reduction = %s, delta = 0.7)", "reg",
         lambda o, t, r: F.huber_loss(o, t, reduction=r, delta=0.7)),
        ("bce_pw", "binary_cross_entropy_with_logits(reduction = %s, pos_weight = [1.0, 2.5, 0.5])", "bin",
         lambda o, t, r: F.binary_cross_entropy_with_logits(o, t, reduction=r, pos_weight=pw)),
    ]
    for name, line, kind, fn in fns:
        for red in ("mean", "sum", "none"):
            out.append((name, line % red, kind, red, fn))
    out.append(("bce", "F.binary_cross_entropy_with_logits()", "bin", "mean",
                lambda o, t, r: F.binary_cross_entropy_with_logits(o, t, reduction=r)))
    return out


def controls():
    """(case name, reduction, what, a wrong oracle): each must not match."""
    return [
        ("mse", "mean", "mse's mean over N alone", lambda o, t, r: F.mse_loss(o, t, reduction="sum") / o.shape[0]),
        ("huber", "mean", "huber with delta 1", lambda o, t, r: F.huber_loss(o, t, reduction=r)),
        ("bce_pw", "mean", "BCE without pos_weight", lambda o, t, r: F.binary_cross_entropy_with_logits(o, t, reduction=r)),
        ("smooth_l1", "sum", "smooth_l1 as huber", lambda o, t, r: F.huber_loss(o, t, reduction=r, delta=0.5)),
    ]


def oracle(init_sd, X, T, red, fn):
    model = LossMLP()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init_sd.items()})
    opt = torch.optim.SGD(model.parameters(), lr=LR[red], momentum=MOMENTUM)
    losses = []
    for s in range(STEPS):
        x, t = X[s * BATCH:(s + 1) * BATCH], T[s * BATCH:(s + 1) * BATCH]
        opt.zero_grad()
        loss = fn(model(x), t, red)
        if red == "none":
            loss.backward(torch.ones_like(loss))
            losses.append(loss.sum().item())
        else:
            loss.backward()
            losses.append(loss.item())
        opt.step()
    return model, {k: v.detach().numpy() for k, v in model.state_dict().items()}, losses


def metric_check(kind, row, out, t):
    """The program's metrics against these, from the trained weights in
    float64: regression MSE and MAE over all elements; multi-label accuracy
    per label and macro-F1 at sigmoid > 0.5 (per output 2 TP / (2 TP + FP +
    FN), then their mean, as sklearn's f1_score(average='macro'))."""
    if kind == "reg":
        d = (out - t).numpy()
        ref = {"test_mse": float((d ** 2).mean()), "test_mae": float(np.abs(d).mean())}
        tol = 1e-6
    else:
        p, q = (torch.sigmoid(out) > 0.5).numpy(), (t > 0.5).numpy()
        tp, fp, fn = (p & q).sum(0), (p & ~q).sum(0), (~p & q).sum(0)
        f1 = np.where(2 * tp + fp + fn > 0, 2 * tp / np.maximum(2 * tp + fp + fn, 1), 0.0)
        micro = 2 * tp.sum() / (2 * tp.sum() + fp.sum() + fn.sum())
        ref = {"test_label_acc": float((p == q).mean()), "test_macro_f1": float(f1.mean())}
        tol = 1e-9
        if "test_macro_f1" in row and abs(float(row["test_macro_f1"]) - micro) < 1e-6:
            return "macro-F1 %s is the micro-F1 %.9g" % (row["test_macro_f1"], micro), ""
    errs, text = [], []
    for k, v in ref.items():
        if k not in row:
            errs.append("no column %s" % k)
            continue
        got = float(row[k])
        text.append("%s %.9g (reference %.9g)" % (k, got, v))
        if not abs(got - v) <= tol * max(1.0, abs(v)):
            errs.append("%s %.9g, expected %.9g" % (k, got, v))
    if kind != "reg":
        text.append("(micro-F1 %.9g)" % micro)
    return "; ".join(errs), ", ".join(text)


def read_csv(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    head = [c.strip() for c in rows[0]]
    return [dict(zip(head, r)) for r in rows[1:]]


def main(argv):
    if len(argv) != 1:
        sys.stderr.write(__doc__)
        return 2
    cddpc = os.path.abspath(argv[0])
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    work = tempfile.mkdtemp(prefix="cddpc-loss-equiv-")
    init_path = os.path.join(work, "init.safetensors")
    init_sd = {k: v.detach().numpy().copy() for k, v in LossMLP().state_dict().items()}
    st.save(init_path, init_sd)
    sets = make_data(work)
    src = open(os.path.join(HERE, "loss_mlp.net")).read()
    line = "    loss      mse_loss(reduction = mean)\n"
    assert line in src
    failures, got_runs = [], {}
    worst = [0.0, 0.0, 0.0]
    for name, loss_line, kind, red, fn in cases():
        tag = "%s_%s" % (name, red)
        net = os.path.join(work, tag + ".net")
        with open(net, "w") as f:
            f.write(src.replace(line, "    loss      %s\n" % loss_line))
        prog = os.path.join(work, tag)
        r = subprocess.run([cddpc, net, "-o", prog], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            failures.append("%s: cddpc failed: %s" % (tag, r.stdout.decode()[-2000:]))
            continue
        steps, final, metrics = (os.path.join(work, tag + s) for s in (".steps.csv", ".final.st", ".metrics.csv"))
        cmd = [prog, "--data", os.path.join(work, kind), "--init", init_path, "--shuffle", "off", "--epochs", "1",
               "--max-steps", str(STEPS), "--batch", str(BATCH), "--lr", str(LR[red]), "--threads", "1",
               "--step-log", steps, "--save", final, "--metrics", metrics]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        if r.returncode != 0:
            failures.append("%s: program exited with %d: %s" % (tag, r.returncode, r.stdout.decode()[-2000:]))
            continue
        got = [float(row["loss"]) for row in read_csv(steps)]
        got_sd = st.load(final)
        test_loss = float(read_csv(metrics)[-1]["test_loss"])
        got_runs[(name, red)] = (got, got_sd)
        X, T = sets["train"][0], sets["train"][1 if kind == "reg" else 2]
        model, ref_sd, ref = oracle(init_sd, X, T, red, fn)
        lw = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, ref)) if len(got) == len(ref) else float("inf")
        pw = max(np.linalg.norm(got_sd[k].astype(np.float64) - ref_sd[k]) / np.linalg.norm(ref_sd[k])
                 for k in ref_sd)
        # the test loss of the trained program's weights, per sample, in float64
        m64 = LossMLP().double()
        m64.load_state_dict({k: torch.from_numpy(v.astype(np.float64)) for k, v in got_sd.items()})
        Xt, Tt = sets["t10k"][0].double(), sets["t10k"][1 if kind == "reg" else 2].double()
        with torch.no_grad():
            el = fn(m64(Xt), Tt, "none")
        per = el.mean(1) if red == "mean" else el.sum(1)
        ref_test = per.mean().item()
        tw = abs(test_loss - ref_test) / abs(ref_test)
        mrow = read_csv(metrics)[-1]
        merr, mtext = metric_check(kind, mrow, m64(Xt).detach(), Tt)
        print("%-16s metrics: %s" % (tag, mtext))
        if merr:
            failures.append("%s: %s" % (tag, merr))
        worst = [max(worst[0], lw), max(worst[1], pw), max(worst[2], tw)]
        print("%-16s %3d steps, losses %.5g .. %.5g: step loss rel err %.2e, params rel L2 %.2e, test_loss %.6g "
              "(float64 %.6g, rel %.1e)" % (tag, STEPS, got[0], got[-1], lw, pw, test_loss, ref_test, tw))
        if not (lw <= LOSS_TOL and pw <= PARAM_TOL and tw <= 1e-5):
            failures.append("%s does not train as PyTorch does" % tag)
    for name, red, what, fn in controls():
        if (name, red) not in got_runs:
            continue
        got, got_sd = got_runs[(name, red)]
        kind = "bin" if name.startswith("bce") else "reg"
        X, T = sets["train"][0], sets["train"][1 if kind == "reg" else 2]
        _, ref_sd, ref = oracle(init_sd, X, T, red, fn)
        lw = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, ref))
        print("control, %s: step loss rel err %.2e (must exceed %.0e)" % (what, lw, 100 * LOSS_TOL))
        if not lw > 100 * LOSS_TOL:
            failures.append("the program also matches PyTorch with %s" % what)
    print("worst over %d cases: step loss %.2e, params %.2e, test_loss %.2e" % (len(cases()), *worst))
    if failures:
        print("loss_equiv: FAIL: " + "; ".join(failures) + " (work dir %s)" % work)
        return 1
    print("loss_equiv: PASS: every loss and reduction equals PyTorch's within 1e-4 over %d steps" % STEPS)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
