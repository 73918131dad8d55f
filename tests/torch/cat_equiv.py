#!/usr/bin/python3
"""PyTorch equivalence test for torch.cat (tests/torch/cat_net.net).

usage: cat_equiv.py PROGRAM DATA_DIR

As tanh_equiv.py (the driver is equiv.py): PyTorch trains the same
ConvNet, torch.cat of three [N, C, 28, 28] branches along the channels
(4 + 3 + the input's 1) and of three [N, F] values along the features,
100 steps of SGD with momentum. Controls that must not match: the two
convolution branches in the other order (the next convolution sees its
channels swapped), and the features' first two operands swapped.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import equiv  # noqa: E402

STEPS = 100
LR = 0.01


class CatNet(nn.Module):
    def __init__(self, variant="same"):
        super().__init__()
        self.b1 = nn.Conv2d(1, 4, 3, padding=1)
        self.b2 = nn.Conv2d(1, 3, 5, padding=2)
        self.conv = nn.Conv2d(8, 8, 3, stride=2)
        self.fa = nn.Linear(8 * 13 * 13, 32)
        self.fb = nn.Linear(8 * 13 * 13, 16)
        self.head = nn.Linear(32 + 16 + 32, 10)
        self.variant = variant

    def forward(self, x):
        p, q = F.relu(self.b1(x)), torch.tanh(self.b2(x))
        x = torch.cat((q, p, x) if self.variant == "channels" else (p, q, x), dim=1)
        x = torch.flatten(F.relu(self.conv(x)), 1)
        a = F.relu(self.fa(x))
        s = torch.sigmoid(self.fb(x))
        h = torch.cat([s, a, a * 0.5] if self.variant == "features" else [a, s, a * 0.5], 1)
        return self.head(h)


def main(argv):
    return equiv.run(argv, "cat_equiv", "torch.cat", CatNet, STEPS, LR,
                     (("channels", "the convolution branches in the other order"),
                      ("features", "the features' first two operands swapped")), doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
