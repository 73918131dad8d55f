#!/usr/bin/python3
"""PyTorch equivalence test for LayerNorm over [C, H, W] (tests/torch/lnconv_net.net).

usage: lnconv_equiv.py PROGRAM DATA_DIR

As tanh_equiv.py (the driver is equiv.py): PyTorch trains the same
ConvNet, nn.LayerNorm([4, 8, 8]) over a convolution's output (weight and
bias shaped [4, 8, 8] in the state_dict), then a convolution and a
BatchNorm2d, 100 steps of SGD with momentum (measured: losses 3.7e-7,
parameters 5.5e-7). The same layer norm put in a branch of
tests/torch/norm_mlp.net made that training chaotic in float32: over 100
steps at lr 0.01 PyTorch float32 and PyTorch float64 differed by 8.7e-2 in
a step's loss while this program and PyTorch float32 differed by 4.8e-4
(at lr 0.005: 4.6e-2 against 4.0e-2, this program against float64 7.2e-3),
so it is tested here, on a network where float32 does not diverge.
Controls that must not match: the layer norm
over the last dimension only (each row of each channel), and an RMS norm
(no mean subtraction).
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


class LnConv(nn.Module):
    def __init__(self, variant="same"):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 5, stride=3)
        self.ln = nn.LayerNorm([4, 8, 8])
        self.conv2 = nn.Conv2d(4, 6, 3)
        self.bn = nn.BatchNorm2d(6)
        self.fc = nn.Linear(6 * 6 * 6, 10)
        self.variant = variant

    def forward(self, x):
        x = self.conv(x)
        if self.variant == "last":
            x = F.layer_norm(x, (8,)) * self.ln.weight + self.ln.bias
        elif self.variant == "rms":
            x = x * torch.rsqrt(x.pow(2).mean((1, 2, 3), keepdim=True) + 1e-5) * self.ln.weight + self.ln.bias
        else:
            x = self.ln(x)
        x = F.relu(self.bn(self.conv2(F.relu(x))))
        return self.fc(torch.flatten(x, 1))


def main(argv):
    return equiv.run(argv, "lnconv_equiv", "layer norm over [C, H, W]", LnConv, STEPS, LR,
                     (("last", "the layer norm over the last dimension only"),
                      ("rms", "an RMS norm (no mean subtraction)")), doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
