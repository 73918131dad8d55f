#!/usr/bin/python3
"""PyTorch equivalence test for integer and boolean tensors (tests/torch/mask_net.net).

usage: mask_equiv.py PROGRAM DATA_DIR

As attn_equiv.py (the driver is equiv.py): PyTorch trains the same
network, 100 steps of SGD with momentum from the same weights on the same
batches: causal attention over the image's 28 rows (a tril buffer and
masked_fill with -inf), torch.where between tensors and between numbers,
torch.max(dim) unpacked (the values' gradient goes to the element chosen),
argmax and gather, a subscript by a reversed arange and index_select by a
stepped one, comparisons joined by '&', .float() and .long() with '%',
triu and ones_like. The buffer is registered with persistent=False here:
the program keeps a buffer's value as its expression, not in checkpoints.
Controls that must not match: the mask upper- instead of lower-triangular,
argmin instead of argmax before the gather, and where's branches swapped.
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import equiv  # noqa: E402

STEPS = 100
LR = 0.01


class MaskAttn(nn.Module):
    def __init__(self, variant="same"):
        super().__init__()
        tri = torch.triu if variant == "mask" else torch.tril
        self.register_buffer("causal", tri(torch.ones(28, 28)).view(1, 28, 28), persistent=False)
        self.rev = torch.arange(27, -1, -1)
        self.qk = nn.Linear(784, 28 * 16)
        self.val = nn.Linear(784, 28 * 8)
        self.head = nn.Linear(28 * 8 + 28 * 3 + 14, 10)
        self.variant = variant

    def forward(self, x):
        r = x.view(x.size(0), 28, 28)
        h = self.qk(x.flatten(1)).view(-1, 28, 16)
        u = self.val(x.flatten(1)).view(-1, 28, 8)
        s = h @ h.transpose(1, 2) / 4
        s = s.masked_fill(self.causal == 0, float("-inf"))
        p = torch.exp(s - s.amax(dim=-1, keepdim=True))
        p = p / p.sum(dim=-1, keepdim=True)
        a = p @ u
        o = torch.where(a > 0, 0.1 * a, a) if self.variant == "where" else torch.where(a > 0, a, 0.1 * a)
        v, i = torch.max(h, dim=2)
        pick = u.abs().argmin if self.variant == "gather" else u.abs().argmax
        e = v * (i.float() / 16) + torch.gather(u, 2, pick(dim=2, keepdim=True)).squeeze(2)
        m = ((r > 0) & (r < 1.5)).float().mean(dim=2) + torch.where(r.mean(dim=2) > 0, torch.tensor(1.0),
                                                                     torch.tensor(-1.0))
        t = torch.triu(h @ h.transpose(1, 2), diagonal=1).sum(dim=2) / 64 + torch.ones_like(v)
        k = r[:, self.rev].index_select(1, torch.arange(0, 28, 2)).mean(dim=2) * \
            (i.long() % 2 == 0).float().mean(dim=1, keepdim=True)
        return self.head(torch.cat((o.flatten(1), e, m, t, k), dim=1))


def main(argv):
    return equiv.run(argv, "mask_equiv", "integer and boolean tensors", MaskAttn, STEPS, LR,
                     (("mask", "the mask upper- instead of lower-triangular"),
                      ("gather", "argmin instead of argmax before the gather"),
                      ("where", "where's branches swapped")), doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
