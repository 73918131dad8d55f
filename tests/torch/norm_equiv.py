#!/usr/bin/python3
"""PyTorch equivalence test for BatchNorm1d and LayerNorm (tests/torch/norm_mlp.net).

usage: norm_equiv.py PROGRAM DATA_DIR

As tanh_equiv.py (the driver is equiv.py): PyTorch trains the same MLP,
nn.BatchNorm1d over [N, 28, 28] (the image's rows as channels) and over
[N, 64] after a ReLU (eps 1e-3, momentum 0.2), nn.LayerNorm (default, eps 1e-3, and
without its affine), F.layer_norm and every activation (ReLU, GELU both
ways, Tanh, SiLU, Identity, Sigmoid, LeakyReLU, ELU, Softplus, Hardtanh),
100 steps of SGD with momentum. The final state_dicts compared include the
batch norms' running_mean, running_var and num_batches_tracked. Controls
that must not match: ln1 without its mean subtraction (an RMS norm), and
bn1 normalizing with its running statistics (eval mode) in training.
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


class NormMLP(nn.Module):
    def __init__(self, variant="same"):
        super().__init__()
        self.bn0 = nn.BatchNorm1d(28)
        self.fc1 = nn.Linear(784, 64)
        self.bn1 = nn.BatchNorm1d(64, eps=1e-3, momentum=0.2)
        self.ln1 = nn.LayerNorm(64)
        self.block = nn.Sequential(
            nn.Linear(64, 48), nn.LayerNorm(48, eps=1e-3), nn.GELU(),
            nn.Linear(48, 48), nn.BatchNorm1d(48), nn.Tanh(),
            nn.Linear(48, 48), nn.LayerNorm((48,), elementwise_affine=False), nn.SiLU(),
            nn.Identity())
        for k in "abcdef":
            setattr(self, "f" + k, nn.Linear(48, 32))
        self.ln2 = nn.LayerNorm(32)
        self.head = nn.Linear(32, 10)
        self.variant = variant

    def forward(self, x):
        x = self.bn0(x.view(x.size(0), 28, 28))
        h = F.relu(self.fc1(x.view(x.size(0), -1)))
        if self.variant == "bn_eval":
            b = self.bn1
            h = F.batch_norm(h, b.running_mean, b.running_var, b.weight, b.bias, False, 0.0, b.eps)
        else:
            h = self.bn1(h)
        if self.variant == "rms":
            h = h * torch.rsqrt(h.pow(2).mean(1, keepdim=True) + 1e-5) * self.ln1.weight + self.ln1.bias
        else:
            h = self.ln1(h)
        h = self.block(h)
        a = torch.sigmoid(self.fa(h)) + F.leaky_relu(self.fb(h), 0.1) + F.elu(self.fc(h), alpha=0.7)
        b = F.softplus(self.fd(h), beta=2) + F.hardtanh(self.fe(h), -0.5, 0.8) + F.gelu(self.ff(h), approximate="tanh")
        return self.head(self.ln2(F.layer_norm(a, (32,)) + b))


def main(argv):
    return equiv.run(argv, "norm_equiv", "batch norm 1d, layer norm", NormMLP, STEPS, LR,
                     (("rms", "ln1 without the mean subtraction (RMS norm)"),
                      ("bn_eval", "bn1 with its running statistics in training")), doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
