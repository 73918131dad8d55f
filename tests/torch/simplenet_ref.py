"""SimpleNet of the notes and an IDX reader: the PyTorch side shared by the
oracle tests and the benchmark."""
import gzip
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class SimpleNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, 10)

    def forward(self, x):
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def read_idx(path):
    """A gzip'd ubyte IDX file as a (writable) uint8 array of its shape."""
    with gzip.open(path, "rb") as f:
        buf = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", buf[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError("%s: not a ubyte IDX file" % path)
    dims = struct.unpack(">" + "I" * ndim, buf[4:4 + 4 * ndim])
    return np.frombuffer(buf, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims).copy()
