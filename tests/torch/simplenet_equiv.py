#!/usr/bin/python3
"""PyTorch equivalence test for a cddpc-compiled SimpleNet program.

usage: simplenet_equiv.py PROGRAM DATA_DIR REDUCTION [--keep] [--fp64]

  PROGRAM    a program compiled from a SimpleNet model file whose loss
             reduction is REDUCTION
  DATA_DIR   directory with the 4 IDX files (train-images-idx3-ubyte.gz ...)
  REDUCTION  mean | sum | none
  --keep     keep the work directory (it is always kept on failure)
  --fp64     also run the oracle in float64 and print how far the float32
             oracle itself is from it (a diagnostic, not part of the verdict)

The test seeds torch, builds SimpleNet (fc1 784->512, fc2 512->256, fc3
256->10, ReLU) and writes its state_dict to init.safetensors; runs

  PROGRAM --data DATA_DIR --init init.safetensors --shuffle off --epochs 1
          --max-steps 200 --batch 64 --lr LR --threads 1
          --step-log steps.csv --save final.safetensors

(LR = 0.01 for mean; 0.01/64 = 0.00015625 for sum and none, where lr 0.01
diverges to inf/nan within ~30 steps in PyTorch itself), then trains the same
model in PyTorch (float32, one thread) from the same init on the same data in
file order, batches of 64 in sequence (the last one short if the set does not
divide), plain SGD with that lr, cross_entropy with REDUCTION ('none':
backward(ones), logged loss = sum). It passes when every step's loss agrees to relative 1e-3 and every
final tensor to relative L2 ||a-b||/||b|| <= 1e-3.

steps.csv: a header line naming the columns, one of which is 'loss' (the
loss of the step's forward pass, before the update: the mean over the batch
for reduction mean, the sum for sum and none); one row per step in order.
"""
import csv
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from simplenet_ref import SimpleNet, read_idx  # noqa: E402

SEED = 1337
MAX_STEPS = 200
BATCH = 64
LR = 0.01
# For reduction sum/none the gradient is BATCH times the mean's, and plain SGD
# at lr 0.01 diverges (the loss overflows to inf/nan within ~30 steps, in
# PyTorch too), so those runs use lr 0.01/BATCH: mathematically the same
# trajectory as the mean run, with the summed losses BATCH times larger.
LR_SUM = "0.00015625"  # 0.01 / 64, exact in decimal
MEAN, STD = 0.1307, 0.3081
LOSS_TOL = 1e-3
PARAM_TOL = 1e-3
RUN_TIMEOUT = 900  # seconds; generous for sanitizer builds




def find_split(data_dir, prefix):
    for ext in (".gz", ""):
        p = os.path.join(data_dir, "%s-images-idx3-ubyte%s" % (prefix, ext))
        q = os.path.join(data_dir, "%s-labels-idx1-ubyte%s" % (prefix, ext))
        if os.path.exists(p) and os.path.exists(q):
            if ext == "":
                return np.fromfile(p, np.uint8)[16:].reshape(-1, 28, 28), np.fromfile(q, np.uint8)[8:]
            return read_idx(p), read_idx(q)
    raise FileNotFoundError("no %s-images-idx3-ubyte[.gz] in %s" % (prefix, data_dir))


def normalize(img_u8, dtype):
    # what ToTensor() + Normalize((0.1307,), (0.3081,)) compute, in dtype
    x = torch.from_numpy(np.array(img_u8)).to(dtype).div(255.0)
    return x.sub(MEAN).div(STD).reshape(-1, 1, 28, 28)


def oracle(init_sd, X, Y, nsteps, reduction, dtype, lr):
    model = SimpleNet().to(dtype)
    model.load_state_dict({k: torch.from_numpy(v).to(dtype) for k, v in init_sd.items()})
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for s in range(nsteps):
        x = X[s * BATCH:(s + 1) * BATCH]
        y = Y[s * BATCH:(s + 1) * BATCH]
        opt.zero_grad()
        out = model(x)
        loss = F.cross_entropy(out, y, reduction=reduction)
        if reduction == "none":
            loss.backward(torch.ones_like(loss))
            losses.append(loss.sum().item())
        else:
            loss.backward()
            losses.append(loss.item())
        opt.step()
    return losses, {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}


def read_steplog(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r and any(c.strip() for c in r)]
    if not rows:
        raise ValueError("%s is empty" % path)
    head = [c.strip().lower() for c in rows[0]]
    if "loss" not in head:
        raise ValueError("%s: header %r has no 'loss' column" % (path, rows[0]))
    li = head.index("loss")
    return [float(r[li]) for r in rows[1:]]


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    flags = set(a for a in argv if a.startswith("--"))
    if len(args) != 3 or args[2] not in ("mean", "sum", "none") or flags - {"--keep", "--fp64"}:
        sys.stderr.write(__doc__)
        return 2
    program, data_dir, reduction = args
    program = os.path.abspath(program)
    data_dir = os.path.abspath(data_dir)
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    name = "simplenet_equiv[%s]" % reduction

    work = tempfile.mkdtemp(prefix="cddpc-equiv-%s-" % reduction)
    init_path = os.path.join(work, "init.safetensors")
    final_path = os.path.join(work, "final.safetensors")
    steps_path = os.path.join(work, "steps.csv")
    init_sd = {k: v.detach().numpy().copy() for k, v in SimpleNet().state_dict().items()}
    st.save(init_path, init_sd)

    Xu8, Yu8 = find_split(data_dir, "train")
    nsteps = min(MAX_STEPS, -(-len(Yu8) // BATCH))
    lr_arg = str(LR) if reduction == "mean" else LR_SUM
    lr = float(lr_arg)

    cmd = [program, "--data", data_dir, "--init", init_path, "--shuffle", "off", "--epochs", "1",
           "--max-steps", str(MAX_STEPS), "--batch", str(BATCH), "--lr", lr_arg, "--threads", "1",
           "--step-log", steps_path, "--save", final_path]
    print("%s: %s" % (name, " ".join(cmd)))
    sys.stdout.flush()
    failures = []
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        print("%s: FAIL: program ran past %d s (work dir %s)" % (name, RUN_TIMEOUT, work))
        return 1
    if r.returncode != 0:
        sys.stdout.write(r.stdout.decode("utf-8", "replace")[-4000:])
        print("%s: FAIL: program exited with %d (work dir %s)" % (name, r.returncode, work))
        return 1

    X = normalize(Xu8[:nsteps * BATCH], torch.float32)
    Y = torch.from_numpy(Yu8[:nsteps * BATCH].astype(np.int64))
    ref_loss, ref_sd = oracle(init_sd, X, Y, nsteps, reduction, torch.float32, lr)

    try:
        got_loss = read_steplog(steps_path)
    except (OSError, ValueError) as e:
        print("%s: FAIL: step log: %s (work dir %s)" % (name, e, work))
        return 1
    if len(got_loss) != nsteps:
        failures.append("step log has %d steps, expected %d" % (len(got_loss), nsteps))

    # ---- losses, step by step (llm.c style) ----
    worst, worst_step = 0.0, -1
    n = min(len(got_loss), nsteps)
    for s in range(n):
        d = rel(got_loss[s], ref_loss[s]) if math.isfinite(got_loss[s]) else math.inf
        show = s < 5 or (s + 1) % 25 == 0 or d > LOSS_TOL
        if show:
            print("step %3d: loss %.6f  torch %.6f  rel diff %.2e %s"
                  % (s + 1, got_loss[s], ref_loss[s], d, "OK" if d <= LOSS_TOL else "NOT OK"))
        if not d <= worst:
            worst, worst_step = d, s + 1
    print("loss: max rel diff %.3e at step %d over %d steps (tol %.0e)" % (worst, worst_step, n, LOSS_TOL))
    if worst > LOSS_TOL or not math.isfinite(worst):
        failures.append("loss rel diff %.3e at step %d" % (worst, worst_step))

    # ---- final parameters ----
    try:
        got_sd = st.load(final_path)
    except (OSError, ValueError) as e:
        got_sd = {}
        failures.append("cannot read %s: %s" % (final_path, e))
    worst_p = 0.0
    for k, ref in ref_sd.items():
        if k not in got_sd:
            if got_sd:
                failures.append("tensor %s missing from the saved file" % k)
            continue
        g = got_sd[k]
        if g.dtype != np.float32 or tuple(g.shape) != tuple(ref.shape):
            failures.append("tensor %s: %s %s, expected float32 %s" % (k, g.dtype, list(g.shape), list(ref.shape)))
            continue
        g64, r64 = g.astype(np.float64), ref.astype(np.float64)
        rl2 = np.linalg.norm(g64 - r64) / max(np.linalg.norm(r64), 1e-30)
        if not np.isfinite(rl2):
            rl2 = math.inf
        mad = float(np.max(np.abs(g64 - r64))) if g.size else 0.0
        ok = rl2 <= PARAM_TOL
        print("%-11s %-11s rel L2 %.3e  max abs diff %.3e %s"
              % (k, str(list(g.shape)), rl2, mad, "OK" if ok else "NOT OK"))
        worst_p = max(worst_p, rl2)
        if not ok:
            failures.append("tensor %s rel L2 %.3e" % (k, rl2))
    extra = sorted(set(got_sd) - set(ref_sd))
    if extra:
        failures.append("unexpected tensors in the saved file: %s" % ", ".join(extra))
    print("params: max rel L2 %.3e (tol %.0e)" % (worst_p, PARAM_TOL))

    if "--fp64" in flags:
        l64, sd64 = oracle(init_sd, normalize(Xu8[:nsteps * BATCH], torch.float64), Y, nsteps,
                           reduction, torch.float64, lr)
        d32 = max(rel(a, b) for a, b in zip(ref_loss, l64))
        dprog = max(rel(a, b) for a, b in zip(got_loss, l64)) if got_loss else math.nan
        p32 = max(np.linalg.norm(ref_sd[k] - sd64[k]) / np.linalg.norm(sd64[k]) for k in sd64)
        print("fp64 oracle: torch-f32 loss max rel %.3e, program %.3e; torch-f32 params max rel L2 %.3e"
              % (d32, dprog, p32))

    if failures:
        print("%s: FAIL (work dir kept: %s)" % (name, work))
        for f in failures:
            print("  " + f)
        return 1
    if "--keep" in flags:
        print("work dir kept: %s" % work)
    else:
        shutil.rmtree(work, ignore_errors=True)
    print("%s: OK" % name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
