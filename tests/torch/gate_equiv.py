#!/usr/bin/python3
"""PyTorch equivalence test for elementwise arithmetic (tests/torch/gate_mlp.net).

usage: gate_equiv.py PROGRAM DATA_DIR

As tanh_equiv.py: the program trains from PyTorch's initialization
(init.safetensors) on the data in file order, SGD with momentum, STEPS
steps; PyTorch trains the same network, a residual block with a sigmoid
gate (h + sigmoid(g1(h)) * tanh(f1(h))), a highway block (g * h + (1 - g)
* gelu(f2(h))), then h - 0.5 * h / 4 + 0.1 and -h * 2 into the head, from
the same weights on the same batches. Every step's loss must agree to
relative 1e-4, the final parameters to relative L2 1e-4. Controls that
must not match: the residual without its gate, the highway's 1 - g as g.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import equiv  # noqa: E402

STEPS = 150
LR = 0.01


class GateMLP(nn.Module):
    def __init__(self, variant="same"):
        super().__init__()
        self.inp = nn.Linear(784, 64)
        self.f1 = nn.Linear(64, 64)
        self.g1 = nn.Linear(64, 64)
        self.f2 = nn.Linear(64, 64)
        self.g2 = nn.Linear(64, 64)
        self.head = nn.Linear(64, 10)
        self.variant = variant

    def forward(self, x):
        h = F.relu(self.inp(torch.flatten(x, 1)))
        if self.variant == "nogate":
            h = h + torch.tanh(self.f1(h))
        else:
            h = h + torch.sigmoid(self.g1(h)) * torch.tanh(self.f1(h))
        g = torch.sigmoid(self.g2(h))
        if self.variant == "carry":
            h = g * h + g * F.gelu(self.f2(h))
        else:
            h = g * h + (1 - g) * F.gelu(self.f2(h))
        h = h - 0.5 * h / 4 + 0.1
        return self.head(-h * 2)


def main(argv):
    return equiv.run(argv, 'gate_equiv', 'gate mlp', GateMLP, STEPS, LR,
                     (("nogate", "the residual without its gate"), ("carry", "the highway's 1 - g as g")),
                     main_variant="same", doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
