#!/usr/bin/python3
"""syncbn_eval.py WEIGHTS METRICS DATA_DIR: the evaluation of a multi-rank
run is the evaluation of rank 0's model.

WEIGHTS is what rank 0 saved (--save) from tests/ddp/syncbn.net, METRICS
the run's --metrics CSV. PyTorch evaluates the same network, in eval mode
(running statistics), from WEIGHTS over the whole test set; its test loss
and accuracy must be the run's to 1e-5 relative (the run's ranks evaluate
blocks of the test set, each with the buffers it holds: rank 0's only if
they were broadcast, as DDP's broadcast_buffers does).
"""
import csv
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))
import st  # noqa: E402
from simplenet_equiv import find_split  # noqa: E402

MEAN, STD = 0.2860, 0.3530      # tests/ddp/syncbn.net's normalize


def net():
    block = lambda i, o, pool: nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(), pool)
    m = nn.Module()
    m.block1 = block(1, 4, nn.MaxPool2d(2))
    m.block2 = block(4, 8, nn.AvgPool2d(2))
    m.fc0 = nn.Linear(392, 16)
    m.bn = nn.BatchNorm1d(16)
    m.fc = nn.Linear(16, 10)
    return m


def main(weights, metrics, data):
    m = net()
    sd = {k: torch.from_numpy(np.array(v)) for k, v in st.load(weights).items()}
    m.load_state_dict(sd)
    m.eval()
    img, lab = find_split(data, "t10k")
    x = torch.from_numpy(np.array(img)).float().div(255.0).sub(MEAN).div(STD).reshape(-1, 1, 28, 28)
    y = torch.from_numpy(np.array(lab)).long()
    with torch.no_grad():
        out = m.fc(F.relu(m.bn(m.fc0(torch.flatten(m.block2(m.block1(x)), 1)))))
        loss = F.cross_entropy(out, y, reduction="sum").item() / len(y)
        acc = (out.argmax(1) == y).double().mean().item()
    row = list(csv.DictReader(open(metrics)))[-1]
    got_loss, got_acc = float(row["test_loss"]), float(row["test_acc"])
    d = abs(got_loss - loss) / loss
    print("test loss %.7f, PyTorch on rank 0's model %.7f (relative %.2g); accuracy %.4f vs %.4f"
          % (got_loss, loss, d, got_acc, acc))
    return 0 if d <= 1e-5 and abs(got_acc - acc) <= 1.5 / len(y) else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
