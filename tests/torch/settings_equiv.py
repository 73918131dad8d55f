#!/usr/bin/python3
"""PyTorch equivalence of the train block's settings: RMSprop, Adam/AdamW
with amsgrad, clip_grad_norm, accumulate and the learning-rate schedules.

usage: settings_equiv.py CDDPC DATA_DIR GROUP

  GROUP  optim       rmsprop (plain, momentum, centered with weight decay),
                     adam and adamw with amsgrad = true, adagrad (PyTorch's
                     spelling; lr_decay, weight_decay,
                     initial_accumulator_value, eps)
         clip        clip_grad_norm 0.5 with SGD momentum, 120 steps
         accumulate  accumulate 4 x batch 16 against batch 64 (the two
                     programs within 1e-5), and against a torch loop that
                     accumulates, on a cut whose last group is short
         schedules   multistep, exponential, warmup_cosine, onecycle (two
                     ways, and with accumulate 2): the step log's lr column
                     against torch's scheduler, and the training with it

For each variant a SimpleNet model file is written with the variant's
train block, compiled with CDDPC and run from the same initial weights as
PyTorch (float32, one thread), in file order (shuffle off) on the first N
training images. A variant passes when every step loss agrees to 1e-3
relative and every final tensor to 1e-3 relative L2 (the other torch
tests' bounds), and -- so the comparison can fail -- when the same oracle
WITHOUT the setting does not agree with the program. The step log's rows
are optimizer steps: with accumulate, a row's loss is the mean over the
group's samples, which is what the torch loop here records.
"""
import csv
import math
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from simplenet_equiv import find_split, normalize, rel  # noqa: E402
from simplenet_ref import SimpleNet  # noqa: E402

TOL = 1e-3
HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = open(os.path.join(HERE, "optim_adamw_cosine.net")).read().split("train {")[0]

O = torch.optim
S = torch.optim.lr_scheduler


def sgd(p):
    return O.SGD(p, lr=0.05, momentum=0.9)


# name: (train block lines, torch optimizer, contrast optimizer, options)
# options: clip, acc, batch, epochs, n, sched (make, per_step), contrast_opts
OPTIM = {
    "rmsprop": ("optimizer rmsprop(lr = 0.0005)",
                lambda p: O.RMSprop(p, lr=0.0005), lambda p: O.RMSprop(p, lr=0.0005, alpha=0.9), {}),
    "rmsprop_momentum": ("optimizer rmsprop(lr = 0.0002, alpha = 0.95, momentum = 0.8)",
                         lambda p: O.RMSprop(p, lr=0.0002, alpha=0.95, momentum=0.8),
                         lambda p: O.RMSprop(p, lr=0.0002, alpha=0.95), {}),
    "rmsprop_centered": ("optimizer rmsprop(lr = 0.0002, eps = 1e-6, weight_decay = 0.01, momentum = 0.5, "
                         "centered = true)",
                         lambda p: O.RMSprop(p, lr=0.0002, eps=1e-6, weight_decay=0.01, momentum=0.5, centered=True),
                         lambda p: O.RMSprop(p, lr=0.0002, eps=1e-6, weight_decay=0.01, momentum=0.5), {}),
    "adam_amsgrad": ("optimizer adam(lr = 0.001, betas = (0.9, 0.9), weight_decay = 0.0001, amsgrad = true)",
                     lambda p: O.Adam(p, lr=0.001, betas=(0.9, 0.9), weight_decay=0.0001, amsgrad=True),
                     lambda p: O.Adam(p, lr=0.001, betas=(0.9, 0.9), weight_decay=0.0001), {}),
    "adamw_amsgrad": ("optimizer adamw(lr = 0.002, betas = (0.8, 0.95), weight_decay = 0.05, amsgrad = true)",
                      lambda p: O.AdamW(p, lr=0.002, betas=(0.8, 0.95), weight_decay=0.05, amsgrad=True),
                      lambda p: O.AdamW(p, lr=0.002, betas=(0.8, 0.95), weight_decay=0.05), {}),
    "adagrad": ("optimizer torch.optim.Adagrad(model.parameters(), lr = 0.01)",
                lambda p: O.Adagrad(p, lr=0.01), lambda p: O.Adagrad(p, lr=0.01, lr_decay=0.05), {}),
    "adagrad_all": ("optimizer adagrad(lr = 0.02, lr_decay = 0.01, weight_decay = 0.001, "
                    "initial_accumulator_value = 0.1, eps = 1e-8)",
                    lambda p: O.Adagrad(p, lr=0.02, lr_decay=0.01, weight_decay=0.001, initial_accumulator_value=0.1,
                                        eps=1e-8),
                    lambda p: O.Adagrad(p, lr=0.02, lr_decay=0.01, weight_decay=0.001, eps=1e-8), {}),
}
CLIP = {
    "clip": ("optimizer sgd(lr = 0.02, momentum = 0.5)\n    clip_grad_norm 0.5",
             lambda p: O.SGD(p, lr=0.02, momentum=0.5), lambda p: O.SGD(p, lr=0.02, momentum=0.5),
             {"clip": 0.5, "epochs": 12}),
}
ACCUMULATE = {
    # a cut of 600: 38 batches of 16, the last of 8; groups of 4, the last of 2
    "accumulate": ("optimizer sgd(lr = 0.05, momentum = 0.9)\n    accumulate 4\n    batch 16", sgd, sgd,
                   {"acc": 4, "batch": 16, "n": 600}),
}


def sched_variant(block, make, per_step, extra=None):
    opts = {"sched": (make, per_step), "epochs": 3}
    opts.update(extra or {})
    return ("optimizer sgd(lr = 0.05)\n    schedule " + block, lambda p: O.SGD(p, lr=0.05),
            lambda p: O.SGD(p, lr=0.05), opts)


SCHEDULES = {
    "multistep": sched_variant("multistep(milestones = (1, 2), gamma = 0.5)",
                               lambda o: S.MultiStepLR(o, milestones=[1, 2], gamma=0.5), False),
    "exponential": sched_variant("exponential(gamma = 0.7)", lambda o: S.ExponentialLR(o, gamma=0.7), False),
    "warmup_cosine": sched_variant(
        "warmup_cosine(warmup_steps = 8, start_factor = 0.1, eta_min = 0.001)",
        lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.1, total_iters=8),
                                     S.CosineAnnealingLR(o, T_max=30 - 8, eta_min=0.001)], milestones=[8]), True),
    "onecycle": sched_variant("onecycle(max_lr = 0.05)",
                              lambda o: S.OneCycleLR(o, max_lr=0.05, total_steps=30, cycle_momentum=False), True),
    "onecycle_linear3": sched_variant(
        "onecycle(max_lr = 0.08, total_steps = 40, pct_start = 0.25, anneal_strategy = linear, div_factor = 10, "
        "final_div_factor = 100, three_phase = true)",
        lambda o: S.OneCycleLR(o, max_lr=0.08, total_steps=40, pct_start=0.25, anneal_strategy="linear",
                               div_factor=10, final_div_factor=100, three_phase=True, cycle_momentum=False), True),
    # optimizer steps, not batches: 5 a epoch
    "onecycle_accumulate": sched_variant(
        "onecycle(max_lr = 0.05, epochs = 3, steps_per_epoch = 5)\n    accumulate 2",
        lambda o: S.OneCycleLR(o, max_lr=0.05, epochs=3, steps_per_epoch=5, cycle_momentum=False), True,
        {"acc": 2}),
}
GROUPS = {"optim": OPTIM, "clip": CLIP, "accumulate": ACCUMULATE, "schedules": SCHEDULES}


def oracle(init_sd, X, Y, make_opt, opts, use_setting=True):
    """The torch loop: (loss / acc).backward() per batch; at each group's
    last batch (or the epoch's last) clip, record the lr, step, and step a
    per-step scheduler; a per-epoch scheduler after the epoch."""
    model = SimpleNet()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init_sd.items()})
    opt = make_opt(model.parameters())
    sched = opts.get("sched") if use_setting else None
    sch = sched[0](opt) if sched else None
    clip = opts.get("clip") if use_setting else None
    acc = opts.get("acc", 1)
    # the contrast of accumulate: the micro-batch losses not divided by N
    div = acc if use_setting or "clip" in opts or "sched" in opts else 1
    batch, n = opts.get("batch", 64), opts.get("n", 640)
    nb = (n + batch - 1) // batch
    losses, lrs, norms = [], [], []
    for _ in range(opts.get("epochs", 2)):
        opt.zero_grad()
        tot = rows = 0.0
        for i in range(nb):
            x, y = X[i * batch:(i + 1) * batch], Y[i * batch:(i + 1) * batch]
            loss = F.cross_entropy(model(x), y)
            (loss / div).backward()
            tot += loss.item() * len(y)
            rows += len(y)
            if (i + 1) % acc == 0 or i + 1 == nb:
                if clip:
                    norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip)))
                lrs.append(opt.param_groups[0]["lr"])
                opt.step()
                opt.zero_grad()
                if sch and sched[1]:
                    sch.step()
                losses.append(tot / rows)
                tot = rows = 0.0
        if sch and not sched[1]:
            sch.step()
    return losses, lrs, norms, {k: v.detach().numpy() for k, v in model.state_dict().items()}


def read_log(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [float(r["loss"]) for r in rows], [float(r["lr"]) for r in rows]


def worst(losses, params, ref_losses, ref_params):
    if len(losses) != len(ref_losses):
        return math.inf, math.inf
    wl = max(rel(a, b) for a, b in zip(losses, ref_losses))
    wp = max(float(np.linalg.norm(params[k] - ref_params[k]) / max(np.linalg.norm(ref_params[k]), 1e-12))
             for k in ref_params)
    return wl, wp


class Run:
    def __init__(self, cddpc, data_dir, work, init):
        self.cddpc, self.data_dir, self.work, self.init = cddpc, data_dir, work, init
        self.cuts = {}

    def cut(self, n):
        if n not in self.cuts:
            d = os.path.join(self.work, "data%d" % n)
            subprocess.check_call([sys.executable, os.path.join(HERE, "..", "runtime", "small_idx.py"),
                                   self.data_dir, d, str(n), "100"])
            Xu8, Yu8 = find_split(d, "train")
            self.cuts[n] = (d, normalize(Xu8, torch.float32), torch.from_numpy(np.array(Yu8)).long())
        return self.cuts[n]

    def program(self, name, block, opts):
        """compiles the variant; returns (step losses, lrs, final tensors) or an error text"""
        net = os.path.join(self.work, name + ".net")
        lines = ["model SimpleNet", 'data mnist("data/mnist", normalize = (0.1307, 0.3081))',
                 "loss cross_entropy(reduction = mean)"] + block.split("\n    ")
        if not any(s.startswith("batch") for s in lines):
            lines.append("batch 64")
        with open(net, "w") as f:
            f.write(MODEL + "train {\n" + "".join("    %s\n" % s.strip() for s in lines) + "}\n")
        exe = os.path.join(self.work, name)
        r = subprocess.run([self.cddpc, net, "-o", exe], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            return "cddpc failed:\n" + r.stdout.decode()[-2000:]
        d = self.cut(opts.get("n", 640))[0]
        log, fin = os.path.join(self.work, name + ".csv"), os.path.join(self.work, name + ".st")
        r = subprocess.run([exe, "--data", d, "--init", self.init, "--shuffle", "off", "--threads", "1",
                            "--epochs", str(opts.get("epochs", 2)), "--step-log", log, "--save", fin],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
        if r.returncode != 0:
            return "the program exited %d:\n%s" % (r.returncode, r.stdout.decode()[-2000:])
        losses, lrs = read_log(log)
        return losses, lrs, st.load(fin)


def check(run, init_sd, name, variant):
    block, make_opt, contrast_opt, opts = variant
    got = run.program(name, block, opts)
    if isinstance(got, str):
        return False, "%s: FAIL: %s" % (name, got)
    losses, lrs, params = got
    _, X, Y = run.cut(opts.get("n", 640))
    ref_losses, ref_lrs, norms, ref_params = oracle(init_sd, X, Y, make_opt, opts)
    wl, wp = worst(losses, params, ref_losses, ref_params)
    c_losses, _, _, c_params = oracle(init_sd, X, Y, contrast_opt, opts, use_setting=False)
    cl, cp = worst(losses, params, c_losses, c_params)
    wlr = max((rel(a, b) for a, b in zip(lrs, ref_lrs)), default=math.inf) if len(lrs) == len(ref_lrs) \
        else math.inf
    ok = wl <= TOL and wp <= TOL and max(cl, cp) > TOL and wlr <= 1e-6
    extra = ""
    if opts.get("clip"):
        clipped = sum(1 for x in norms if x > opts["clip"])
        ok = ok and clipped * 2 >= len(norms)
        extra = "; clipped %d of %d steps (torch's norms %.3g..%.3g)" % (clipped, len(norms), min(norms),
                                                                           max(norms))
    if opts.get("sched"):
        extra += "; lr max rel %.1e (<= 1e-6) over %d steps, %.4g..%.4g" % (wlr, len(lrs), min(ref_lrs),
                                                                           max(ref_lrs))
    return ok, ("%s: %s: %d steps; step loss max rel %.2e, parameters max rel L2 %.2e (<= %g); without the "
                "setting: %.2e, %.2e (must exceed %g)%s" % (name, "OK" if ok else "FAIL", len(losses), wl, wp, TOL,
                                                            cl, cp, TOL, extra))


def accumulate_vs_batch(run):
    """accumulate 4 x batch 16 against batch 64 on 640 images (10 whole groups an epoch)"""
    opts = {"epochs": 3}
    a = run.program("acc4x16", "optimizer sgd(lr = 0.05, momentum = 0.9)\n    accumulate 4\n    batch 16", opts)
    b = run.program("batch64", "optimizer sgd(lr = 0.05, momentum = 0.9)\n    batch 64", opts)
    if isinstance(a, str) or isinstance(b, str):
        return False, "accumulate_vs_batch: FAIL: %s" % (a if isinstance(a, str) else b)
    wl, wp = worst(a[0], a[2], b[0], b[2])
    ok = wl <= 1e-5 and wp <= 1e-5 and len(a[0]) == 30
    return ok, ("accumulate_vs_batch: %s: 4 x batch 16 against batch 64, %d optimizer steps: step loss max rel "
                "%.2e, parameters max rel L2 %.2e (<= 1e-5)" % ("OK" if ok else "FAIL", len(a[0]), wl, wp))


def main(argv):
    if len(argv) != 3 or argv[2] not in GROUPS:
        sys.stderr.write(__doc__)
        return 2
    cddpc, data_dir, group = os.path.abspath(argv[0]), os.path.abspath(argv[1]), argv[2]
    torch.set_num_threads(1)
    torch.manual_seed(7)
    # SequentialLR steps its second scheduler with an epoch: torch warns about it
    warnings.filterwarnings("ignore", category=UserWarning, module="torch.optim.lr_scheduler")
    work = tempfile.mkdtemp(prefix="cddpc-settings-")
    init_sd = {k: v.detach().numpy().copy() for k, v in SimpleNet().state_dict().items()}
    init = os.path.join(work, "init.st")
    st.save(init, init_sd)
    run = Run(cddpc, data_dir, work, init)
    results = [check(run, init_sd, name, v) for name, v in GROUPS[group].items()]
    if group == "accumulate":
        results.append(accumulate_vs_batch(run))
    for _, line in results:
        print("settings_equiv[%s] %s" % (group, line))
    ok = all(r[0] for r in results)
    if ok:
        shutil.rmtree(work)
    else:
        print("settings_equiv[%s]: kept %s" % (group, work))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
