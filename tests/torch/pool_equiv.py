#!/usr/bin/python3
"""PyTorch equivalence test for the functional and adaptive pools (tests/torch/pool_net.net).

usage: pool_equiv.py PROGRAM DATA_DIR

As tanh_equiv.py (the driver is equiv.py): PyTorch trains the same
ConvNet, F.max_pool2d (2, and 3 with stride 1 and padding 1),
F.avg_pool2d(3, stride 2, padding 1), nn.AdaptiveAvgPool2d(1),
F.adaptive_avg_pool2d(x, 1) and nn.AdaptiveAvgPool2d((2, 7)), 100 steps
of SGD with momentum. Controls that must not match: the padded average
pool without the padding in its divisor (count_include_pad=False), and
global max pooling in place of the global average. At lr 0.01 both runs
agree within 7e-7 (losses) and 3e-6 (parameters); at lr 0.05 one flip of a
ReLU or max-pool choice near step 40 grows to 5e-3 by step 70, and at 0.02
to 6e-5 (measured): float32 chaos, not the pools.
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


class PoolNet(nn.Module):
    def __init__(self, variant="same"):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.conv3 = nn.Conv2d(16, 16, 3)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.grid = nn.AdaptiveAvgPool2d((2, 7))
        self.fc = nn.Linear(16, 10)
        self.fg = nn.Linear(16 * 2 * 7, 10)
        self.variant = variant

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.relu(self.conv2(x))
        t = torch.flatten(self.grid(x), 1)
        x = F.avg_pool2d(x, kernel_size=3, stride=2, padding=1, count_include_pad=self.variant != "no_pad")
        x = F.relu(self.conv3(x))
        gap = F.adaptive_max_pool2d if self.variant == "gmp" else F.adaptive_avg_pool2d
        g = torch.flatten(self.gap(x), 1) + torch.flatten(gap(F.max_pool2d(x, 3, 1, 1), 1), 1)
        return self.fc(g) + self.fg(t)


def main(argv):
    return equiv.run(argv, "pool_equiv", "pools", PoolNet, STEPS, LR,
                     (("no_pad", "avg_pool2d with count_include_pad=False"),
                      ("gmp", "global max pooling for the average")), doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
