#!/usr/bin/python3
"""PyTorch equivalence of decay = "dim>=2": nanoGPT's two parameter groups
(weight decay on the parameters of 2 or more dimensions, none on the
others), for every optimizer that takes weight_decay.

usage: decay_equiv.py CDDPC DATA_DIR VARIANT...

  VARIANT  adamw    tests/torch/decay_mlp.net as it stands: optimizer
                    adamw(lr = 0.002, betas = (0.9, 0.99), weight_decay = 0.1,
                    decay = "dim>=2")
           adam     its optimizer line replaced by adam(lr = 0.001,
                    weight_decay = 0.1, decay = "dim>=2")
           sgd      ... sgd(lr = 0.05, momentum = 0.9, weight_decay = 0.1,
                    decay = "dim>=2")
           rmsprop  ... rmsprop(lr = 0.0005, momentum = 0.5, weight_decay = 0.1,
                    decay = "dim>=2")

The model (Linear layers with biases, a LayerNorm, and a Linear weight
tied to another's, which named_parameters() lists once: it decays once a
step) is compiled with CDDPC and trained from the same initial weights as PyTorch (float32, one
thread) for 3 epochs of the first 640 training images in file order (30
steps of 64). PyTorch builds the groups as nanoGPT's configure_optimizers
does:

    param_dict = {pn: p for pn, p in model.named_parameters()}
    decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
    nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
    optim_groups = [{'params': decay_params, 'weight_decay': weight_decay},
                    {'params': nodecay_params, 'weight_decay': 0.0}]

A variant passes when all 30 step losses agree to 1e-4 relative and every
final tensor to 1e-4 relative L2, and -- so the comparison can fail -- when
neither control agrees with the program: PyTorch with the weight decay on
every parameter (decay = "all", one group), and with none at all.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from simplenet_equiv import find_split, normalize, read_steplog, rel  # noqa: E402

N, BATCH, EPOCHS, TOL, WD = 640, 64, 3, 1e-4, 0.1
HERE = os.path.dirname(os.path.abspath(__file__))
NET = os.path.join(HERE, "decay_mlp.net")
O = torch.optim
# name: (the train block's optimizer line, torch's optimizer of param groups and a weight decay)
VARIANTS = {
    "adamw": (None, lambda g, wd: O.AdamW(g, lr=0.002, betas=(0.9, 0.99), weight_decay=wd)),
    "adam": ('optimizer adam(lr = 0.001, weight_decay = 0.1, decay = "dim>=2")',
             lambda g, wd: O.Adam(g, lr=0.001, weight_decay=wd)),
    "sgd": ('optimizer sgd(lr = 0.05, momentum = 0.9, weight_decay = 0.1, decay = "dim>=2")',
            lambda g, wd: O.SGD(g, lr=0.05, momentum=0.9, weight_decay=wd)),
    "rmsprop": ('optimizer rmsprop(lr = 0.0005, momentum = 0.5, weight_decay = 0.1, decay = "dim>=2")',
                lambda g, wd: O.RMSprop(g, lr=0.0005, momentum=0.5, weight_decay=wd)),
}
# how the oracle groups the parameters: nanoGPT's two groups, and the controls
GROUPING = {
    "dim>=2": "nanoGPT's two groups",
    "all": "weight decay on every parameter (decay = \"all\")",
    "none": "no weight decay at all",
}


class DecayMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 64)
        self.ln = nn.LayerNorm(64)
        self.sq = nn.Linear(64, 64)
        self.mix = nn.Linear(64, 64)
        self.head = nn.Linear(64, 10)
        self.mix.weight = self.sq.weight

    def forward(self, x):
        x = torch.flatten(x, 1)
        x = F.relu(self.ln(self.fc1(x)))
        x = F.relu(self.sq(x))
        x = F.relu(self.mix(x))
        return self.head(x)


def groups(model, grouping):
    param_dict = {pn: p for pn, p in model.named_parameters()}
    if grouping != "dim>=2":
        return [{"params": list(param_dict.values()), "weight_decay": WD if grouping == "all" else 0.0}]
    decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
    nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
    return [{"params": decay_params, "weight_decay": WD}, {"params": nodecay_params, "weight_decay": 0.0}]


def oracle(init_sd, X, Y, variant, grouping):
    model = DecayMLP()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init_sd.items()})
    opt = VARIANTS[variant][1](groups(model, grouping), WD)
    losses = []
    for _ in range(EPOCHS):
        for s in range(N // BATCH):
            x, y = X[s * BATCH:(s + 1) * BATCH], Y[s * BATCH:(s + 1) * BATCH]
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            losses.append(loss.item())
            opt.step()
    return losses, {k: v.detach().numpy() for k, v in model.state_dict().items()}


def worst(losses, params, ref_losses, ref_params):
    if len(losses) != len(ref_losses):
        return float("inf"), float("inf")
    wl = max(rel(a, b) for a, b in zip(losses, ref_losses))
    wp = max(float(np.linalg.norm(params[k] - ref_params[k]) / max(np.linalg.norm(ref_params[k]), 1e-12))
             for k in ref_params)
    return wl, wp


def compile_variant(cddpc, work, variant):
    text = open(NET).read()
    line = VARIANTS[variant][0]
    if line:
        old = [s for s in text.split("\n") if s.strip().startswith("optimizer ")]
        assert len(old) == 1, "decay_mlp.net: one optimizer line expected"
        text = text.replace(old[0], "    " + line)
    net = os.path.join(work, variant + ".net")
    with open(net, "w") as f:
        f.write(text)
    exe = os.path.join(work, variant)
    r = subprocess.run([cddpc, net, "-o", exe], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        return None, "cddpc failed:\n" + r.stdout.decode()[-2000:]
    return exe, None


def check(cddpc, work, small, init, init_sd, X, Y, variant):
    name = "decay_equiv[%s]" % variant
    exe, err = compile_variant(cddpc, work, variant)
    if err:
        print("%s: FAIL: %s" % (name, err))
        return False
    steps, final = os.path.join(work, variant + ".csv"), os.path.join(work, variant + ".st")
    cmd = [exe, "--data", small, "--init", init, "--shuffle", "off", "--epochs", str(EPOCHS),
           "--batch", str(BATCH), "--threads", "1", "--step-log", steps, "--save", final]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    if r.returncode != 0:
        print("%s: FAIL: the program exited %d:\n%s" % (name, r.returncode, r.stdout.decode()[-2000:]))
        return False
    losses, params = read_steplog(steps), st.load(final)
    ref_losses, ref_params = oracle(init_sd, X, Y, variant, "dim>=2")
    if len(losses) != len(ref_losses):
        print("%s: FAIL: %d steps, expected %d" % (name, len(losses), len(ref_losses)))
        return False
    wl, wp = worst(losses, params, ref_losses, ref_params)
    ok = wl <= TOL and wp <= TOL
    print("%s: %d steps over %d epochs; against %s: step loss max rel %.2e, parameters max rel L2 %.2e (<= %g)"
          % (name, len(losses), EPOCHS, GROUPING["dim>=2"], wl, wp, TOL))
    for grouping in ("all", "none"):
        cl, cp = worst(losses, params, *oracle(init_sd, X, Y, variant, grouping))
        matched = cl <= TOL and cp <= TOL
        print("%s: control, %s: step loss max rel %.2e, parameters max rel L2 %.2e (one must exceed %g)%s"
              % (name, GROUPING[grouping], cl, cp, TOL, ": MATCHED" if matched else ""))
        ok = ok and not matched
    print("%s: %s" % (name, "OK" if ok else "FAIL"))
    return ok


def main(argv):
    if len(argv) < 3 or any(v not in VARIANTS for v in argv[2:]):
        sys.stderr.write(__doc__)
        return 2
    cddpc, data_dir = os.path.abspath(argv[0]), os.path.abspath(argv[1])
    torch.set_num_threads(1)
    torch.manual_seed(7)
    work = tempfile.mkdtemp(prefix="cddpc-decay-")
    small = os.path.join(work, "data")
    subprocess.check_call([sys.executable, os.path.join(HERE, "..", "runtime", "small_idx.py"), data_dir, small,
                           str(N), "100"])
    init_sd = {k: v.detach().numpy().copy() for k, v in DecayMLP().state_dict().items()}
    init = os.path.join(work, "init.st")
    st.save(init, init_sd)
    Xu8, Yu8 = find_split(small, "train")
    X, Y = normalize(Xu8, torch.float32), torch.from_numpy(np.array(Yu8)).long()
    ok = True
    for variant in argv[2:]:
        ok = check(cddpc, work, small, init, init_sd, X, Y, variant) and ok
    if ok:
        shutil.rmtree(work)
    else:
        print("decay_equiv: kept %s" % work)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
