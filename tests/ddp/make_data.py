#!/usr/bin/python3
"""make_data.py SRC OUT: small datasets for tests/ddp/run.sh.

  OUT/small/   the first 1000 train / 500 test samples of SRC (valid; fewer
               samples than SRC, for the dataset-size agreement check)
  OUT/bad/     SRC's files, but the training labels' header declares one
               label fewer than there are images (a count mismatch the
               loader rejects)
Standard library only.
"""
import gzip
import os
import struct
import sys

NAMES = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte",
         "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]


def read(src, name):
    for p in (os.path.join(src, name), os.path.join(src, name + ".gz")):
        if os.path.exists(p):
            with (gzip.open(p, "rb") if p.endswith(".gz") else open(p, "rb")) as f:
                return f.read()
    sys.exit("make_data.py: %s not in %s" % (name, src))


def head(raw, n):
    ndim = raw[3]
    dims = list(struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim]))
    each = 1
    for d in dims[1:]:
        each *= d
    dims[0] = n
    hdr = raw[:4] + b"".join(struct.pack(">I", d) for d in dims)
    return hdr + raw[4 + 4 * ndim:4 + 4 * ndim + n * each]


def main():
    src, out = sys.argv[1], sys.argv[2]
    for sub in ("small", "bad"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    for name in NAMES:
        raw = read(src, name)
        n = 1000 if name.startswith("train") else 500
        with open(os.path.join(out, "small", name), "wb") as f:
            f.write(head(raw, n))
        if name == "train-labels-idx1-ubyte":
            count = struct.unpack(">I", raw[4:8])[0]
            raw = raw[:4] + struct.pack(">I", count - 1) + raw[8:8 + count - 1]
        with open(os.path.join(out, "bad", name), "wb") as f:
            f.write(raw)


if __name__ == "__main__":
    main()
