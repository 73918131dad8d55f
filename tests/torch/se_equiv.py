#!/usr/bin/python3
"""PyTorch equivalence test for a squeeze-and-excitation block (tests/torch/se_net.net).

usage: se_equiv.py PROGRAM DATA_DIR

As rowgate_equiv.py (the driver is equiv.py): PyTorch trains the same
network, 100 steps of SGD with momentum from the same weights on the same
batches: a convolution, each channel's mean over the image
(x.mean(dim=(2, 3))), a Linear bottleneck with a sigmoid gate, the gate
broadcast over the image (x * s.view(N, C, 1, 1)), a residual add, a max
pool and a Linear head. SGD at lr 0.003: at 0.01 this network's training
is chaotic, PyTorch's own fp32 and fp64 runs part by 8e-4 at step 100
(ours is 3.3e-4 from the fp64 run), beyond any fp32 program's reach of a
1e-4 tolerance. Controls that must not match: the mean over the
rows only (dim=2, then over the columns' first), the gate applied without
its sigmoid, and the gate broadcast over the wrong axis (s.view(N, 1, C, 1)
over 8 rows of the image).
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import equiv  # noqa: E402

STEPS = 100
LR = 0.003


class SENet(nn.Module):
    def __init__(self, variant="same"):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.squeeze = nn.Linear(8, 4)
        self.excite = nn.Linear(4, 8)
        self.head = nn.Linear(8 * 14 * 14, 10)
        self.variant = variant

    def forward(self, x):
        h = F.relu(self.conv(x))
        s = h.mean(dim=2)[:, :, 0] if self.variant == "mean" else h.mean(dim=(2, 3))
        s = self.excite(F.relu(self.squeeze(s)))
        if self.variant != "sigmoid":
            s = torch.sigmoid(s)
        if self.variant == "axis":
            g = F.pad(s.view(x.size(0), 1, 8, 1), (0, 0, 0, 20), value=1.0)
        else:
            g = s.view(x.size(0), 8, 1, 1)
        h = h * g + h
        return self.head(F.max_pool2d(h, 2).flatten(1))


def main(argv):
    return equiv.run(argv, "se_equiv", "squeeze-and-excitation", SENet, STEPS, LR,
                     (("mean", "the squeeze as the mean over the rows of the first column"),
                      ("sigmoid", "the gate without its sigmoid"),
                      ("axis", "the gate broadcast over the image's rows, not its channels")), doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
