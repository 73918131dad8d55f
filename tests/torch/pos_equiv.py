#!/usr/bin/python3
"""PyTorch equivalence test for a loss over positions (tests/torch/pos_net.net).

usage: pos_equiv.py [--weighted] PROGRAM DATA_DIR

As rows_equiv.py (the driver is equiv.py), on targets made from the data
set: each of an image's 28 rows is labelled with the digit's class where
the row has ink (a pixel above 127) and -100 where it is blank, so the
counted positions differ from batch to batch. The network returns
[N, 28, 10] logits; PyTorch's loss is
F.cross_entropy(logits.view(-1, 10), y.view(-1), ignore_index=-100), the
mean over the counted positions. Controls that must not match: the
ignored rows taken as class 0, the mean over all positions (ignored ones
counting 0), and the mean of the samples' own means.
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import equiv  # noqa: E402

STEPS = 100
LR = 0.05
IGNORE = -100


def row_targets(images_u8, labels_u8):
    """[N, 28]: the label where a row has a pixel above 127, else -100"""
    ink = images_u8.reshape(-1, 28, 28).max(axis=2) > 127
    return np.where(ink, labels_u8.astype(np.int64)[:, None], IGNORE).astype(np.int64)


class RowTagger(nn.Module):
    def __init__(self, variant="same"):
        super().__init__()
        self.fc1 = nn.Linear(28, 48)
        self.mix = nn.Linear(48, 48)
        self.out = nn.Linear(48, 10)

    def forward(self, x):
        B = x.size(0)
        h = F.relu(self.fc1(x.view(B, 28, 28)))
        h = h + self.mix(h.mean(1, keepdim=True))
        return self.out(F.relu(h))


WEIGHTS = None     # pos_weight_net.net's class weights (--weighted)


def loss_fn(out, y, variant):
    if WEIGHTS is not None:     # the mean over the counted positions' weights
        w = torch.tensor(WEIGHTS)
        if variant == "plain":
            return F.cross_entropy(out.view(-1, 10), y.view(-1), weight=w, ignore_index=IGNORE, reduction="sum") / \
                (y != IGNORE).sum()
        return F.cross_entropy(out.view(-1, 10), y.view(-1), weight=w, ignore_index=IGNORE)
    if variant == "class0":
        return F.cross_entropy(out.view(-1, 10), y.view(-1).clamp(min=0))
    if variant == "all":
        per = F.cross_entropy(out.view(-1, 10), y.view(-1), ignore_index=IGNORE, reduction="none")
        return per.sum() / per.numel()
    if variant == "samples":
        per = F.cross_entropy(out.view(-1, 10), y.view(-1), ignore_index=IGNORE, reduction="none").view(-1, 28)
        cnt = (y != IGNORE).sum(1).clamp(min=1)
        return (per.sum(1) / cnt).mean()
    return F.cross_entropy(out.view(-1, 10), y.view(-1), ignore_index=IGNORE)


def main(argv):
    global WEIGHTS
    if argv and argv[0] == "--weighted":
        WEIGHTS = [1.0, 2.0, 0.5, 1.5, 1.0, 0.25, 3.0, 1.0, 0.75, 2.0]
        return equiv.run(argv[1:], "pos_equiv", "weighted cross_entropy over positions, ignore_index", RowTagger,
                         STEPS, LR, (("plain", "the weighted sum over the count of positions, not their weights"),),
                         loss_fn=loss_fn, targets=row_targets, doc=__doc__)
    return equiv.run(argv, "pos_equiv", "cross_entropy over positions, ignore_index", RowTagger, STEPS, LR,
                     (("class0", "the ignored rows taken as class 0"),
                      ("all", "the mean over all positions"),
                      ("samples", "the mean of the samples' means")),
                     loss_fn=loss_fn, targets=row_targets, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
