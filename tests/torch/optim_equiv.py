#!/usr/bin/python3
"""PyTorch equivalence of the Adam / AdamW updates and the per-epoch
learning-rate schedules of a cddpc-compiled SimpleNet.

usage: optim_equiv.py PROGRAM DATA_DIR VARIANT

  VARIANT  adam_step     optimizer adam(lr = 0.001, weight_decay = 0.0001)
                         schedule step(step_size = 2, gamma = 0.5)
           adamw_cosine  optimizer adamw(lr = 0.002, betas = (0.85, 0.99),
                         eps = 1e-6, weight_decay = 0.05)
                         schedule cosine(T_max = 3, eta_min = 0.0001)
           (the model file PROGRAM was compiled from must say the same:
           tests/Makefile.inc makes both from models/mnist.net)

The first 640 training images (10 steps of 64), 5 epochs in file order, from
the same initial weights: the program with --init, PyTorch (float32, one
thread) with torch.optim.Adam/AdamW and StepLR/CosineAnnealingLR stepped
after every epoch. Passes when all 50 step losses agree to 1e-3 relative
and every final tensor to 1e-3 relative L2, and when the same oracle
WITHOUT the schedule does not agree with the program (the comparison can
see a wrong learning rate).
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from simplenet_equiv import find_split, normalize, read_steplog, rel  # noqa: E402
from simplenet_ref import SimpleNet  # noqa: E402

N, BATCH, EPOCHS, TOL = 640, 64, 5, 1e-3
VARIANTS = {
    "adam_step": (lambda p: torch.optim.Adam(p, lr=0.001, weight_decay=0.0001),
                  lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)),
    "adamw_cosine": (lambda p: torch.optim.AdamW(p, lr=0.002, betas=(0.85, 0.99), eps=1e-6, weight_decay=0.05),
                     lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=3, eta_min=0.0001)),
}


def oracle(init_sd, X, Y, variant, schedule):
    model = SimpleNet()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init_sd.items()})
    make_opt, make_sched = VARIANTS[variant]
    opt = make_opt(model.parameters())
    sched = make_sched(opt) if schedule else None
    losses = []
    for _ in range(EPOCHS):
        for s in range(N // BATCH):
            x, y = X[s * BATCH:(s + 1) * BATCH], Y[s * BATCH:(s + 1) * BATCH]
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            losses.append(loss.item())
            opt.step()
        if sched:
            sched.step()
    return losses, {k: v.detach().numpy() for k, v in model.state_dict().items()}


def worst(losses, params, ref_losses, ref_params):
    wl = max(rel(a, b) for a, b in zip(losses, ref_losses))
    wp = max(float(np.linalg.norm(params[k] - ref_params[k]) / max(np.linalg.norm(ref_params[k]), 1e-12))
             for k in ref_params)
    return wl, wp


def main(argv):
    if len(argv) != 3 or argv[2] not in VARIANTS:
        sys.stderr.write(__doc__)
        return 2
    program, data_dir, variant = os.path.abspath(argv[0]), os.path.abspath(argv[1]), argv[2]
    name = "optim_equiv[%s]" % variant
    torch.set_num_threads(1)
    torch.manual_seed(7)
    work = tempfile.mkdtemp(prefix="cddpc-optim-")
    small = os.path.join(work, "data")
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.check_call([sys.executable, os.path.join(here, "..", "runtime", "small_idx.py"), data_dir, small,
                           str(N), "100"])
    init_sd = {k: v.detach().numpy().copy() for k, v in SimpleNet().state_dict().items()}
    st.save(os.path.join(work, "init.st"), init_sd)
    cmd = [program, "--data", small, "--init", os.path.join(work, "init.st"), "--shuffle", "off",
           "--epochs", str(EPOCHS), "--batch", str(BATCH), "--threads", "1",
           "--step-log", os.path.join(work, "steps.csv"), "--save", os.path.join(work, "final.st")]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    if r.returncode != 0:
        print("%s: FAIL: the program exited %d:\n%s" % (name, r.returncode, r.stdout.decode()[-2000:]))
        return 1
    losses = read_steplog(os.path.join(work, "steps.csv"))
    params = st.load(os.path.join(work, "final.st"))
    Xu8, Yu8 = find_split(small, "train")
    X, Y = normalize(Xu8, torch.float32), torch.from_numpy(np.array(Yu8)).long()
    ref_losses, ref_params = oracle(init_sd, X, Y, variant, True)
    if len(losses) != len(ref_losses):
        print("%s: FAIL: %d steps, expected %d" % (name, len(losses), len(ref_losses)))
        return 1
    wl, wp = worst(losses, params, ref_losses, ref_params)
    nl, np_ = worst(losses, params, *oracle(init_sd, X, Y, variant, False))
    ok = wl <= TOL and wp <= TOL and max(nl, np_) > TOL
    print("%s: %s: %d steps over %d epochs; step loss max rel %.2e, parameters max rel L2 %.2e (<= %g); "
          "against the oracle without the schedule: %.2e, %.2e (must exceed %g)"
          % (name, "OK" if ok else "FAIL", len(losses), EPOCHS, wl, wp, TOL, nl, np_, TOL))
    if ok:
        import shutil
        shutil.rmtree(work)
    else:
        print("%s: kept %s" % (name, work))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
