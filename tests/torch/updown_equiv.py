#!/usr/bin/python3
"""PyTorch equivalence test for upsampling (tests/torch/updown_net.net).

usage: updown_equiv.py PROGRAM DATA_DIR

As attn_equiv.py (the driver is equiv.py): PyTorch trains the same
network, 100 steps of SGD with momentum from the same weights on the same
batches: down to 7x7 by a strided Conv2d and an average pool, up by
ConvTranspose2d (stride 2, padding 1, output_padding 1), bilinear
interpolation (scale 2, align_corners False), nearest (scale 2), bilinear
to a size with align_corners True, a grouped ConvTranspose2d without bias,
an average pool. ConvTranspose2d's weight is [in, out / groups, kh, kw]
in both state_dicts, its default init's fan_in from dimension 1.
SGD at lr 0.03: at 0.1 the two agree to 1.4e-6 for 60 steps, then the
loss falls from 2.1 to 1.0 in 40 steps and float rounding alone parts them
(4.8e-4 at step 100); at 0.05 they agree on AVX-512 (1.2e-6) but with
both sides' convolutions at AVX2 (as the suite runs them, DNNL_MAX_CPU_ISA)
they part by 6e-4 after step 50. Controls that must not match: align_corners True for the first bilinear,
output_padding 0 (padded back to 14x14 at the bottom and right), and
nearest for the first bilinear.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import equiv  # noqa: E402

STEPS = 100
LR = 0.03


class UpDown(nn.Module):
    def __init__(self, variant="same"):
        super().__init__()
        self.c1 = nn.Conv2d(1, 4, 3, stride=2, padding=1)
        self.t1 = nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=0 if variant == "opad" else 1)
        self.up = nn.Upsample(scale_factor=2, mode="nearest" if variant == "nearest" else "bilinear",
                              align_corners=True if variant == "align" else None)
        self.c2 = nn.Conv2d(3, 2, 3, stride=2, padding=1)
        self.t2 = nn.ConvTranspose2d(2, 4, 2, stride=2, groups=2, bias=False)
        self.head = nn.Linear(4 * 10 * 10, 10)
        self.variant = variant

    def forward(self, x):
        h = F.avg_pool2d(F.relu(self.c1(x)), 2)
        h = torch.tanh(self.t1(h))
        if self.variant == "opad":
            h = F.pad(h, (0, 1, 0, 1))
        h = self.up(h)
        h = F.relu(self.c2(h))
        h = F.interpolate(h, scale_factor=2)
        h = F.interpolate(h, size=(20, 20), mode="bilinear", align_corners=True)
        h = F.avg_pool2d(self.t2(h), 4)
        return self.head(h.flatten(1))


def main(argv):
    return equiv.run(argv, "updown_equiv", "upsampling", UpDown, STEPS, LR,
                     (("align", "align_corners True for the first bilinear"),
                      ("opad", "output_padding 0, padded back"),
                      ("nearest", "nearest for the first bilinear")), doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
