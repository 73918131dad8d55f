#!/usr/bin/python3
"""PyTorch equivalence test for the activations (tests/torch/act_mlp.net).

usage: act_equiv.py PROGRAM DATA_DIR

As tanh_equiv.py: the program trains from PyTorch's initialization
(init.safetensors) on the data in file order, SGD with momentum, STEPS
steps; PyTorch trains the same network (nn.GELU, nn.Identity, nn.Sigmoid,
nn.SiLU, nn.LeakyReLU(0.1), nn.ELU, nn.Softplus(beta=2, threshold=3),
nn.Hardtanh(-1.5, 0.5) as modules; F.elu(alpha=0.7), F.softplus(0.5, 1),
F.hardtanh(-0.5, 0.8), torch.sigmoid, F.gelu(approximate='tanh'),
F.leaky_relu(0.2), F.silu as functions; twelve branches summed) from the same weights on the same
batches. Every step's loss must agree to relative 1e-4, the final
parameters to relative L2 1e-4. Controls that must not match: GELU's
approximate='tanh' taken as 'none', and leaky_relu's slope 0.2 as the
default 0.01 (the test sees each parameter, not only the op).
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import equiv  # noqa: E402

STEPS = 120
LR = 0.01


class ActMLP(nn.Module):
    def __init__(self, variant="same"):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(784, 64), nn.GELU(), nn.Identity())
        self.m1 = nn.Sequential(nn.Linear(64, 32), nn.Sigmoid())
        self.m2 = nn.Sequential(nn.Linear(64, 32), nn.SiLU())
        self.m3 = nn.Sequential(nn.Linear(64, 32), nn.LeakyReLU(0.1))
        self.m4 = nn.Sequential(nn.Linear(64, 32), nn.ELU())
        self.m5 = nn.Sequential(nn.Linear(64, 32), nn.Softplus(beta=2, threshold=3))
        self.m6 = nn.Sequential(nn.Linear(64, 32), nn.Hardtanh(-1.5, 0.5))
        for i in range(1, 7):
            setattr(self, "fc%d" % i, nn.Linear(64, 32))
        self.head = nn.Linear(32, 10)
        self.variant = variant

    def forward(self, x):
        h = self.body(x.view(-1, 784))
        a = self.m1(h) + self.m2(h) + self.m3(h) + self.m4(h) + self.m5(h) + self.m6(h)
        b = F.elu(self.fc1(h), alpha=0.7) + F.softplus(self.fc2(h), 0.5, 1)
        c = F.hardtanh(self.fc3(h), min_val=-0.5, max_val=0.8) + torch.sigmoid(self.fc4(h))
        approx = "none" if self.variant == "gelu" else "tanh"
        slope = 0.01 if self.variant == "slope" else 0.2
        d = F.gelu(self.fc5(h), approximate=approx) + F.silu(F.leaky_relu(self.fc6(h), negative_slope=slope))
        return self.head(a + b + c + d)


def main(argv):
    return equiv.run(argv, 'act_equiv', 'activations', ActMLP, STEPS, LR,
                     (("gelu", "gelu approximate='none' for 'tanh'"), ("slope", "leaky_relu slope 0.01 for 0.2")),
                     main_variant="same", doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
