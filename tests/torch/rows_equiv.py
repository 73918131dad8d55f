#!/usr/bin/python3
"""PyTorch equivalence test for layers over the last dimension (tests/torch/rows_net.net).

usage: rows_equiv.py PROGRAM DATA_DIR

As attn_equiv.py (the driver is equiv.py): PyTorch trains the same
network, 100 steps of SGD with momentum from the same weights on the same
batches: hand-written attention over the image's 28 rows, the way a
transformer block is written: LayerNorm, the q, k and v Linears and
F.softmax(dim=-1) on [N, 28, 28] and [N, 28, 16], a residual, an MLP with
GELU on every row (its LayerNorm without bias, torch 2.1's), and
x.view(-1, 16) (N*28 rows) through a Linear and back.
Each layer on [N, T, F] is one product over N*T rows in the program.
Controls that must not match: softmax over the keys' transpose (the
scores' dim -2), LayerNorm over the whole sample instead of each row, and
the row Linear's input transposed ([N, 16, 28] rows).
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import equiv  # noqa: E402

STEPS = 100
LR = 0.01


class LayerNormNoBias(nn.Module):
    """torch 2.1's nn.LayerNorm(F, bias=False), which torch 1.13 lacks"""

    def __init__(self, f):
        super().__init__()
        self.f = f
        self.weight = nn.Parameter(torch.ones(f))

    def forward(self, x):
        return F.layer_norm(x, (self.f,), self.weight)


class RowsAttn(nn.Module):
    def __init__(self, variant="same"):
        super().__init__()
        self.ln1 = nn.LayerNorm(28)
        self.wq = nn.Linear(28, 16)
        self.wk = nn.Linear(28, 16)
        self.wv = nn.Linear(28, 16)
        self.proj = nn.Linear(16, 28)
        self.ln2 = LayerNormNoBias(28)
        self.fc = nn.Linear(28, 32)
        self.out = nn.Linear(32, 28)
        self.row = nn.Linear(16, 4)
        self.head = nn.Linear(28 * 4, 10)
        self.variant = variant

    def forward(self, x):
        B = x.size(0)
        r = x.view(B, 28, 28)
        if self.variant == "ln":
            h = F.layer_norm(r, (28, 28)) * self.ln1.weight + self.ln1.bias
        else:
            h = self.ln1(r)
        q = self.wq(h)
        k = self.wk(h)
        s = q @ k.transpose(-2, -1) / math.sqrt(16)
        p = F.softmax(s, dim=-2 if self.variant == "softmax" else -1)
        a = p @ self.wv(h)
        r = r + self.proj(a)
        r = r + self.out(F.gelu(self.fc(self.ln2(r))))
        z = self.wq(r)
        if self.variant == "rows":
            z = z.transpose(1, 2).reshape(B, 28, 16)
        t = self.row(z.reshape(-1, 16))
        return self.head(t.view(B, 28 * 4))


def main(argv):
    return equiv.run(argv, "rows_equiv", "layers over the last dimension", RowsAttn, STEPS, LR,
                     (("softmax", "softmax over the scores' dim -2"),
                      ("ln", "LayerNorm over the whole sample instead of each row"),
                      ("rows", "the row Linear's input transposed")), doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
