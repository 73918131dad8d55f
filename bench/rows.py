#!/usr/bin/python3
"""Benchmark: attention over an image's 28 rows (tests/torch/rows_net.net:
Linear, LayerNorm and softmax on [N, 28, F], products between activations,
an MLP on every row), a training step at batch 64, ours against PyTorch on
1 and 2 threads, measured in the same run.

usage: rows.py PROGRAM [--data DIR] [--steps N] [--repeats R] [--threads 1,2]

PROGRAM is tests/torch/rows_net.net compiled by cddpc. For each repeat and
each thread count, in turn:
  torch  the same network (tests/torch/rows_equiv.py's RowsAttn), SGD with
         momentum, mean cross-entropy, in a child process started with
         OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS = T (so
         the BLAS is pinned too, which torch.set_num_threads does not do)
         and MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ large (glibc
         keeps freed memory instead of faulting pages in every step: torch
         at its best on this machine); the training set normalized up front,
         batches of 64 by indexing; 10 warm-up steps, then N timed (each
         ending in loss.item())
  ours   PROGRAM --epochs 1 --max-steps N --threads T, OMP_NUM_THREADS and
         OPENBLAS_NUM_THREADS = T: the epoch's `seconds` over N
Prints the median step time of each and ours / torch (the issue's target:
at most 0.8 on 1 thread). The load average is printed before and after.
"""
import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from convnet import ours_step_ms  # noqa: E402  (the program's side is the ConvNet bench's)

CHILD = r"""
import sys, time
sys.path.insert(0, %(torch_dir)r)
import numpy as np, torch, torch.nn.functional as F
from rows_equiv import RowsAttn
from simplenet_ref import read_idx
T, steps = %(threads)d, %(steps)d
torch.set_num_threads(T)
X = torch.from_numpy(read_idx(%(data)r + "/train-images-idx3-ubyte.gz")).float().div(255.0).sub(0.1307).div(0.3081)
X = X.reshape(-1, 1, 28, 28)
Y = torch.from_numpy(read_idx(%(data)r + "/train-labels-idx1-ubyte.gz").astype(np.int64))
torch.manual_seed(0)
model = RowsAttn()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
perm = torch.randperm(len(Y))
def step(s):
    idx = perm[(s * 64) %% (len(Y) - 64):][:64]
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
print((time.perf_counter() - t0) / steps * 1e3)
"""


def torch_env(threads):
    return dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
                MKL_NUM_THREADS=str(threads), MALLOC_MMAP_THRESHOLD_=str(1 << 30),
                MALLOC_TRIM_THRESHOLD_=str(1 << 30))


def torch_step_ms(data, steps, threads):
    code = CHILD % {"torch_dir": os.path.join(HERE, "..", "tests", "torch"), "threads": threads, "steps": steps,
                    "data": data}
    r = subprocess.run(["/usr/bin/python3", "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=torch_env(threads))
    if r.returncode != 0:
        sys.stdout.write(r.stderr.decode("utf-8", "replace")[-3000:])
        raise RuntimeError("the PyTorch side exited with %d" % r.returncode)
    return float(r.stdout.decode().split()[-1])


def side_by_side(torch_ms, program, data, steps, repeats, threads):
    """each repeat and thread count in turn: torch_ms(data, steps, t) and
    ours (convnet.ours_step_ms); prints each run, then the medians and
    ours / torch in time (bench/lstm.py shares it)"""
    times = {(who, t): [] for who in ("torch", "ours") for t in threads}
    for r in range(repeats):
        for t in threads:
            times[("torch", t)].append(torch_ms(data, steps, t))
            times[("ours", t)].append(ours_step_ms(program, data, steps, t))
            print("  run %d, %d thread(s): torch %.2f ms, ours %.2f ms"
                  % (r + 1, t, times[("torch", t)][-1], times[("ours", t)][-1]))
            sys.stdout.flush()
    print("%-8s %14s %14s %11s" % ("threads", "torch ms/step", "ours ms/step", "ours/torch"))
    for t in threads:
        mt, mo = statistics.median(times[("torch", t)]), statistics.median(times[("ours", t)])
        print("%-8d %14.2f %14.2f %11.2f" % (t, mt, mo, mo / mt))
    print("load after: %s" % " ".join("%.2f" % x for x in os.getloadavg()))
    return 0


def main():
    ap = argparse.ArgumentParser(description="attention over rows: a training step, ours against PyTorch")
    ap.add_argument("program")
    ap.add_argument("--data", default=os.path.join(HERE, "..", "data", "fashion-mnist"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    a = ap.parse_args()
    program, data = os.path.abspath(a.program), os.path.abspath(a.data)
    threads = [int(t) for t in a.threads.split(",")]
    print("bench-rows: attention over the image's rows (rows_net), batch 64, %d steps, median of %d runs; load %s"
          % (a.steps, a.repeats, " ".join("%.2f" % x for x in os.getloadavg())))
    sys.stdout.flush()
    return side_by_side(torch_step_ms, program, data, a.steps, a.repeats, threads)


if __name__ == "__main__":
    sys.exit(main())
