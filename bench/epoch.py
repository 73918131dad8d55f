#!/usr/bin/python3
"""Benchmark: one training epoch of SimpleNet on Fashion-MNIST, one thread.

usage: epoch.py PROGRAM [--data DIR] [--quick] [--threads N] [--csv FILE]

Times, in this one invocation:
  (a) torch-tensor   PyTorch, the whole training set normalized up front in
                     one float32 tensor, batches taken by indexing with a
                     per-epoch permutation (SGD lr 0.01, batch 64, mean CE)
  (b) torch-loader   the notes' program: a Dataset that hands out PIL images
                     (as torchvision's FashionMNIST does) through
                     Compose([ToTensor(), Normalize((0.1307,), (0.3081,))]),
                     DataLoader(batch_size=64, shuffle=True, num_workers=0),
                     the notes' loop with running_loss += loss.item()
  (c) ours           PROGRAM --data DIR --epochs 1 --threads N --metrics m.csv,
                     epoch time read from the CSV's `seconds` column
Only the epoch's training loop is timed (no set-up, no evaluation).

--quick uses the first 10,000 training images (and the first 1,000 test
images, for our program's evaluation) instead of all 60,000.
"""
import argparse
import csv
import gzip
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image
from torchvision import transforms

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "torch"))
from simplenet_ref import SimpleNet, read_idx  # noqa: E402

BATCH = 64
LR = 0.01
MEAN, STD = 0.1307, 0.3081
QUICK_TRAIN, QUICK_TEST = 10000, 1000
FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
         "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")




def write_idx(path, arr):
    arr = np.ascontiguousarray(arr, dtype=np.uint8)
    with gzip.GzipFile(path, "wb", mtime=0, compresslevel=1) as f:
        f.write(struct.pack(">BBBB", 0, 0, 8, arr.ndim))
        f.write(struct.pack(">" + "I" * arr.ndim, *arr.shape))
        f.write(arr.tobytes())


class IdxFashionMNIST(torch.utils.data.Dataset):
    """What torchvision.datasets.FashionMNIST does per item, from arrays
    already in memory (it cannot download here)."""

    def __init__(self, images, labels, transform):
        self.data = torch.from_numpy(images)
        self.targets = torch.from_numpy(labels.astype(np.int64))
        self.transform = transform

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        img, target = self.data[i], int(self.targets[i])
        img = Image.fromarray(img.numpy(), mode="L")
        if self.transform is not None:
            img = self.transform(img)
        return img, target


def bench_tensor(images, labels):
    torch.manual_seed(0)
    X = torch.from_numpy(images).float().div(255.0).sub(MEAN).div(STD).reshape(-1, 1, 28, 28)
    Y = torch.from_numpy(labels.astype(np.int64))
    model = SimpleNet()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    n = len(Y)
    t0 = time.perf_counter()
    perm = torch.randperm(n)
    total = 0.0
    for s in range(0, n, BATCH):
        idx = perm[s:s + BATCH]
        opt.zero_grad()
        loss = F.cross_entropy(model(X[idx]), Y[idx])
        loss.backward()
        opt.step()
        total += loss.item()
    return time.perf_counter() - t0, total / -(-n // BATCH)


def bench_loader(images, labels):
    torch.manual_seed(0)
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((MEAN,), (STD,))])
    train_set = IdxFashionMNIST(images, labels, transform)
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=BATCH, shuffle=True, num_workers=0)
    model = SimpleNet()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    t0 = time.perf_counter()
    running_loss = 0.0
    for images_b, labels_b in train_loader:
        optimizer.zero_grad()
        outputs = model(images_b)
        loss = criterion(outputs, labels_b)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
    return time.perf_counter() - t0, running_loss / len(train_loader)


def bench_ours(program, data_dir, threads):
    work = tempfile.mkdtemp(prefix="cddpc-bench-")
    try:
        metrics = os.path.join(work, "m.csv")
        cmd = [program, "--data", data_dir, "--epochs", "1", "--threads", str(threads), "--metrics", metrics]
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
        t0 = time.perf_counter()
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            sys.stdout.write(r.stdout.decode("utf-8", "replace")[-4000:])
            raise RuntimeError("%s exited with %d" % (" ".join(cmd), r.returncode))
        with open(metrics, newline="") as f:
            rows = [{(k or "").strip().lower(): (v or "").strip() for k, v in row.items()}
                    for row in csv.DictReader(f)]
        if not rows or "seconds" not in rows[-1]:
            raise RuntimeError("%s: no `seconds` column" % metrics)
        last = rows[-1]
        loss = float(last["train_loss"]) if last.get("train_loss") else float("nan")
        return float(last["seconds"]), loss, wall
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description="one-epoch training benchmark")
    ap.add_argument("program")
    ap.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "..", "data", "fashion-mnist"))
    ap.add_argument("--quick", action="store_true", help="first %d training images only" % QUICK_TRAIN)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--csv", help="also write the table here")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    program = os.path.abspath(a.program)
    data_dir = os.path.abspath(a.data)

    images = read_idx(os.path.join(data_dir, FILES[0]))
    labels = read_idx(os.path.join(data_dir, FILES[1]))
    tmp_data = None
    if a.quick:
        images, labels = images[:QUICK_TRAIN], labels[:QUICK_TRAIN]
        tmp_data = tempfile.mkdtemp(prefix="cddpc-bench-data-")
        write_idx(os.path.join(tmp_data, FILES[0]), images)
        write_idx(os.path.join(tmp_data, FILES[1]), labels)
        write_idx(os.path.join(tmp_data, FILES[2]), read_idx(os.path.join(data_dir, FILES[2]))[:QUICK_TEST])
        write_idx(os.path.join(tmp_data, FILES[3]), read_idx(os.path.join(data_dir, FILES[3]))[:QUICK_TEST])
        data_dir = tmp_data
    n = len(labels)
    print("bench: SimpleNet 784-512-256-10, %d training images, batch %d, SGD lr %g, %d thread(s), torch %s"
          % (n, BATCH, LR, a.threads, torch.__version__))
    sys.stdout.flush()

    results = []
    try:
        sec, loss = bench_tensor(images, labels)
        results.append(("torch-tensor (a)", sec, loss))
        print("  (a) torch-tensor  %.2f s" % sec)
        sys.stdout.flush()
        sec, loss = bench_loader(images, labels)
        results.append(("torch-loader (b)", sec, loss))
        print("  (b) torch-loader  %.2f s" % sec)
        sys.stdout.flush()
        sec, loss, wall = bench_ours(program, data_dir, a.threads)
        results.append(("ours (c)", sec, loss))
        print("  (c) ours          %.2f s (process wall %.2f s)" % (sec, wall))
    finally:
        if tmp_data:
            shutil.rmtree(tmp_data, ignore_errors=True)

    ta, tb = results[0][1], results[1][1]
    print()
    print("%-18s %10s %10s %11s %8s %8s" % ("name", "epoch s", "images/s", "train loss", "/ (a)", "/ (b)"))
    for name, sec, loss in results:
        print("%-18s %10.3f %10.0f %11.4f %8.3f %8.3f" % (name, sec, n / sec, loss, sec / ta, sec / tb))
    ours = results[2][1]
    print()
    print("ours: %.2fx the speed of (a), %.2fx the speed of (b)" % (ta / ours, tb / ours))
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("name,epoch_seconds,images_per_s,train_loss,ratio_a,ratio_b\n")
            for name, sec, loss in results:
                f.write("%s,%.6f,%.1f,%.6f,%.4f,%.4f\n" % (name.split()[0], sec, n / sec, loss, sec / ta, sec / tb))
    return 0


if __name__ == "__main__":
    sys.exit(main())
