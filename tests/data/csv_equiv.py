#!/usr/bin/python3
"""The csv reader against Python's csv module and PyTorch, on real data
(scikit-learn's iris: 150 flowers, 4 measurements, the species as text).

usage: csv_equiv.py CDDPC

The test splits iris with sklearn's train_test_split (stratified, fixed
seed) into a training and a test file, written twice by Python's csv
module:
  plain   the defaults: the columns in sklearn's order, the species last;
  quoted  every field quoted (QUOTE_ALL), CRLF line ends, blank lines at
          the end, the species between the features, and an unused column
          'note' whose text holds commas, quotes and a line break; the
          model names its features = [...].
It writes a model file for each (csv(TRAIN, test = TEST, target =
"species", normalize = auto)), compiles them with CDDPC, and trains each
STEPS steps from PyTorch's initial weights in file order. PyTorch trains
the same network on the same rows, the labels mapped to classes in sorted
order (sklearn's LabelEncoder), each feature normalized by the training
rows' mean and std (torch.std, n - 1). Every step's loss must agree to
relative 1e-4 and the final parameters to relative L2 1e-4; the printed
class mapping and the one --save keeps must be LabelEncoder's; the saved
stds must be torch's (n - 1) and not the population's (the control).
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
from sklearn import datasets
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import LabelEncoder

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))
import st  # noqa: E402
from csv_run import file_order, rel_errors, train, write_csv  # noqa: E402

SEED = 5
STEPS = 20      # two epochs of 112 rows in batches of 16 (7 a epoch), then 6 more
BATCH = 16
LR = 0.05
MOMENTUM = 0.9
TOL = 1e-4
FEATURES = ["sepal_length", "sepal_width", "petal_length", "petal_width"]

NET = """
model IrisNet {
    fc1 = Linear(4, 16)
    fc2 = Linear(16, 3)
    forward(x: f32[N, 4]) {
        return fc2(relu(fc1(x)))
    }
}
train {
    model     IrisNet
    data      csv("%(train)s", test = "%(test)s", target = "species", normalize = auto%(features)s)
    loss      cross_entropy(reduction = mean)
    optimizer sgd(lr = %(lr)s, momentum = %(mom)s)
    batch     %(batch)d
    epochs    3
    shuffle   false
    seed      0
}
"""


class IrisNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def oracle(init_sd, x, y):
    model = IrisNet()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init_sd.items()})
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for xb, yb in file_order(x, y, BATCH, STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        losses.append(loss.item())
        opt.step()
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}, losses


def main(argv):
    if len(argv) != 1:
        sys.stderr.write(__doc__)
        return 2
    cddpc = os.path.abspath(argv[0])
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    work = tempfile.mkdtemp(prefix="cddpc-csv-equiv-")
    iris = datasets.load_iris()
    names = np.array(iris.target_names)[iris.target]
    xtr, xte, ntr, nte = train_test_split(iris.data, names, test_size=0.25, stratify=names, random_state=3)
    enc = LabelEncoder().fit(ntr)
    x = torch.from_numpy(xtr.astype(np.float32))
    mu, sd = x.mean(0), x.std(0)
    xn = (x - mu) / sd
    y = torch.from_numpy(enc.transform(ntr).astype(np.int64))
    init_sd = {k: v.detach().numpy().copy() for k, v in IrisNet().state_dict().items()}
    init_path = os.path.join(work, "init.safetensors")
    st.save(init_path, init_sd)
    ref_sd, ref_losses = oracle(init_sd, xn, y)
    want_map = ", ".join("%d = %s" % (i, c) for i, c in enumerate(enc.classes_))

    failures = []
    for flavor in ("plain", "quoted"):
        paths = {}
        for part, xs, ns in (("train", xtr, ntr), ("test", xte, nte)):
            p = paths[part] = os.path.join(work, "%s_%s.csv" % (flavor, part))
            if flavor == "plain":
                write_csv(p, FEATURES + ["species"], [[repr(float(v)) for v in r] + [c] for r, c in zip(xs, ns)])
            else:
                rows = [[repr(float(r[2])), 'row %d, "measured"\nby hand' % i, c, repr(float(r[0])),
                         repr(float(r[3])), repr(float(r[1]))] for i, (r, c) in enumerate(zip(xs, ns))]
                write_csv(p, ["petal_length", "note", "species", "sepal_length", "petal_width", "sepal_width"], rows,
                          True)
        net = os.path.join(work, flavor + ".net")
        feats = "" if flavor == "plain" else ", features = [%s]" % ", ".join('"%s"' % f for f in FEATURES)
        with open(net, "w") as f:
            f.write(NET % dict(train=paths["train"], test=paths["test"], features=feats, lr=LR, mom=MOMENTUM,
                               batch=BATCH))
        prog = os.path.join(work, flavor)
        r = subprocess.run([cddpc, net, "-o", prog], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            failures.append("%s: cddpc failed: %s" % (flavor, r.stdout.decode()[-600:]))
            continue
        got, final, out = train(prog, init_path, STEPS)
        if got is None:
            failures.append("%s: %s" % (flavor, out))
            continue
        got_sd, meta = st.load_with_metadata(final)
        m = re.search(r"classes of 'species' \(sorted\): (.*)", out)
        printed = m.group(1) if m else "(none printed)"
        saved = ", ".join("%d = %s" % (i, meta.get("data.class.%d" % i, "?")) for i in range(3))
        lw, pw = rel_errors(got, ref_losses, got_sd, ref_sd)
        stds = np.array([float.fromhex(meta["data.std.%d" % i]) for i in range(4)])
        means = np.array([float.fromhex(meta["data.mean.%d" % i]) for i in range(4)])
        sw = np.max(np.abs(stds - sd.numpy()) / sd.numpy())
        mw = np.max(np.abs(means - mu.numpy()) / np.abs(mu.numpy()))
        pop = x.std(0, unbiased=False).numpy()
        cw = np.max(np.abs(stds - pop) / pop)
        print("iris csv, %s: %d steps, losses %.4f .. %.4f, worst rel err %.2e (tol %.0e); params rel L2 %.2e; "
              "means rel %.1e, stds rel %.1e (population std: %.1e, must exceed 1e-6); classes printed: %s; "
              "saved: %s" % (flavor, STEPS, got[0], got[-1], lw, TOL, pw, mw, sw, cw, printed, saved))
        if not (lw <= TOL and pw <= TOL):
            failures.append("%s: the program does not train as PyTorch does" % flavor)
        if printed != want_map or saved != want_map:
            failures.append("%s: class mapping printed '%s', saved '%s', LabelEncoder's '%s'"
                            % (flavor, printed, saved, want_map))
        if not (sw <= 1e-6 and mw <= 1e-6 and cw > 1e-6):
            failures.append("%s: the saved means/stds are not torch's (n - 1)" % flavor)
    if failures:
        print("csv_equiv: FAIL: " + "; ".join(failures) + " (work dir %s)" % work)
        return 1
    print("csv_equiv: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
