#!/usr/bin/python3
"""Benchmark: Fashion-MNIST read as sequences (models/lstm_rows.net: each
image's 28 rows are 28 steps of 28 features through nn.LSTM(28, 128,
num_layers=2, batch_first=True), Linear(128, 10) on the last step's
output), a training step at batch 64 with Adam (lr 0.002) and gradient
clipping 1.0, ours against PyTorch eager with the same model, batch and
threads, measured in the same run.

usage: lstm.py PROGRAM [--data DIR] [--steps N] [--repeats R] [--threads 1,2]

PROGRAM is models/lstm_rows.net compiled by cddpc. For each repeat and
each thread count, in turn:
  torch  the same network (nn.LSTM(28, 128, 2, batch_first=True), fc on
         out[:, -1, :]), F.cross_entropy, Adam(lr=2e-3),
         clip_grad_norm_(1.0); the real training images (read by
         tests/torch/simplenet_ref.py's read_idx) normalized up front as the
         model file says ((x / 255 - 0.2860) / 0.3530), batches of 64 by
         indexing with a permutation; a child started with
         OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS = T and
         glibc keeping freed memory (MALLOC_MMAP_THRESHOLD_,
         MALLOC_TRIM_THRESHOLD_): PyTorch at its best here (bench/rows.py's
         torch_env); 10 warm-up steps, then N timed (each ending in
         loss.item()). PyTorch's CPU LSTM computes each layer's input
         product for all 28 steps in one GEMM up front, leaving one
         [64, 128] x [128, 512] product per step and layer, as ours does.
  ours   PROGRAM --epochs 1 --max-steps N --threads T, OMP_NUM_THREADS and
         OPENBLAS_NUM_THREADS = T: the epoch's `seconds` (the training loop
         only, its first step included; the test pass after it is not
         counted) over N
Prints the median step time of each and ours / torch in time (the issue's
target: at most 1.0 on 1 thread at batch 64). The load average is printed
before and after.
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from rows import side_by_side, torch_env  # noqa: E402

F_IN, HID, LAYERS, STEPS_T, BATCH, CLASSES = 28, 128, 2, 28, 64, 10
MEAN, STD = 0.2860, 0.3530

CHILD = r"""
import sys, time
sys.path.insert(0, %(torch_dir)r)
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from simplenet_ref import read_idx
T, steps, B = %(threads)d, %(steps)d, %(batch)d
torch.set_num_threads(T)
X = torch.from_numpy(read_idx(%(data)r + "/train-images-idx3-ubyte.gz")).float().div(255.0)
X = X.sub(%(mean)r).div(%(std)r).reshape(-1, 1, 28, 28)
Y = torch.from_numpy(read_idx(%(data)r + "/train-labels-idx1-ubyte.gz").astype(np.int64))

class RowLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(%(f_in)d, %(hid)d, num_layers=%(layers)d, batch_first=True)
        self.fc = nn.Linear(%(hid)d, %(classes)d)
    def forward(self, x):
        out, (h_n, c_n) = self.lstm(x.view(x.size(0), 28, 28))
        return self.fc(out[:, -1, :])

torch.manual_seed(7)
model = RowLSTM()
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
perm = torch.randperm(len(Y))
def step(s):
    idx = perm[(s * B) %% (len(Y) - B):][:B]
    opt.zero_grad()
    loss = F.cross_entropy(model(X[idx]), Y[idx])
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item()
for s in range(10):
    step(s)
t0 = time.perf_counter()
for s in range(steps):
    step(10 + s)
print((time.perf_counter() - t0) / steps * 1e3)
"""


def torch_step_ms(data, steps, threads):
    code = CHILD % {"torch_dir": os.path.join(HERE, "..", "tests", "torch"), "threads": threads, "steps": steps,
                    "batch": BATCH, "data": data, "mean": MEAN, "std": STD, "f_in": F_IN, "hid": HID,
                    "layers": LAYERS, "classes": CLASSES}
    r = subprocess.run(["/usr/bin/python3", "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=torch_env(threads))
    if r.returncode != 0:
        sys.stdout.write(r.stderr.decode("utf-8", "replace")[-3000:])
        raise RuntimeError("the PyTorch side exited with %d" % r.returncode)
    return float(r.stdout.decode().split()[-1])


def step_flops():
    """the products' FLOPs a step: per layer and time step, the input and
    hidden products (2 N 4H (F + H) forward, twice that backward), the head
    once; the gates' elementwise work left out"""
    per_t = sum(2 * BATCH * 4 * HID * ((F_IN if l == 0 else HID) + HID) for l in range(LAYERS))
    return 3 * (per_t * STEPS_T + 2 * BATCH * HID * CLASSES)


def main():
    ap = argparse.ArgumentParser(description="a 2-layer LSTM over image rows: a training step, ours against PyTorch")
    ap.add_argument("program")
    ap.add_argument("--data", default=os.path.join(HERE, "..", "data", "fashion-mnist"))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    a = ap.parse_args()
    program, data = os.path.abspath(a.program), os.path.abspath(a.data)
    threads = [int(t) for t in a.threads.split(",")]
    if not os.access(program, os.X_OK):
        sys.exit("lstm.py: %s is not an executable" % program)
    print("bench-lstm: Fashion-MNIST rows through a %d-layer LSTM (%d hidden) + Linear, Adam, clipping 1.0, "
          "batch %d, %d steps, median of %d runs; %.3f GFLOP a step in products; load %s"
          % (LAYERS, HID, BATCH, a.steps, a.repeats, step_flops() / 1e9,
             " ".join("%.2f" % x for x in os.getloadavg())))
    sys.stdout.flush()
    return side_by_side(torch_step_ms, program, data, a.steps, a.repeats, threads)


if __name__ == "__main__":
    sys.exit(main())
