#!/usr/bin/python3
"""PyTorch equivalence test for the train block's loss block.

usage: loss_block_equiv.py CDDPC

Each case is a small MLP (8 inputs, tanh, K outputs; with `aux`, a second
head on the same hidden layer, forward returning both) and a loss block
as PyTorch code writes the loss: cross-entropy plus an L2 term on one
weight, an auxiliary head's loss added with weight 0.3, label smoothing
with reduction sum, ignore_index, nll_loss of log_softmax, the regression
losses summed with weights, binary cross-entropy with logits and of
probabilities, a reduction none reduced by hand, and the weights of a
torch.tensor of the file's numbers: cross_entropy's and nll_loss's class
weights (with label smoothing and ignore_index, over class indices and
over probabilities; a registered buffer read as model.cw),
and `metric macro_f1(out, y)` (its test metrics recomputed from the
weights), binary_cross_entropy_with_logits' pos_weight and
weight. The data are written
here as IDX files (float32 samples; ubyte classes, double regression
targets, ubyte 0/1 targets). Each program trains from PyTorch's
initialization on the data in file order with SGD and momentum for STEPS
steps; PyTorch trains the same module with the same loss code from the
same weights on the same batches. Every step's loss must agree to
relative 1e-4 and the final parameters to relative L2 1e-4; where the
loss is a mean plus a constant (so the batches' weighting gives the whole
test set's value) the epoch's test_loss must equal the loss over the
test set in float64. Controls that must not match: the auxiliary head's
weight left out, the L2 term left out, smoothing left out, the class
weights left out or the weighted mean taken over the rows, pos_weight
left out.
"""
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
from loss_equiv import read_csv, write_idx  # noqa: E402

SEED = 11
STEPS = 100
BATCH = 16
NTRAIN, NTEST = STEPS * BATCH + 40, 300
LR = 0.05
MOMENTUM = 0.9
LOSS_TOL = 1e-4
PARAM_TOL = 1e-4
K = 4


class Net(nn.Module):
    def __init__(self, aux):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, K)
        if aux:
            self.aux = nn.Linear(16, K)

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        return (self.fc2(h), self.aux(h)) if hasattr(self, "aux") else self.fc2(h)


# (name, data kind, aux head, loss block body, torch loss(model, out, y), linear in the samples)
CASES = [
    ("ce_l2", "cls", False,
     "return F.cross_entropy(out, y) + 1e-3 * (model.fc1.weight ** 2).sum()",
     lambda m, o, y: F.cross_entropy(o, y) + 1e-3 * (m.fc1.weight ** 2).sum(), True),
    ("aux", "cls", True,
     "logits, a = out\n        return F.cross_entropy(logits, y) + 0.3 * F.cross_entropy(a, y)",
     lambda m, o, y: F.cross_entropy(o[0], y) + 0.3 * F.cross_entropy(o[1], y), True),
    ("aux_index", "cls", True,
     "return F.cross_entropy(out[0], y, reduction = 'sum') / 16 + 0.5 * F.nll_loss(F.log_softmax(out[1], dim = 1), y)",
     lambda m, o, y: F.cross_entropy(o[0], y, reduction="sum") / 16 + 0.5 * F.nll_loss(F.log_softmax(o[1], dim=1), y),
     False),
    ("smooth", "cls", False,
     "return F.cross_entropy(out, y, label_smoothing = 0.1, reduction = 'sum') * 0.0625",
     lambda m, o, y: F.cross_entropy(o, y, label_smoothing=0.1, reduction="sum") * 0.0625, False),
    ("ignore", "cls", False,
     "return F.cross_entropy(out, y, ignore_index = 2)",
     lambda m, o, y: F.cross_entropy(o, y, ignore_index=2), False),
    ("regression", "reg", False,
     "return F.mse_loss(out, y) + 0.5 * F.l1_loss(out, y) + F.smooth_l1_loss(out, y, beta = 0.5) "
     "+ F.huber_loss(out, y, delta = 0.7)",
     lambda m, o, y: F.mse_loss(o, y) + 0.5 * F.l1_loss(o, y) + F.smooth_l1_loss(o, y, beta=0.5)
     + F.huber_loss(o, y, delta=0.7), True),
    ("none", "reg", False,
     "e = F.mse_loss(out, y, reduction = 'none')\n        return e.sum(dim = 1).mean() + 0.1 * torch.abs(out - y).max()",
     lambda m, o, y: F.mse_loss(o, y, reduction="none").sum(dim=1).mean() + 0.1 * torch.abs(o - y).max(), False),
    ("bce_logits", "bin", False,
     "return F.binary_cross_entropy_with_logits(out, y)",
     lambda m, o, y: F.binary_cross_entropy_with_logits(o, y), True),
    ("bce", "bin", False,
     "return F.binary_cross_entropy(torch.sigmoid(out), y, reduction = 'sum') / 64",
     lambda m, o, y: F.binary_cross_entropy(torch.sigmoid(o), y, reduction="sum") / 64, False),
    ("ce_weight", "cls", False,
     "return F.cross_entropy(out, y, weight = torch.tensor([1.0, 2.0, 0.5, 1.5]))",
     lambda m, o, y: F.cross_entropy(o, y, weight=torch.tensor([1.0, 2.0, 0.5, 1.5])), False),
    ("ce_weight_all", "cls", False,
     "w = torch.tensor([0.3, 2.0, 1.0, 4.0])\n"
     "        return F.cross_entropy(out, y, weight = w, label_smoothing = 0.2, ignore_index = 1)",
     lambda m, o, y: F.cross_entropy(o, y, weight=torch.tensor([0.3, 2.0, 1.0, 4.0]), label_smoothing=0.2,
                                     ignore_index=1), False),
    ("nll_weight", "cls", False,
     "return F.nll_loss(F.log_softmax(out, dim = 1), y, weight = torch.tensor([2.0, 1.0, 1.0, 0.25]), "
     "reduction = 'sum') / 16",
     lambda m, o, y: F.nll_loss(F.log_softmax(o, dim=1), y, weight=torch.tensor([2.0, 1.0, 1.0, 0.25]),
                                reduction="sum") / 16, False),
    ("ce_probs_weight", "bin", False,
     "p = y / (y.sum(dim = 1, keepdim = True) + 1.0)\n"
     "        return F.cross_entropy(out, p, weight = torch.tensor([1.0, 3.0, 0.5, 2.0]), label_smoothing = 0.1)",
     lambda m, o, y: F.cross_entropy(o, y / (y.sum(dim=1, keepdim=True) + 1.0),
                                     weight=torch.tensor([1.0, 3.0, 0.5, 2.0]), label_smoothing=0.1), True),
    ("ce_buffer", "cls", False,
     "return F.cross_entropy(out, y, weight = model.cw, reduction = 'sum') / 16",
     lambda m, o, y: F.cross_entropy(o, y, weight=torch.tensor([0.5, 1.0, 2.0, 1.0]), reduction="sum") / 16, False),
    ("bce_f1", "bin", False,
     "return F.binary_cross_entropy_with_logits(out, y, reduction = 'sum') / 64",
     lambda m, o, y: F.binary_cross_entropy_with_logits(o, y, reduction="sum") / 64, False),
    ("bce_pos_weight", "bin", False,
     "return F.binary_cross_entropy_with_logits(out, y, pos_weight = torch.tensor([1.0, 3.0, 0.5, 2.0]))",
     lambda m, o, y: F.binary_cross_entropy_with_logits(o, y, pos_weight=torch.tensor([1.0, 3.0, 0.5, 2.0])),
     True),
    ("bce_both_weights", "bin", False,
     "return F.binary_cross_entropy_with_logits(out * 4.0, y, weight = torch.tensor([[0.5, 1.0, 2.0, 1.0]]), "
     "pos_weight = torch.tensor([4, 1, 1, 2]).float(), reduction = 'sum') / 64",
     lambda m, o, y: F.binary_cross_entropy_with_logits(o * 4.0, y, weight=torch.tensor([[0.5, 1.0, 2.0, 1.0]]),
                                                        pos_weight=torch.tensor([4, 1, 1, 2]).float(),
                                                        reduction="sum") / 64, False),
]

# the members a case adds to the model: a buffer the loss block reads as model.cw
MEMBERS = {"ce_buffer": '    self.register_buffer("cw", torch.tensor([0.5, 1.0, 2.0, 1.0]))\n'}
# the train block's metric, where a case names one
METRICS = {"bce_f1": "    metric    macro_f1(out, y)\n"}

# (case, what, a wrong oracle): each must not match
CONTROLS = [
    ("aux", "the auxiliary head left out", lambda m, o, y: F.cross_entropy(o[0], y)),
    ("ce_l2", "the L2 term left out", lambda m, o, y: F.cross_entropy(o, y)),
    ("smooth", "label smoothing left out", lambda m, o, y: F.cross_entropy(o, y, reduction="sum") * 0.0625),
    ("ce_weight", "the class weights left out", lambda m, o, y: F.cross_entropy(o, y)),
    ("ce_weight", "a weighted sum over the rows, not over the weights",
     lambda m, o, y: F.cross_entropy(o, y, weight=torch.tensor([1.0, 2.0, 0.5, 1.5]), reduction="sum") / 16),
    ("bce_pos_weight", "pos_weight left out", lambda m, o, y: F.binary_cross_entropy_with_logits(o, y)),
]

TEMPLATE = """model Net {
    fc1 = nn.Linear(8, 16)
    fc2 = nn.Linear(16, %d)
%s
    forward(x: f32[N, 8]) {
        h = torch.tanh(self.fc1(x))
        return %s
    }
}

train {
    model     Net
    data      idx("data", normalize = (0.0, 1.0))
    loss(out, y) {
        %s
    }
%s    optimizer sgd(lr = %g, momentum = %g)
    batch     %d
    epochs    1
    shuffle   true
    seed      %d
}
"""


def make_data(root):
    """The same samples with class, regression and 0/1 targets."""
    r = np.random.default_rng(5)
    A = r.standard_normal((8, K))
    sets = {}
    for pre, n in (("train", NTRAIN), ("t10k", NTEST)):
        X = r.standard_normal((n, 8)).astype(np.float32)
        Z = X.astype(np.float64) @ A
        C = (Z + 0.7 * r.standard_normal((n, K))).argmax(1).astype(np.uint8)
        T = 2.0 * np.tanh(Z) + 0.3 * r.standard_normal((n, K))
        B = (Z + 0.5 * r.standard_normal((n, K)) > 0).astype(np.uint8)
        for kind, y, code in (("cls", C, 0x08), ("reg", T, 0x0E), ("bin", B, 0x08)):
            os.makedirs(os.path.join(root, kind), exist_ok=True)
            write_idx(os.path.join(root, kind, pre + "-images-idx3-ubyte"), X, 0x0D)
            write_idx(os.path.join(root, kind, pre + "-labels-idx1-ubyte"), y, code)
        sets[pre] = {"x": torch.from_numpy(X), "cls": torch.from_numpy(C.astype(np.int64)),
                     "reg": torch.from_numpy(T.astype(np.float32)), "bin": torch.from_numpy(B.astype(np.float32))}
    return sets


def oracle(init_sd, aux, X, Y, fn):
    torch.manual_seed(0)
    model = Net(aux)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init_sd.items()})
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for s in range(STEPS):
        x, y = X[s * BATCH:(s + 1) * BATCH], Y[s * BATCH:(s + 1) * BATCH]
        opt.zero_grad()
        loss = fn(model, model(x), y)
        loss.backward()
        losses.append(loss.item())
        opt.step()
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}, losses


def check_f1(name, sd, test, row, failures):
    """test_label_acc and test_macro_f1 of a multi-label head (an output
    on where its logit is over 0: sigmoid over 0.5), recomputed from the
    program's final weights over the test set; per output F1 is
    2 TP / (2 TP + FP + FN), 0 where that is 0"""
    m64 = Net(False).double()
    m64.load_state_dict({k: torch.from_numpy(v.astype(np.float64)) for k, v in sd.items()})
    with torch.no_grad():
        p = (m64(test["x"].double()) > 0).numpy()
    t = test["bin"].numpy() > 0.5
    tp, fp, fn = (p & t).sum(0), (p & ~t).sum(0), (~p & t).sum(0)
    f1 = np.where(2 * tp + fp + fn > 0, 2 * tp / np.maximum(2 * tp + fp + fn, 1), 0.0).mean()
    acc = (p == t).mean()
    got_acc, got_f1 = float(row["test_label_acc"]), float(row["test_macro_f1"])
    # a logit within float32's rounding of 0 may fall either way: one flip
    # moves the label accuracy by 1 / (samples * outputs)
    if not (abs(got_acc - acc) <= 1.5 / p.size and abs(got_f1 - f1) <= 5e-3):
        failures.append("%s: test_label_acc %.6f, test_macro_f1 %.6f; the weights' own %.6f, %.6f"
                        % (name, got_acc, got_f1, acc, f1))
    return "test_label_acc %.4f test_macro_f1 %.4f (float64 %.4f %.4f)" % (got_acc, got_f1, acc, f1)


def main(argv):
    if len(argv) != 1:
        sys.stderr.write(__doc__)
        return 2
    cddpc = os.path.abspath(argv[0])
    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix="cddpc-loss-block-")
    sets = make_data(work)
    failures, runs = [], {}
    worst = [0.0, 0.0]
    for name, kind, aux, body, fn, linear in CASES:
        torch.manual_seed(SEED)
        init_sd = {k: v.detach().numpy().copy() for k, v in Net(aux).state_dict().items()}
        init_path = os.path.join(work, name + ".init.safetensors")
        st.save(init_path, init_sd)
        net = os.path.join(work, name + ".net")
        with open(net, "w") as f:
            f.write(TEMPLATE % (K, ("    aux = nn.Linear(16, %d)\n" % K if aux else "") + MEMBERS.get(name, ""),
                                "self.fc2(h), self.aux(h)" if aux else "self.fc2(h)", body, METRICS.get(name, ""),
                                LR, MOMENTUM, BATCH,
                                SEED))
        prog = os.path.join(work, name)
        r = subprocess.run([cddpc, net, "-o", prog], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            failures.append("%s: cddpc failed: %s" % (name, r.stdout.decode()[-2000:]))
            continue
        steps, final, metrics = (os.path.join(work, name + s) for s in (".steps.csv", ".final.st", ".metrics.csv"))
        cmd = [prog, "--data", os.path.join(work, kind), "--init", init_path, "--shuffle", "off", "--epochs", "1",
               "--max-steps", str(STEPS), "--batch", str(BATCH), "--threads", "1",
               "--step-log", steps, "--save", final, "--metrics", metrics]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        if r.returncode != 0:
            failures.append("%s: program exited with %d: %s" % (name, r.returncode, r.stdout.decode()[-2000:]))
            continue
        got = [float(row["loss"]) for row in read_csv(steps)]
        got_sd = st.load(final)
        runs[name] = (init_sd, aux, kind, got)
        ref_sd, ref = oracle(init_sd, aux, sets["train"]["x"], sets["train"][kind], fn)
        lw = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, ref)) if len(got) == len(ref) else float("inf")
        pw = max(np.linalg.norm(got_sd[k].astype(np.float64) - ref_sd[k]) / np.linalg.norm(ref_sd[k])
                 for k in ref_sd)
        worst = [max(worst[0], lw), max(worst[1], pw)]
        text = ""
        if linear:  # the test set's loss from the program's weights, in float64
            m64 = Net(aux).double()
            m64.load_state_dict({k: torch.from_numpy(v.astype(np.float64)) for k, v in got_sd.items()})
            y = sets["t10k"][kind]
            with torch.no_grad():
                ref_test = fn(m64, m64(sets["t10k"]["x"].double()), y if kind == "cls" else y.double()).item()
            test_loss = float(read_csv(metrics)[-1]["test_loss"])
            tw = abs(test_loss - ref_test) / abs(ref_test)
            text = ", test_loss %.6g (float64 %.6g, rel %.1e)" % (test_loss, ref_test, tw)
            if not tw <= 1e-5:
                failures.append("%s: test_loss %.9g, the test set's %.9g" % (name, test_loss, ref_test))
        if name in METRICS:     # macro_f1: the program's test metrics against the weights' own, in float64
            text += ", " + check_f1(name, got_sd, sets["t10k"], read_csv(metrics)[-1], failures)
        print("%-11s %3d steps, losses %.5g .. %.5g: step loss rel err %.2e, params rel L2 %.2e%s"
              % (name, STEPS, got[0], got[-1], lw, pw, text))
        if not (lw <= LOSS_TOL and pw <= PARAM_TOL):
            failures.append("%s does not train as PyTorch does" % name)
    for name, what, fn in CONTROLS:
        if name not in runs:
            continue
        init_sd, aux, kind, got = runs[name]
        _, ref = oracle(init_sd, aux, sets["train"]["x"], sets["train"][kind], fn)
        lw = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, ref))
        print("control, %s: step loss rel err %.2e (must exceed %.0e)" % (what, lw, 100 * LOSS_TOL))
        if not lw > 100 * LOSS_TOL:
            failures.append("the program also matches PyTorch with %s" % what)
    print("worst over %d cases: step loss %.2e, params %.2e" % (len(CASES), *worst))
    if failures:
        print("loss_block_equiv: FAIL: " + "; ".join(failures) + " (work dir %s)" % work)
        return 1
    print("loss_block_equiv: PASS: every loss block trains as PyTorch's loss code within 1e-4 over %d steps" % STEPS)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
