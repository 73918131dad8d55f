#!/usr/bin/python3
"""PyTorch equivalence test for softmax and log_softmax layers (tests/torch/softmax_mlp.net).

usage: softmax_equiv.py PROGRAM DATA_DIR

As tanh_equiv.py (the driver is equiv.py): PyTorch trains the same MLP,
nn.Softmax(dim=1), F.log_softmax(dim=1), F.softmax(dim=-1) and
nn.LogSoftmax(dim=-1) between its layers, 100 steps of SGD with momentum.
Controls that must not match: the first softmax over the batch (dim 0),
and log_softmax with the derivative dy (its softmax term dropped, a
custom autograd function). At lr 0.02 both runs agree within 2e-7
(losses and parameters); at lr 0.05 (where it learns faster) the last
steps drift apart to 1.6e-4 (measured), growing from 1e-7 after step 85:
float32 chaos through the softmaxes' sharpening, not a wrong gradient.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import equiv  # noqa: E402

STEPS = 100
LR = 0.02


class WrongLogSoftmax(torch.autograd.Function):
    """log_softmax whose gradient is dy: a planted bug."""
    @staticmethod
    def forward(ctx, x):
        return F.log_softmax(x, dim=1)

    @staticmethod
    def backward(ctx, dy):
        return dy


class SoftmaxMLP(nn.Module):
    def __init__(self, variant="same"):
        super().__init__()
        self.fc1 = nn.Linear(784, 64)
        self.sm = nn.Softmax(dim=0 if variant == "batch" else 1)
        self.fc2 = nn.Linear(64, 32)
        self.lsm = nn.LogSoftmax(dim=-1)
        self.fc3 = nn.Linear(32, 10)
        self.variant = variant

    def forward(self, x):
        h = self.fc1(torch.flatten(x, 1))
        ls = WrongLogSoftmax.apply(h) if self.variant == "wrong" else F.log_softmax(h, dim=1)
        a = self.sm(h) * 8 + ls * 0.1
        g = self.fc2(a)
        return self.fc3(F.softmax(g, dim=-1) + self.lsm(g) * 0.05)


def main(argv):
    return equiv.run(argv, "softmax_equiv", "softmax layers", SoftmaxMLP, STEPS, LR,
                     (("batch", "softmax over the batch (dim 0)"),
                      ("wrong", "log_softmax with the derivative dy")), doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
