#!/usr/bin/python3
"""Benchmark: the notes' ConvNet, a training step at batch 64, ours against
PyTorch on 1 and 2 threads, measured in the same run.

usage: convnet.py PROGRAM [--data DIR] [--steps N] [--repeats R]
                  [--threads 1,2] [--csv FILE]

PROGRAM is models/mnist_convnet.net compiled by cddpc. For each repeat and
each thread count, in turn:
  torch  the same network (tests/torch/convnet_equiv.py's ConvNet), SGD,
         mean cross-entropy; the training set normalized up front in one
         float32 tensor, batches of 64 by indexing with a permutation;
         10 warm-up steps, then N steps timed (each ending in loss.item())
         with torch.set_num_threads(T) (and OMP_NUM_THREADS=T set before
         torch loads)
  ours   PROGRAM --epochs 1 --max-steps N --threads T, with OMP_NUM_THREADS
         and OPENBLAS_NUM_THREADS = T: the epoch's `seconds` (the training
         loop only, its first step included) over N
Prints the median step time of each, and ours / torch (the target is at
most 0.8). The machine's load average is printed before and after: other
processes on the cores inflate both sides, not necessarily equally.
"""
import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# the thread count torch starts with; set_num_threads changes it per run
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "torch"))
from convnet_equiv import ConvNet  # noqa: E402
from simplenet_ref import read_idx  # noqa: E402

BATCH, LR, MEAN, STD = 64, 0.03, 0.1307, 0.3081


def torch_step_ms(X, Y, steps, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = ConvNet()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    perm = torch.randperm(len(Y))

    def step(s):
        idx = perm[(s * BATCH) % (len(Y) - BATCH):][:BATCH]
        opt.zero_grad()
        loss = F.cross_entropy(model(X[idx]), Y[idx])
        loss.backward()
        opt.step()
        return loss.item()

    for s in range(10):
        step(s)
    t0 = time.perf_counter()
    for s in range(steps):
        step(10 + s)
    return (time.perf_counter() - t0) / steps * 1e3


def ours_step_ms(program, data, steps, threads):
    work = tempfile.mkdtemp(prefix="cddpc-bench-")
    try:
        metrics = os.path.join(work, "m.csv")
        cmd = [program, "--data", data, "--epochs", "1", "--max-steps", str(steps), "--threads", str(threads),
               "--metrics", metrics]
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        if r.returncode != 0:
            sys.stdout.write(r.stdout.decode("utf-8", "replace")[-4000:])
            raise RuntimeError("%s exited with %d" % (" ".join(cmd), r.returncode))
        with open(metrics, newline="") as f:
            rows = list(csv.DictReader(f))
        return float(rows[-1]["seconds"]) / steps * 1e3
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description="ConvNet training step: ours against PyTorch")
    ap.add_argument("program")
    ap.add_argument("--data", default=os.path.join(HERE, "..", "data", "fashion-mnist"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--csv", help="also write the table here")
    a = ap.parse_args()
    program, data = os.path.abspath(a.program), os.path.abspath(a.data)
    threads = [int(t) for t in a.threads.split(",")]
    if not os.access(program, os.X_OK):
        sys.exit("convnet.py: %s is not an executable" % program)
    images = read_idx(os.path.join(data, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data, "train-labels-idx1-ubyte.gz"))
    X = torch.from_numpy(images).float().div(255.0).sub(MEAN).div(STD).reshape(-1, 1, 28, 28)
    Y = torch.from_numpy(labels.astype(np.int64))

    print("bench-convnet: the notes' ConvNet, batch %d, %d steps, median of %d runs, torch %s; load %s"
          % (BATCH, a.steps, a.repeats, torch.__version__, " ".join("%.2f" % x for x in os.getloadavg())))
    sys.stdout.flush()
    times = {(who, t): [] for who in ("torch", "ours") for t in threads}
    for r in range(a.repeats):
        for t in threads:
            times[("torch", t)].append(torch_step_ms(X, Y, a.steps, t))
            times[("ours", t)].append(ours_step_ms(program, data, a.steps, t))
            print("  run %d, %d thread(s): torch %.2f ms, ours %.2f ms"
                  % (r + 1, t, times[("torch", t)][-1], times[("ours", t)][-1]))
            sys.stdout.flush()
    print("%-8s %14s %14s %11s   (runs, ms: torch | ours)" % ("threads", "torch ms/step", "ours ms/step", "ours/torch"))
    rows = []
    for t in threads:
        mt, mo = statistics.median(times[("torch", t)]), statistics.median(times[("ours", t)])
        rows.append((t, mt, mo, mo / mt))
        print("%-8d %14.2f %14.2f %11.2f   (%s | %s)" % (t, mt, mo, mo / mt,
                                                       " ".join("%.1f" % x for x in times[("torch", t)]),
                                                       " ".join("%.1f" % x for x in times[("ours", t)])))
    print("load after: %s" % " ".join("%.2f" % x for x in os.getloadavg()))
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("threads,torch_ms_per_step,ours_ms_per_step,ratio\n")
            for r in rows:
                f.write("%d,%.4f,%.4f,%.4f\n" % r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
