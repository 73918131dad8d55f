#!/usr/bin/python3
"""PyTorch equivalence test for an autoencoder on target = input (tests/torch/autoenc_net.net).

usage: autoenc_equiv.py PROGRAM DATA_DIR

As attn_equiv.py (the driver is equiv.py): PyTorch trains the same
network, 100 steps of SGD with momentum from the same weights on the same
batches, the loss F.mse_loss(model(x), x) on the normalized images (the
program's data has target = input: no targets; its data directory holds
the images alone, no labels files). The network: strided
Conv2d down to 7x7, ConvTranspose2d (output_padding 1) and a nearest
Upsample back to 28x28. Every one of a sample's 784 outputs enters the
loss (the program's loss rows read the output as [N, 784], a view of the
last convolution's [N, 1, 28, 28]). SGD at lr 0.01: at 0.05 the loss falls
from 1.4 to 0.3 between steps 10 and 40 and rounding parts the two (1.9e-3
by step 40; 7.7e-6 at step 10). Controls that must not match: the loss
against the image shifted by one pixel, and the decoder's last
convolution without padding, padded back.
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


class ConvAE(nn.Module):
    """forward gives output - target, so that the driver's loss of it alone
    (the mean of its squares) is F.mse_loss(output, x)"""

    def __init__(self, variant="same"):
        super().__init__()
        self.e1 = nn.Conv2d(1, 8, 3, stride=2, padding=1)
        self.e2 = nn.Conv2d(8, 4, 3, stride=2, padding=1)
        self.d1 = nn.ConvTranspose2d(4, 8, 3, stride=2, padding=1, output_padding=1)
        self.up = nn.Upsample(scale_factor=2)
        self.d2 = nn.Conv2d(8, 1, 3, padding=0 if variant == "pad" else 1)
        self.variant = variant

    def forward(self, x):
        h = F.relu(self.e1(x))
        h = F.relu(self.e2(h))
        h = F.relu(self.d1(h))
        out = self.d2(self.up(h))
        if self.variant == "pad":
            out = F.pad(out, (1, 1, 1, 1))
        target = torch.roll(x, 1, dims=3) if self.variant == "shift" else x
        return out - target


def squared(out, y, variant):
    return (out ** 2).mean()


def main(argv):
    return equiv.run(argv, "autoenc_equiv", "an autoencoder on target = input", ConvAE, STEPS, LR,
                     (("shift", "the loss against the image shifted by a pixel"),
                      ("pad", "the last convolution without padding, padded back")),
                     loss_fn=squared, doc=__doc__, labels=False)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
