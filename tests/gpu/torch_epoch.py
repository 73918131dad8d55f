#!/usr/bin/env python3
"""tests/gpu/torch_epoch.py DATA --mode eager|compile [--epochs N]

The PyTorch reference for tests/gpu/run.sh: one Fashion-MNIST epoch of
SimpleNet (models/mnist.net: 784-512-256-10, ReLU, cross entropy, SGD lr
0.01, batch 64, normalize (0.1307, 0.3081)) on the GPU, with the whole
training set resident on the device as one normalized tensor and the
batches gathered by a device-side permutation -- the fastest plain
PyTorch, no DataLoader. --mode compile wraps the model in
torch.compile(mode="reduce-overhead") (CUDA graphs); the first epoch
compiles (and meets the short last batch), so it is a warm-up in both
modes, and the second is timed with CUDA events.

Prints ONE line of JSON: {"mode", "epoch_ms", "wall_ms", "warmup_s",
"train_loss", "test_acc", "torch", "gpu"}; or {"na": "reason"} with exit
status 3 when torch, CUDA or torch.compile is not usable here (offline
machines often cannot run inductor's toolchain): run.sh reports n/a.
"""
import argparse
import gzip
import json
import os
import sys
import time
import traceback


def na(reason):
    print(json.dumps({"na": reason}))
    sys.exit(3)


def read_idx(data, name, offset):
    p = os.path.join(data, name)
    raw = open(p, "rb").read() if os.path.exists(p) else gzip.open(p + ".gz").read()
    return raw[offset:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--mode", choices=("eager", "compile"), default="eager")
    ap.add_argument("--epochs", type=int, default=2, help="epochs; all but the last are warm-up")
    ap.add_argument("--device", default="cuda", help="cpu: rehearse this script where there is no GPU")
    a = ap.parse_args()
    try:
        import numpy as np
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001 - any import problem means n/a
        na("cannot import torch/numpy: %s" % e)
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        na("torch %s: CUDA not available" % torch.__version__)
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    img = np.frombuffer(read_idx(a.data, "train-images-idx3-ubyte", 16), np.uint8)
    lab = np.frombuffer(read_idx(a.data, "train-labels-idx1-ubyte", 8), np.uint8)
    timg = np.frombuffer(read_idx(a.data, "t10k-images-idx3-ubyte", 16), np.uint8)
    tlab = np.frombuffer(read_idx(a.data, "t10k-labels-idx1-ubyte", 8), np.uint8)

    def norm(u8):
        return ((torch.from_numpy(u8.copy()).to(dev).float() / 255.0 - 0.1307) / 0.3081).view(-1, 784)

    X, Y = norm(img), torch.from_numpy(lab.astype(np.int64)).to(dev)
    XT, YT = norm(timg), torch.from_numpy(tlab.astype(np.int64)).to(dev)
    N = X.shape[0]
    torch.manual_seed(3407)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                          nn.Linear(256, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    fwd = model
    mark = None
    if a.mode == "compile":
        if not hasattr(torch, "compile"):
            na("torch %s has no torch.compile" % torch.__version__)
        fwd = torch.compile(model, mode="reduce-overhead")
        mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)

    def step(xb, yb):
        if mark:
            mark()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(fwd(xb), yb)
        loss.backward()
        opt.step()
        return loss.detach()

    def epoch(seed):
        g = torch.Generator(device=a.device)
        g.manual_seed(seed)
        perm = torch.randperm(N, device=dev, generator=g)
        tot = torch.zeros((), device=dev)
        for i in range(0, N, 64):
            b = perm[i:i + 64]
            tot += step(X[b], Y[b]) * b.numel()
        return tot

    try:
        t = time.perf_counter()
        for e in range(1, a.epochs):
            epoch(e)
        sync()
        warm = time.perf_counter() - t
        if cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        sync()
        t = time.perf_counter()
        if cuda:
            e0.record()
        tot = epoch(a.epochs)
        if cuda:
            e1.record()
        sync()
        wall = time.perf_counter() - t
        ms = e0.elapsed_time(e1) if cuda else 1e3 * wall
        with torch.no_grad():
            acc = (model(XT).argmax(1) == YT).float().mean().item()
    except Exception as e:  # noqa: BLE001
        if a.mode == "compile":
            tb = traceback.format_exc().strip().splitlines()
            na("torch.compile failed: %s: %s" % (type(e).__name__, tb[-1][:200]))
        raise
    print(json.dumps({"mode": a.mode, "epoch_ms": ms, "wall_ms": 1e3 * wall,
                      "warmup_s": warm, "train_loss": tot.item() / N, "test_acc": acc,
                      "torch": torch.__version__,
                      "gpu": torch.cuda.get_device_name() if cuda else "cpu"}))


if __name__ == "__main__":
    main()
