#!/usr/bin/python3
"""Losses of each output on any shape, from npz: an autoencoder on the
samples alone (target = input: no y arrays) and a huber_loss on
[N, 4, 2] outputs against y arrays of that shape.

usage: npz_shapes.py CDDPC

scikit-learn's digits (data/sklearn/digits.npz) rewritten with x_train and
x_test only, the values scaled to [0, 1]: a 64-16-64 MLP autoencoder
compiled with npz(FILE, target = input) and mse_loss trains 30 steps in
file order from PyTorch's initial weights; PyTorch trains the same network
on F.mse_loss(model(x), x): every step's loss within 1e-4 relative, the
parameters within 1e-4 relative L2. Then `--evaluate` reports the
reconstruction loss of the saved weights, which must equal PyTorch's mean
squared error over the test set; and the same file with a y_train array
named in the model is refused at compile time. Last, a network returning
[N, 4, 2] trains 30 steps with huber_loss(delta = 0.5) against npz
targets y of shape [N, 4, 2] (2 * tanh of a fixed projection of x):
PyTorch's F.huber_loss(out, y, delta=0.5), the mean over all 8 outputs,
within the same tolerances.
"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch"))
import st  # noqa: E402
from csv_run import file_order, rel_errors, train  # noqa: E402

STEPS, BATCH, LR = 30, 32, 0.1
NET = """
model AE {
    self.enc = nn.Linear(64, 16)
    self.dec = nn.Linear(16, 64)
    forward(x: f32[N, 1, 8, 8]) {
        return self.dec(torch.tanh(self.enc(x.view(x.size(0), 64)))).view(-1, 1, 8, 8)
    }
}
train {
    model     AE
    data      npz("%s"%s, target = input)
    loss      mse_loss(reduction = mean)
    optimizer sgd(lr = %g, momentum = 0.9)
    batch     %d
    epochs    1
    shuffle   false
}
"""

HUBER = """
model Head {
    self.fc = nn.Linear(64, 8)
    forward(x: f32[N, 1, 8, 8]) {
        return self.fc(x.view(x.size(0), 64)).view(-1, 4, 2)
    }
}
train {
    model     Head
    data      npz("%s")
    loss      huber_loss(delta = 0.5)
    optimizer sgd(lr = %g, momentum = 0.9)
    batch     %d
    epochs    1
    shuffle   false
}
"""


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 8)

    def forward(self, x):
        return self.fc(x.view(x.size(0), 64)).view(-1, 4, 2)


class AE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(64, 16)
        self.dec = nn.Linear(16, 64)

    def forward(self, x):
        return self.dec(torch.tanh(self.enc(x.view(x.size(0), 64)))).view(-1, 1, 8, 8)


def main(argv):
    if len(argv) != 1:
        sys.stderr.write(__doc__)
        return 2
    cddpc = os.path.abspath(argv[0])
    root = os.path.join(HERE, "..", "..")
    d = np.load(os.path.join(root, "data", "sklearn", "digits.npz"))
    xtr, xte = d["x_train"] / 16.0, d["x_test"] / 16.0
    work = tempfile.mkdtemp(prefix="cddpc-npz-shapes-")
    data = os.path.join(work, "x.npz")
    np.savez(data, x_train=xtr.astype(np.float32), x_test=xte.astype(np.float32))
    fails = []
    # a y array named beside target = input: a compile-time error
    bad = os.path.join(work, "bad.net")
    with open(bad, "w") as f:
        f.write(NET % (data, ', y_train = "y"', LR, BATCH))
    r = subprocess.run([cddpc, bad, "-o", os.path.join(work, "bad")], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    msg = r.stdout.decode()
    print("y_train with target = input: exit %d: %s" % (r.returncode, msg.strip().splitlines()[0] if msg else ""))
    if r.returncode != 1 or "reads no y arrays" not in msg:
        fails.append("a y array beside target = input was not refused")

    net = os.path.join(work, "ae.net")
    with open(net, "w") as f:
        f.write(NET % (data, "", LR, BATCH))
    prog = os.path.join(work, "ae")
    r = subprocess.run([cddpc, net, "-o", prog], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        print(r.stdout.decode())
        print("npz_shapes: FAIL: cddpc exited with %d" % r.returncode)
        return 1
    torch.manual_seed(3)
    torch.set_num_threads(1)
    model = AE()
    init = os.path.join(work, "init.st")
    st.save(init, {k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
    got, final, out = train(prog, init, STEPS)
    if got is None:
        print("npz_shapes: FAIL: %s" % out)
        return 1
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    ref = []
    X = torch.from_numpy(xtr.astype(np.float32))
    for x, _ in file_order(X, X, BATCH, STEPS):
        opt.zero_grad()
        loss = F.mse_loss(model(x), x)
        loss.backward()
        opt.step()
        ref.append(loss.item())
    lw, pw = rel_errors(got, ref, st.load(final), {k: v.detach().numpy().astype(np.float64)
                                                   for k, v in model.state_dict().items()})
    print("%d steps on x arrays alone: losses %.4f .. %.4f; step loss rel err %.2e, params rel L2 %.2e (tol 1e-4)"
          % (STEPS, got[0], got[-1], lw, pw))
    if not (lw <= 1e-4 and pw <= 1e-4):
        fails.append("the program does not train as PyTorch does")
    r = subprocess.run([prog, "--evaluate", final, "--threads", "1"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    text = r.stdout.decode()
    m = re.search(r"test_loss ([0-9.]+)", text)
    with torch.no_grad():
        xt = torch.from_numpy(xte.astype(np.float32))
        want = F.mse_loss(model(xt), xt).item()
    print("--evaluate: %s; PyTorch's test mse %.6f" % (m.group(0) if m else text.strip()[-200:], want))
    if r.returncode != 0 or not m or abs(float(m.group(1)) - want) > 1e-5 * max(1.0, want) + 5e-7:
        fails.append("--evaluate does not report the reconstruction loss")
    # huber_loss on [N, 4, 2] against y arrays of that shape
    proj = np.random.default_rng(4).standard_normal((64, 8)) / 4.0
    ytr = (2 * np.tanh(xtr.reshape(-1, 64) @ proj)).reshape(-1, 4, 2).astype(np.float32)
    yte = (2 * np.tanh(xte.reshape(-1, 64) @ proj)).reshape(-1, 4, 2).astype(np.float32)
    data2 = os.path.join(work, "xy.npz")
    np.savez(data2, x_train=xtr.astype(np.float32), y_train=ytr, x_test=xte.astype(np.float32), y_test=yte)
    net2 = os.path.join(work, "h.net")
    with open(net2, "w") as f:
        f.write(HUBER % (data2, LR, BATCH))
    prog2 = os.path.join(work, "h")
    r = subprocess.run([cddpc, net2, "-o", prog2], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        print(r.stdout.decode())
        fails.append("cddpc refused huber_loss on [N, 4, 2]")
    else:
        torch.manual_seed(5)
        hm = Head()
        init2 = os.path.join(work, "init2.st")
        st.save(init2, {k: v.detach().numpy().copy() for k, v in hm.state_dict().items()})
        got, final2, out = train(prog2, init2, STEPS)
        opt = torch.optim.SGD(hm.parameters(), lr=LR, momentum=0.9)
        ref = []
        for x, y in file_order(X, torch.from_numpy(ytr), BATCH, STEPS):
            opt.zero_grad()
            loss = F.huber_loss(hm(x), y, delta=0.5)
            loss.backward()
            opt.step()
            ref.append(loss.item())
        if got is None:
            fails.append("huber_loss on [N, 4, 2]: %s" % out)
        else:
            lw, pw = rel_errors(got, ref, st.load(final2), {k: v.detach().numpy().astype(np.float64)
                                                            for k, v in hm.state_dict().items()})
            print("huber_loss on [N, 4, 2] outputs and targets: %d steps, losses %.4f .. %.4f; step loss rel err "
                  "%.2e, params rel L2 %.2e (tol 1e-4)" % (STEPS, got[0], got[-1], lw, pw))
            if not (lw <= 1e-4 and pw <= 1e-4):
                fails.append("huber_loss on [N, 4, 2] does not train as PyTorch's")
    if fails:
        print("npz_shapes: FAIL: %s (work dir %s)" % ("; ".join(fails), work))
        return 1
    print("npz_shapes: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
