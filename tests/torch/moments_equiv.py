#!/usr/bin/python3
"""PyTorch equivalence test for statistics over dimensions (tests/torch/moments_net.net).

usage: moments_equiv.py PROGRAM DATA_DIR

As rowgate_equiv.py (the driver is equiv.py): PyTorch trains the same
network, 100 steps of SGD with momentum from the same weights on the same
batches: a layer norm written by hand over each row of a Linear's output
viewed as [N, 28, 28] (mean, std with unbiased=False), torch.var with
correction=1 over the rows, torch.logsumexp over the rows, 2-norms (of
zeros too: their gradient is 0 there, not NaN) and an augmented assignment
(z += ...). Controls that must not match: std unbiased (N - 1)
where the model asks for N, var without the correction, and logsumexp as
a plain maximum.
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import equiv  # noqa: E402

STEPS = 100
LR = 0.01


class Moments(nn.Module):
    def __init__(self, variant="same"):
        super().__init__()
        self.mix = nn.Linear(784, 784)
        self.head = nn.Linear(784 + 28 * 4, 10)
        self.variant = variant

    def forward(self, x):
        r = self.mix(x.flatten(1)).view(x.size(0), 28, 28)
        sd = r.std(dim=2, keepdim=True, unbiased=self.variant == "std")
        z = (r - r.mean(dim=2, keepdim=True)) / (sd + 1e-5)
        v = torch.var(r, dim=1, correction=0 if self.variant == "var" else 1)
        l = torch.amax(r, dim=1) if self.variant == "lse" else torch.logsumexp(r, dim=1)
        z += r * 0.5
        q = torch.norm(r, dim=1) + (r * 0).norm(p=2, dim=2)
        return self.head(torch.cat((z.flatten(1), v, l, q, (r - r).norm(dim=1)), dim=1))


def main(argv):
    return equiv.run(argv, "moments_equiv", "statistics over dimensions", Moments, STEPS, LR,
                     (("std", "std unbiased where the model asks for the biased one"),
                      ("var", "var without Bessel's correction"),
                      ("lse", "logsumexp as a plain maximum")), doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
