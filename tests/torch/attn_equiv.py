#!/usr/bin/python3
"""PyTorch equivalence test for attention and tensor math (tests/torch/attn_net.net).

usage: attn_equiv.py PROGRAM DATA_DIR

As rowgate_equiv.py (the driver is equiv.py): PyTorch trains the same
network, 100 steps of SGD with momentum from the same weights on the same
batches: attention written out over the image's 28 rows (q @ k^T scaled by
1 / sqrt(d), softmax from exp / amax / sum, matmul with the values), a Gram
matrix by einsum, clamp, maximum, sqrt, '**', abs, and constant arithmetic
on a tensor whose batch is not first. torch 1.13 has no
scaled_dot_product_attention: the reference writes attention out too.
SGD at lr 0.01: at 0.02 this network's training turns chaotic after 60 steps
(the loss climbs from 0.33 to 1.15) and float rounding alone parts the two.
Controls that must not match: the scores unscaled, the Gram matrix of the
columns instead of the rows, and clamp's upper bound 1 instead of 1.5.
"""
import math
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import equiv  # noqa: E402

STEPS = 100
LR = 0.01


class RowAttn(nn.Module):
    def __init__(self, variant="same"):
        super().__init__()
        self.qk = nn.Linear(784, 28 * 16)
        self.val = nn.Linear(784, 28 * 8)
        self.head = nn.Linear(28 * 8 + 28, 10)
        self.variant = variant

    def forward(self, x):
        r = x.view(x.size(0), 28, 28)
        h = self.qk(x.flatten(1)).view(-1, 28, 16)
        u = self.val(x.flatten(1)).view(-1, 28, 8)
        s = h @ h.transpose(1, 2)
        if self.variant != "scale":
            s = s / math.sqrt(16)
        p = torch.exp(s - s.amax(dim=-1, keepdim=True))
        p = p / p.sum(dim=-1, keepdim=True)
        o = torch.matmul(p, u)
        g = torch.einsum("bji,bjk->bik" if self.variant == "einsum" else "bij,bkj->bik", r, r) / 28
        d = torch.clamp(g, min=-0.5, max=1.0 if self.variant == "clamp" else 1.5).mean(dim=2)
        e = torch.maximum(d, (r ** 2).mean(dim=2).sqrt()) + torch.abs(r.transpose(0, 1) * 0.5 - 0.1).amax(dim=0)
        return self.head(torch.cat((o.flatten(1), e), dim=1))


def main(argv):
    return equiv.run(argv, "attn_equiv", "attention and tensor math", RowAttn, STEPS, LR,
                     (("scale", "the scores not scaled by 1 / sqrt(16)"),
                      ("einsum", "the Gram matrix of the columns instead of the rows"),
                      ("clamp", "clamp's upper bound 1 instead of 1.5")), doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
