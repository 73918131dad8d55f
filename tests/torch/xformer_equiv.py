#!/usr/bin/python3
"""PyTorch equivalence of the attention modules (tests/torch/xformer_net.net).

usage: xformer_equiv.py PROGRAM DATA_DIR

As rows_equiv.py (the driver is equiv.py): PyTorch's own
nn.TransformerEncoder (two post-norm layers, batch_first),
nn.TransformerEncoderLayer (norm_first, GELU, the [L, N, E] layout) and
nn.MultiheadAttention (a causal bool mask, its head-averaged weights
used) and a cross-attention (query and key/value from different tensors),
on the 28 rows of each image, 100 steps of SGD with momentum from
the same weights on the same batches. Controls that must not match: the
second layer post-norm too (norm_first off), the attention without its
causal mask, the cross-attention's query taken from its key, and the
mask added as a float mask of 0s and 1s (a bool
mask of nn.MultiheadAttention leaves out where it is true). At lr 0.01
the two agree to 3e-7 for 40 steps, then float rounding alone parts them
(2e-5 by step 80); at 0.002 to 1e-7 for 80 steps, then 2e-6 by step 90:
training this network is chaotic there; it trains at 0.001 (measured:
2.0e-7 step loss, 1.0e-6 parameters).
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import equiv  # noqa: E402

STEPS = 100
LR = 0.001


class Rows(nn.Module):
    def __init__(self, variant="same"):
        super().__init__()
        self.embed = nn.Linear(28, 32)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0,
                                                                    batch_first=True), num_layers=2,
                                         enable_nested_tensor=False)
        self.pre = nn.TransformerEncoderLayer(32, 2, dim_feedforward=48, dropout=0.0, activation="gelu",
                                              norm_first=variant != "post")
        self.attn = nn.MultiheadAttention(32, 4, batch_first=True)
        self.cross = nn.MultiheadAttention(32, 2, batch_first=True)
        self.head = nn.Linear(28 * 32, 10)
        self.variant = variant

    def forward(self, x):
        B = x.size(0)
        h = self.embed(x.view(B, 28, 28))
        h = self.enc(h)
        h = self.pre(h.transpose(0, 1)).transpose(0, 1)
        causal = torch.triu(torch.ones(28, 28), diagonal=1) > 0
        if self.variant == "nomask":
            a, w = self.attn(h, h, h)
        elif self.variant == "float":
            a, w = self.attn(h, h, h, attn_mask=causal.float())
        else:
            a, w = self.attn(h, h, h, attn_mask=causal)
        a = a + w @ h
        c, _ = self.cross(h if self.variant == "selfcross" else a, h, h)
        a = a + c
        return self.head(a.flatten(1))


def main(argv):
    return equiv.run(argv, "xformer_equiv", "attention modules", Rows, STEPS, LR,
                     (("post", "the norm_first layer post-norm"),
                      ("nomask", "the attention without its causal mask"),
                      ("float", "the bool mask added as a float one (0 and 1)"),
                      ("selfcross", "the cross-attention's query its key")), doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
