#!/usr/bin/python3
"""PyTorch equivalence test for label smoothing (tests/torch/smooth_mlp.net).

usage: smooth_equiv.py PROGRAM DATA_DIR

As tanh_equiv.py: the program trains from PyTorch's initialization on the
data in file order, SGD with momentum, STEPS steps; PyTorch trains the same
MLP with F.cross_entropy(label_smoothing=0.1) from the same weights on the
same batches. Every step's loss must agree to relative 1e-4, the final
parameters to relative L2 1e-4. Controls that must not match: no
smoothing, and smoothing 0.2.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import equiv  # noqa: E402

STEPS = 100
LR = 0.05


class SmoothMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


def loss_fn(out, y, variant):
    return F.cross_entropy(out, y, label_smoothing={"same": 0.1, "none": 0.0, "more": 0.2}[variant])


def main(argv):
    return equiv.run(argv, 'smooth_equiv', 'label smoothing', lambda variant: SmoothMLP(), STEPS, LR,
                     (("none", "no label smoothing"), ("more", "label_smoothing 0.2 for 0.1")),
                     main_variant="same", loss_fn=loss_fn, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
