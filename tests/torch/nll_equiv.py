#!/usr/bin/python3
"""PyTorch equivalence test for nll_loss (tests/torch/nll_mlp.net).

usage: nll_equiv.py PROGRAM DATA_DIR

As tanh_equiv.py: the program trains from PyTorch's initialization on the
data in file order, SGD with momentum, STEPS steps; PyTorch trains
F.log_softmax(fc2(relu(fc1(x))), dim=1) with F.nll_loss(reduction='sum')
from the same weights on the same batches. Every step's loss must agree to
relative 1e-4, the final parameters to relative L2 1e-4. Controls that
must not match: nll_loss of the logits (without log_softmax), and the
mean reduction for the sum.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import equiv  # noqa: E402

STEPS = 100
LR = 0.001


class NllMLP(nn.Module):
    def __init__(self, variant="same"):
        super().__init__()
        self.fc1 = nn.Linear(784, 64)
        self.fc2 = nn.Linear(64, 10)
        self.variant = variant

    def forward(self, x):
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        x = self.fc2(x)
        return x if self.variant == "logits" else F.log_softmax(x, dim=1)


def loss_fn(out, y, variant):
    return F.nll_loss(out, y, reduction="mean" if variant == "mean" else "sum")


def main(argv):
    return equiv.run(argv, 'nll_equiv', 'nll_loss', NllMLP, STEPS, LR,
                     (("logits", "nll_loss of the logits (no log_softmax)"), ("mean", "reduction mean for sum")),
                     main_variant="same", loss_fn=loss_fn, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
