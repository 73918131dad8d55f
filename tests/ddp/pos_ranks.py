#!/usr/bin/python3
"""A loss over positions under data parallelism, against PyTorch DDP.

usage: pos_ranks.py PROGRAM DATA_DIR

tests/torch/pos_net.net (a class at each of an image's 28 rows, -100 on
the blank rows: tests/torch/pos_equiv.py's targets) trained by 2 ranks of
batch 16 for 40 steps, the data in file order. PyTorch DDP's gradient is
each rank's mean over its own counted positions, averaged over the ranks;
the ranks count different numbers of positions, so this is not the mean
over the 32 rows' positions. The oracle trains the same network so (each
rank's shard as DistributedSampler(shuffle=False) cuts it: samples r, r+2,
...). Checked, each within 1e-5 relative: the final parameters; every
step's loss as logged (the sum over both ranks' counted positions over
their count); the epoch's train loss (the same over all 40 steps) and the
test loss and accuracy (over every counted test position, the test set
split between the ranks). A control must not match: the oracle with the
mean over both ranks' positions together (one process, batch 32).
Then stopped at step 20 with a checkpoint and resumed to step 40: the
same weights bit for bit and the same epoch train loss (the checkpoint
keeps the sums of the losses and of the counted positions).
Skipped (exit 77) without mpirun or a program built with MPI.
"""
import csv
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch"))
import st  # noqa: E402
from pos_equiv import IGNORE, RowTagger, row_targets  # noqa: E402
from simplenet_ref import read_idx  # noqa: E402

RANKS, BATCH, STEPS, LR, MOMENTUM = 2, 16, 40, 0.05, 0.9
MEAN, STD = 0.1307, 0.3081
TOL = 1e-5


def normalize(u8):
    return torch.from_numpy(u8.astype(np.float32) / 255.0).sub(MEAN).div(STD).reshape(-1, 1, 28, 28)


def sums(model, x, y):
    """the loss's sum over the counted positions, their count, the correct ones"""
    out = model(x).view(-1, 10)
    y = y.view(-1)
    keep = y != IGNORE
    s = F.cross_entropy(out, y, ignore_index=IGNORE, reduction="sum")
    return s, int(keep.sum()), int(((out.argmax(1) == y) & keep).sum())


def oracle(init_sd, X, Y, ddp):
    model = RowTagger()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init_sd.items()})
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    shards = [np.arange(r, len(X), RANKS) for r in range(RANKS)]
    logged, tot_s, tot_c = [], 0.0, 0
    for b in range(STEPS):
        opt.zero_grad()
        parts = [sh[b * BATCH:(b + 1) * BATCH] for sh in shards]
        ss, cs = [], []
        for idx in parts:
            s, c, _ = sums(model, X[idx], Y[idx])
            ss.append(s)
            cs.append(c)
        if ddp:     # each rank's mean over its positions, averaged over the ranks
            loss = sum(s / c for s, c in zip(ss, cs)) / RANKS
        else:       # the mean over all of the step's positions
            loss = sum(ss) / sum(cs)
        loss.backward()
        opt.step()
        step_sum = float(sum(s.item() for s in ss))
        logged.append(step_sum / sum(cs))
        tot_s += step_sum
        tot_c += sum(cs)
    return model, logged, tot_s / tot_c


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    program, data_dir = os.path.abspath(argv[0]), os.path.abspath(argv[1])
    if not shutil.which("mpirun") or b"MPI_Init_thread" not in open(program, "rb").read():
        print("SKIP: no mpirun, or the program was built without MPI")
        return 77
    torch.set_num_threads(1)
    torch.manual_seed(7)
    work = tempfile.mkdtemp(prefix="cddpc-pos-ranks-")
    n = RANKS * BATCH * STEPS
    Xu8 = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz"))[:n]
    Yl = read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz"))[:n]
    Xt = read_idx(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz"))[:501]
    Yt = row_targets(Xt, read_idx(os.path.join(data_dir, "t10k-labels-idx1-ubyte.gz"))[:501])
    Y = row_targets(Xu8, Yl)
    data = os.path.join(work, "rows.npz")
    np.savez(data, x_train=Xu8.reshape(-1, 1, 28, 28), y_train=Y, x_test=Xt.reshape(-1, 1, 28, 28), y_test=Yt)
    init_sd = {k: v.detach().numpy().copy() for k, v in RowTagger().state_dict().items()}
    init = os.path.join(work, "init.safetensors")
    st.save(init, init_sd)

    env = dict(os.environ, OMPI_MCA_btl="self,vader", OMPI_MCA_rmaps_base_oversubscribe="1",
               OMPI_MCA_hwloc_base_binding_policy="none", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpirun", "-np", str(RANKS), program, "--data", data, "--init", init, "--shuffle", "off", "--epochs", "1",
           "--batch", str(BATCH), "--max-steps", str(STEPS), "--threads", "1", "--save", os.path.join(work, "w.st"),
           "--step-log", os.path.join(work, "s.csv"), "--metrics", os.path.join(work, "m.csv")]
    print("pos_ranks: " + " ".join(cmd))
    sys.stdout.flush()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600, env=env)
    if r.returncode != 0:
        sys.stdout.write(r.stdout.decode("utf-8", "replace")[-3000:])
        print("pos_ranks: FAIL: the program exited with %d (work dir %s)" % (r.returncode, work))
        return 1
    got = st.load(os.path.join(work, "w.st"))
    steps = [float(row["loss"]) for row in read_csv(os.path.join(work, "s.csv"))]
    epoch = read_csv(os.path.join(work, "m.csv"))[-1]

    def param_err(model):
        worst = 0.0
        for k, v in model.state_dict().items():
            ref = v.detach().numpy().astype(np.float64)
            worst = max(worst, np.linalg.norm(got[k].astype(np.float64) - ref) / np.linalg.norm(ref))
        return worst

    fails = []
    model, logged, train_loss = oracle(init_sd, normalize(Xu8), torch.from_numpy(Y), ddp=True)
    pe = param_err(model)
    se = max(rel(a, b) for a, b in zip(steps, logged)) if len(steps) == len(logged) else float("inf")
    with torch.no_grad():
        ts, tc, tk = sums(model, normalize(Xt), torch.from_numpy(Yt))
    counts = [int((Y[np.arange(r, n, RANKS)][:BATCH] != IGNORE).sum()) for r in range(RANKS)]
    print("ranks' counted positions in step 1: %s" % counts)
    checks = (("final parameters", pe), ("step losses", se),
              ("epoch train loss", rel(float(epoch["train_loss"]), train_loss)),
              ("test loss", rel(float(epoch["test_loss"]), ts.item() / tc)),
              ("test accuracy", rel(float(epoch["test_acc"]), tk / tc)))
    for what, err in checks:
        print("%-18s rel err %.2e (tol %.0e)" % (what, err, TOL))
        if not err <= TOL:
            fails.append(what)
    if counts[0] == counts[1]:
        fails.append("the ranks' counts are equal: the test shows nothing")
    control, _, _ = oracle(init_sd, normalize(Xu8), torch.from_numpy(Y), ddp=False)
    ce = param_err(control)
    print("control, the mean over both ranks' positions together: params rel err %.2e (must exceed %.0e)"
          % (ce, 100 * TOL))
    if not ce > 100 * TOL:
        fails.append("the program also matches the mean over both ranks' positions")
    # stopped at step 20 with a checkpoint and resumed to 40: the same
    # bits, and the same epoch loss (the checkpoint keeps the counts' sum)
    base = cmd[:cmd.index("--max-steps")]
    r1 = subprocess.run(base + ["--max-steps", "20", "--checkpoint", os.path.join(work, "ck.st")],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600, env=env)
    r2 = subprocess.run([a for a in base if a not in ("--init", init)] +
                        ["--max-steps", str(STEPS), "--resume", os.path.join(work, "ck.st"),
                         "--save", os.path.join(work, "w2.st"), "--metrics", os.path.join(work, "m2.csv")],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600, env=env)
    same = r1.returncode == 0 and r2.returncode == 0 and \
        open(os.path.join(work, "w.st"), "rb").read() == open(os.path.join(work, "w2.st"), "rb").read()
    resumed = read_csv(os.path.join(work, "m2.csv"))[-1] if r2.returncode == 0 else {}
    print("resumed at step 20: weights %s, epoch train loss %s vs %s" % (
        "bitwise equal" if same else "DIFFER", resumed.get("train_loss"), epoch["train_loss"]))
    if not same or resumed.get("train_loss") != epoch["train_loss"]:
        sys.stdout.write((r1.stdout + r2.stdout).decode("utf-8", "replace")[-2000:])
        fails.append("the run resumed at step 20 differs from the uninterrupted one")
    if fails:
        print("pos_ranks: FAIL: %s (work dir %s)" % ("; ".join(fails), work))
        return 1
    shutil.rmtree(work)
    print("pos_ranks: PASS: 2 ranks train as PyTorch DDP does, with exact loss and accuracy over the counted positions")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
