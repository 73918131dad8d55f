#!/usr/bin/python3
"""PyTorch equivalence test for tensors of any rank (tests/torch/rowgate_net.net).

usage: rowgate_equiv.py PROGRAM DATA_DIR

As cat_equiv.py (the driver is equiv.py): PyTorch trains the same network,
100 steps of SGD with momentum from the same weights on the same batches:
a row-pooling gate on x.view(N, 28, 28) (mean and amax over each row, a
Linear gate broadcast over the rows, torch.stack, reshape and a keepdim
sum), a GLU from torch.chunk with tuple unpacking, a transpose with a
strided slice, amin, and subscripts (x[:, None, :], x[..., 3], x[:, :, -1]).
Controls that must not match: amax over the other dimension (the columns'
maxima), the GLU's halves swapped, and the slice's step from the second
row instead of the first.
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import equiv  # noqa: E402

STEPS = 100
LR = 0.05


class RowGate(nn.Module):
    def __init__(self, variant="same"):
        super().__init__()
        self.gate = nn.Linear(56, 28)
        self.mix = nn.Linear(28, 64)
        self.head = nn.Linear(32 + 14 + 28, 10)
        self.variant = variant

    def forward(self, x):
        r = x.view(x.size(0), 28, 28)
        m = r.mean(dim=2)
        mx = torch.amax(r, dim=1 if self.variant == "amax" else -1)
        g = torch.sigmoid(self.gate(torch.cat((m, mx), dim=1)))
        st = torch.stack((m, mx), dim=2)
        s = st.reshape(-1, 2 * 28).view(x.size(0), 28, 2)[:, :, 0:2].sum(dim=2, keepdim=True) / 2
        r = r * g.unsqueeze(2) + s / (r.amax(dim=(1, 2), keepdim=True) + 3)
        a, b = torch.chunk(self.mix(r.mean(dim=1)), 2, dim=1)
        if self.variant == "glu":
            a, b = b, a
        h = a * torch.sigmoid(b)
        t = r.transpose(1, 2)[:, 1::2, :] if self.variant == "step" else r.transpose(1, 2)[:, ::2, :]
        cols = t.amin(dim=2) + t[:, :, -1]
        return self.head(torch.cat((h[:, None, :].squeeze(1), cols, r[..., 3]), dim=1))


def main(argv):
    return equiv.run(argv, "rowgate_equiv", "tensors of any rank (row gate)", RowGate, STEPS, LR,
                     (("amax", "amax over the columns instead of the rows"),
                      ("glu", "the GLU's halves swapped"),
                      ("step", "the strided slice from the second row")), doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
