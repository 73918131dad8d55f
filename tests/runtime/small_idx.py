#!/usr/bin/python3
"""small_idx.py SRC DST NTRAIN NTEST: the first NTRAIN training and NTEST
test samples of the IDX files in SRC (plain or .gz) as plain IDX files in
DST: the cut the emulated-device tests train on (the CUDA emulator runs a
few steps a second)."""
import gzip
import os
import struct
import sys

src, dst, ntrain, ntest = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
os.makedirs(dst, exist_ok=True)


def read(name):
    p = os.path.join(src, name)
    return open(p, 'rb').read() if os.path.exists(p) else gzip.open(p + '.gz').read()


for split, n in (('train', ntrain), ('t10k', ntest)):
    img, lab = read(split + '-images-idx3-ubyte'), read(split + '-labels-idx1-ubyte')
    with open(os.path.join(dst, split + '-images-idx3-ubyte'), 'wb') as f:
        f.write(img[:4] + struct.pack('>I', n) + img[8:16] + img[16:16 + n * 784])
    with open(os.path.join(dst, split + '-labels-idx1-ubyte'), 'wb') as f:
        f.write(lab[:4] + struct.pack('>I', n) + lab[8:8 + n])
