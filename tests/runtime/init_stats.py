#!/usr/bin/python3
"""The parameters' initializations, as the program draws them.

usage: init_stats.py CDDPC

A token model with every init this compiler knows is compiled and saved
before its first step (--lr 0 --max-steps 1 --save): nn.Embedding's N(0, 1)
with padding_idx's row 0, nn.init.normal_ (mean 0.5, std 0.1),
xavier_uniform_ (gain 2), kaiming_uniform_ (fan_out, relu), uniform_,
constant_, zeros_, nn.Parameter of torch.randn(...) * 0.02 and of
torch.ones, Linear's default, and init statements inside a block model
(each of a Sequential's two instances initialized by them: how "every
Linear" is written). Each tensor is checked against the
distribution torch.nn.init defines (its bounds from torch's own
formulas): a constant exactly; a uniform tensor inside its bounds and
reaching within 2% of them, its mean within 5 standard errors of the
centre; a normal tensor's mean and std within 5 standard errors. A
broken init (a wrong std, a bound from fan_in for fan_out, a missing
padding row) fails one of them.
"""
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))
import st  # noqa: E402

NET = """
model Blk(n) {
    self.fc = nn.Linear(n, n)
    nn.init.normal_(self.fc.weight, std = 0.02)
    nn.init.zeros_(self.fc.bias)
    forward(x) {
        return self.fc(x)
    }
}
model Inits {
    self.body = nn.Sequential(Blk(256), Blk(256))
    self.emb = nn.Embedding(500, 64, padding_idx = 3)
    self.a = nn.Linear(256, 512)
    self.b = nn.Linear(512, 384)
    self.c = nn.Linear(384, 128)
    self.d = nn.Linear(128, 10)
    self.p = nn.Parameter(torch.randn(4, 64) * 0.02)
    self.q = nn.Parameter(torch.ones(10))
    nn.init.normal_(self.a.weight, mean = 0.5, std = 0.1)
    nn.init.zeros_(self.a.bias)
    nn.init.xavier_uniform_(self.b.weight, gain = 2.0)
    nn.init.kaiming_uniform_(self.c.weight, a = 0, mode = "fan_out", nonlinearity = "relu")
    nn.init.constant_(self.c.bias, 0.25)
    nn.init.uniform_(self.d.weight, a = -0.3, b = 0.1)

    forward(idx: i64[N, 4]) {
        h = self.body((self.emb(idx) + self.p).view(-1, 256))
        return self.d(self.c(self.b(self.a(h)))) * self.q
    }
}
train {
    model     Inits
    data      npz("%s")
    loss      cross_entropy()
    optimizer sgd(lr = 0.1)
    batch     8
    epochs    1
    seed      11
}
"""


def main(argv):
    if len(argv) != 1:
        sys.stderr.write(__doc__)
        return 2
    cddpc = os.path.abspath(argv[0])
    work = tempfile.mkdtemp(prefix="cddpc-init-stats-")
    r = np.random.default_rng(1)
    data = os.path.join(work, "tok.npz")
    np.savez(data, x_train=r.integers(0, 500, (64, 4)), y_train=r.integers(0, 10, 64),
             x_test=r.integers(0, 500, (16, 4)), y_test=r.integers(0, 10, 16))
    net = os.path.join(work, "inits.net")
    with open(net, "w") as f:
        f.write(NET % data)
    prog = os.path.join(work, "inits")
    out = subprocess.run([cddpc, net, "-o", prog], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if out.returncode != 0:
        print(out.stdout.decode())
        print("init_stats: FAIL: cddpc")
        return 1
    saved = os.path.join(work, "init.st")
    out = subprocess.run([prog, "--lr", "0", "--max-steps", "1", "--threads", "1", "--save", saved],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if out.returncode != 0:
        print(out.stdout.decode())
        print("init_stats: FAIL: the program")
        return 1
    w = {k: v.astype(np.float64) for k, v in st.load(saved).items()}
    fails = []

    def report(name, ok, what):
        print("%s %-10s %s" % ("PASS" if ok else "FAIL", name, what))
        if not ok:
            fails.append(name)

    def normal(name, x, mean, std):
        se_m, se_s = std / math.sqrt(x.size), std / math.sqrt(2 * x.size)
        ok = abs(x.mean() - mean) < 5 * se_m and abs(x.std() - std) < 5 * se_s
        report(name, ok, "N(%g, %g): mean %.5f std %.5f (%d values)" % (mean, std, x.mean(), x.std(), x.size))

    def uniform(name, x, lo, hi):
        sd = (hi - lo) / math.sqrt(12)
        ok = x.min() >= lo and x.max() <= hi and x.min() < lo + 0.02 * (hi - lo) and \
            x.max() > hi - 0.02 * (hi - lo) and abs(x.mean() - (lo + hi) / 2) < 5 * sd / math.sqrt(x.size)
        report(name, ok, "U(%.5f, %.5f): min %.5f max %.5f mean %.5f" % (lo, hi, x.min(), x.max(), x.mean()))

    def const(name, x, v):
        report(name, bool(np.all(x == v)), "all %g" % v)

    emb = w["emb.weight"]
    const("emb[3]", emb[3], 0.0)
    normal("emb", np.delete(emb, 3, axis=0), 0.0, 1.0)
    normal("a.weight", w["a.weight"], 0.5, 0.1)
    const("a.bias", w["a.bias"], 0.0)
    # the bounds from torch.nn.init's own formulas
    xb = 2.0 * math.sqrt(6.0 / (512 + 384))
    uniform("b.weight", w["b.weight"], -xb, xb)
    fan_out = torch.nn.init._calculate_correct_fan(torch.empty(128, 384), "fan_out")
    kb = torch.nn.init.calculate_gain("relu") * math.sqrt(3.0 / fan_out)
    uniform("c.weight", w["c.weight"], -kb, kb)
    const("c.bias", w["c.bias"], np.float32(0.25))
    uniform("d.weight", w["d.weight"], -0.3, 0.1)
    db = 1 / math.sqrt(128)     # Linear's default bias bound
    report("d.bias", bool(np.all(np.abs(w["d.bias"]) <= db)), "inside +-%.5f (Linear's default)" % db)
    normal("p", w["p"], 0.0, 0.02)
    for k in range(2):      # an init statement of a block: every instance's
        normal("body.%d.fc.weight" % k, w["body.%d.fc.weight" % k], 0.0, 0.02)
        const("body.%d.fc.bias" % k, w["body.%d.fc.bias" % k], 0.0)
    const("q", w["q"], 1.0)
    if fails:
        print("init_stats: FAIL: %s (work dir %s)" % (", ".join(fails), work))
        return 1
    print("init_stats: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
