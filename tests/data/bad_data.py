#!/usr/bin/python3
"""The bad-data catalogue of the npz and csv readers, the split and the
IDX directory lookup.

usage: bad_data.py DIGITS IRIS MNIST MNIST_DIR DATA_VIEW

DIGITS and IRIS are models/digits.net and models/iris.net compiled (an npz
source with a test set; a csv source with split = 0.2), MNIST is
models/mnist.net compiled and MNIST_DIR holds its four IDX files;
DATA_VIEW (tests/data/data_view.c) stands in for a model with float
targets in the cases of float targets. The
good files (scikit-learn's digits and iris, written by
scripts/sklearn_data.py) must train; each broken one must make the
program exit with status 1 and print ONE line on stderr that names the
file, the place (array, line, column) and the reason: never a crash, a
hang or training on garbage. Two good cases besides: torchvision's
layout (DIR/MNIST/raw/...) is found, and an IDX directory without t10k
files is refused with a message that says to add split.
"""
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
passes = fails = 0


def result(ok, name, msg):
    global passes, fails
    print("%s bad-data: %s: %s" % ("PASS" if ok else "FAIL", name, msg))
    if ok:
        passes += 1
    else:
        fails += 1


def run(prog, args):
    if isinstance(prog, list):      # data_view and its arguments
        cmd = prog[:2] + args[1:] + prog[2:]
    else:
        cmd = [prog, "--threads", "1", "--epochs", "1", "--max-steps", "1"] + args
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def expect(name, prog, data, path, reason):
    rc, out, err = run(prog, ["--data", data])
    lines = err.splitlines()
    msg = " | ".join(lines)[:600]
    if rc != 1:
        result(False, name, "exit status %d, expected 1 (stderr: %s)" % (rc, msg))
    elif len(lines) != 1:
        result(False, name, "%d lines on stderr, expected one (%s)" % (len(lines), msg))
    elif path not in err:
        result(False, name, "message does not name %s (%s)" % (path, msg))
    elif not re.search(reason, err, re.I):
        result(False, name, "message does not give the reason /%s/ (%s)" % (reason, msg))
    elif "Sanitizer" in err or "runtime error" in err:
        result(False, name, "sanitizer report")
    else:
        result(True, name, msg)


def npy_bytes(a, version=None, header=None):
    """a as .npy bytes; header replaces the dict text when given"""
    f = io.BytesIO()
    np.lib.format.write_array(f, a, version=version)
    b = f.getvalue()
    if header is not None:
        h = header.encode("latin1")
        pad = 64 - (10 + len(h) + 1) % 64
        h = h + b" " * (pad % 64) + b"\n"
        b = b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h + a.tobytes()
    return b


def write_zip(path, members, compress=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression=compress) as z:
        for k, v in members.items():
            z.writestr(k + ".npy", v if isinstance(v, bytes) else npy_bytes(v))


def main(argv):
    if len(argv) != 5:
        sys.stderr.write(__doc__)
        return 2
    digits, iris, mnist, mnist_dir, view = [os.path.abspath(a) for a in argv]
    tmp = tempfile.mkdtemp(prefix="cddpc-bad-data-")
    subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "scripts", "sklearn_data.py"), tmp], check=True)
    good_npz, good_csv = os.path.join(tmp, "digits.npz"), os.path.join(tmp, "iris.csv")
    z = np.load(good_npz)
    A = {k: z[k] for k in ("x_train", "y_train", "x_test", "y_test")}
    for prog, data in ((digits, good_npz), (iris, good_csv)):
        rc, out, err = run(prog, ["--data", data])
        result(rc == 0, "good " + os.path.basename(data) + " trains", err.strip()[:300] or "ok")
    if fails:
        return 1

    def npz(name, **changes):
        p = os.path.join(tmp, name + ".npz")
        m = dict(A)
        for k, v in changes.items():
            if v is None:
                del m[k]
            else:
                m[k] = v
        write_zip(p, m)
        return p

    p = os.path.join(tmp, "none.npz")
    expect("npz missing file", digits, p, p, "no such file")
    p = os.path.join(tmp, "text.npz")
    open(p, "w").write("x_train,y_train\n1,2\n")
    expect("npz not a zip", digits, p, p, "not an .npz")
    p = os.path.join(tmp, "single.npz")
    np.save(p[:-4], A["x_train"])
    os.replace(p[:-4] + ".npy", p)
    expect("npz a single .npy", digits, p, p, r"single \.npy")
    p = os.path.join(tmp, "cut.npz")
    b = open(good_npz, "rb").read()
    open(p, "wb").write(b[:len(b) // 2])
    expect("npz truncated archive", digits, p, p, "truncated|end of central directory")
    p = os.path.join(tmp, "flipped.npz")
    bb = bytearray(b)
    for i in range(200, 260):
        bb[i] ^= 0x5A
    open(p, "wb").write(bytes(bb))
    expect("npz corrupt deflate data", digits, p, p, "x_train.npy.*(corrupt|CRC|truncated|inflates)")
    # ZIP64 (members over 4 GiB, over 65535 arrays): refused, said so. The
    # forms patched in: numpy writes 0xffffffff sizes in the central
    # directory only for such members, and 0xffff entries in the end record
    # only for that many arrays.
    import struct
    bb = bytearray(open(npz("zip64m"), "rb").read())
    cd = bytes(bb).index(b"PK\x01\x02")
    bb[cd + 20:cd + 28] = struct.pack("<II", 0xffffffff, 0xffffffff)     # compressed, uncompressed size
    p = os.path.join(tmp, "zip64m.npz")
    open(p, "wb").write(bytes(bb))
    expect("npz ZIP64 member", digits, p, p, "ZIP64")
    bb = bytearray(open(npz("zip64e"), "rb").read())
    eocd = bytes(bb).rindex(b"PK\x05\x06")
    bb[eocd + 8:eocd + 12] = struct.pack("<HH", 0xffff, 0xffff)            # entries on disk, in all
    p = os.path.join(tmp, "zip64e.npz")
    open(p, "wb").write(bytes(bb))
    expect("npz ZIP64 archive", digits, p, p, "ZIP64")
    x = A["x_train"]
    p = npz("crc")
    bb = bytearray(open(p, "rb").read())
    at = bytes(bb).index(x.tobytes()[:64]) + 100     # inside x_train's stored data
    bb[at] ^= 0x01
    open(p, "wb").write(bytes(bb))
    expect("npz member fails its CRC", digits, p, p, r"member x_train\.npy fails its CRC")
    short = npy_bytes(x)[:-100]
    p = npz("short_member", x_train=short)
    expect("npz truncated member", digits, p, p, r"x_train\.npy.*need \d+ data bytes.*truncated")
    p = npz("complex", x_train=x.astype(np.complex64))
    expect("npz element type", digits, p, p, r"x_train\.npy.*dtype '<c8'.*cannot read")
    p = npz("bigendian", x_train=x.astype(">f4"))
    expect("npz big-endian", digits, p, p, r"x_train\.npy.*dtype '>f4'")
    p = npz("fortran", x_train=npy_bytes(x, header="{'descr': '<f4', 'fortran_order': True, 'shape': (%d, 1, 8, 8), }"
                                         % len(x)))
    expect("npz fortran order", digits, p, p, r"x_train\.npy.*Fortran order")
    p = npz("version9", x_train=b"\x93NUMPY\x09\x00" + npy_bytes(x)[8:])
    expect("npz npy version", digits, p, p, r"x_train\.npy.*version 9")
    p = npz("badheader", x_train=npy_bytes(x, header="{'descr': '<f4', 'shape': [1347, 64]}"))
    expect("npz malformed header", digits, p, p, r"x_train\.npy.*malformed")
    p = npz("counts", y_train=A["y_train"][:-1])
    expect("npz x and y counts differ", digits, p, p, r"y_train.*1346.*x_train has 1347.*counts must match")
    y = A["y_train"].copy()
    y[5] = 10
    p = npz("label", y_train=y)
    expect("npz label out of range", digits, p, p, r"y_train sample 5: label 10 is out of range for 10 classes")
    p = npz("floatlabel", y_train=A["y_train"].astype(np.float32))
    expect("npz float labels for classes", digits, p, p, "y_train holds float32.*class indices")
    p = npz("shape", x_train=x[:, :, :7, :7].copy())
    expect("npz shape does not fit the model", digits, p, p, r"x_train has shape \[1347, 1, 7, 7\], 1x7x7 = 49 values per sample, but model 'DigitsNet' "
           r"expects 1x8x8 = 64")
    xn = x.copy()
    xn[3, 0, 2, 2] = np.nan
    p = npz("nan", x_train=xn)
    expect("npz NaN in x", digits, p, p, r"x_train sample 3, element 18 is NaN")
    xn[3, 0, 2, 2] = np.inf
    p = npz("inf", x_train=xn)
    expect("npz inf in x", digits, p, p, r"x_train sample 3, element 18 is infinite")
    p = npz("noy", y_train=None)
    expect("npz missing array", digits, p, p, r"no array 'y_train' .*; its arrays: 'x_train', 'x_test', 'y_test'")
    p = npz("halftest", y_test=None)
    expect("npz x_test without y_test", digits, p, p, r"x_test.*y_test.*both")
    p = npz("notest", x_test=None, y_test=None)
    expect("npz no test set and no split", digits, p, p, r"no test set.*add split")
    p = npz("testshape", x_test=A["x_test"].reshape(-1, 64)[:, :63].copy())
    expect("npz test shape differs", digits, p, p, r"x_test has shape \[450, 63\].*expects 1x8x8 = 64")

    # ---- csv: iris.net (target species, split = 0.2) ----
    lines = open(good_csv).read().split("\n")

    def csv_file(name, text):
        p = os.path.join(tmp, name + ".csv")
        open(p, "w").write(text)
        return p

    def edit(name, lineno, new):
        ls = list(lines)
        ls[lineno - 1] = new
        return csv_file(name, "\n".join(ls))

    p = os.path.join(tmp, "none.csv")
    expect("csv missing file", iris, p, p, "no such file")
    p = edit("ragged", 5, "4.6,3.1,1.5,setosa")
    expect("csv ragged row", iris, p, p, r"line 5: 4 fields, but the header has 5 columns")
    p = edit("text", 7, "5.4,3.9,1.7,abc,setosa")
    expect("csv non-numeric cell", iris, p, p, r"line 7, column 'petal_width': 'abc' is not a number")
    p = edit("empty_cell", 8, "4.6,,1.4,0.3,setosa")
    expect("csv empty cell", iris, p, p, r"line 8, column 'sepal_width': '' is not a number")
    p = edit("nan", 9, "5.0,3.4,nan,0.2,setosa")
    expect("csv NaN in features", iris, p, p, r"line 9, column 'petal_length': NaN")
    p = edit("inf", 10, "4.4,-inf,1.4,0.2,setosa")
    expect("csv inf in features", iris, p, p, r"line 10, column 'sepal_width': infinite")
    p = edit("header", 1, "sepal_length,sepal_width,petal_length,petal_width,kind")
    expect("csv missing column", iris, p, p, r"no column 'species' \(the header has 5: 'sepal_length'.*'kind'\)")
    p = edit("dup", 1, "sepal_length,sepal_length,petal_length,petal_width,species")
    expect("csv column named twice", iris, p, p, r"line 1: .*'sepal_length' twice")
    p = edit("classes", 3, "4.7,3.2,1.3,0.2,unknown")
    expect("csv more labels than classes", iris, p, p, r"'species' has 4 distinct labels.*3 classes")
    ls = [l.rsplit(",", 1)[0] + "," + {"setosa": "0", "versicolor": "1", "virginica": "5"}[l.rsplit(",", 1)[1]]
          for l in lines[1:] if l]
    p = csv_file("intlabel", lines[0] + "\n" + "\n".join(ls) + "\n")
    expect("csv label out of range", iris, p, p, r"line 102, column 'species': label 5 is out of range for 3")
    p = csv_file("empty", "")
    expect("csv empty file", iris, p, p, "empty file")
    p = csv_file("headonly", lines[0] + "\n\n")
    expect("csv header only", iris, p, p, "no data rows")
    p = edit("quote", 12, '4.8,3.4,1.6,0.2,"setosa')
    expect("csv quote not closed", iris, p, p, r"line 12: a quoted field is not closed")
    p = csv_file("extra", "\n".join([lines[0] + ",extra"] + [l + ",1" if l else l for l in lines[1:]]))
    expect("csv features do not fit the model", iris, p, p, r"5 feature columns.*expects 4")
    p = edit("multiline", 13, '4.3,"3\n0",1.1,0.1,setosa')
    expect("csv a quoted cell with a line break", iris, p, p, r"line 13, column 'sepal_width': '3\?0' is not a number")
    # numbers are decimal (strtod also reads C's hexadecimal floats); a NUL
    # byte in a cell is named as such, in a feature and in a label
    p = edit("hex", 14, "0x1.2p2,3.0,1.4,0.2,setosa")
    expect("csv hexadecimal float", iris, p, p,
           r"line 14, column 'sepal_length': '0x1.2p2' is a hexadecimal number; numbers in data files are decimal")
    p = edit("nul", 15, "5.1,3\x005,1.4,0.2,setosa")
    expect("csv NUL byte in a feature", iris, p, p, r"line 15, column 'sepal_width': the cell holds a NUL byte at byte 2")
    p = edit("nul_label", 16, "5.1,3.5,1.4,0.2,seto\x00sa")
    expect("csv NUL byte in a label", iris, p, p, r"line 16, column 'species': the cell holds a NUL byte at byte 5")
    # a header of 160,000 columns: its duplicates and names found in
    # O(n log n) (compared pairwise, the reader took 59 s); under 1 s
    # (about 0.1 s here) though the machine is busy, and a duplicate at
    # its end still named
    import time
    wide = ["c%d" % i for i in range(160000)]
    p = csv_file("wide", ",".join(wide + ["species"]) + "\n" + ",".join(["1"] * 160000 + ["setosa"]) + "\n")
    t0 = time.monotonic()
    expect("csv 160,000 columns", iris, p, p, r"160000 feature columns, but model 'IrisNet' expects")
    dt = time.monotonic() - t0
    result(dt < 1.0, "csv 160,000 columns read under 1 s", "%.2f s" % dt)
    p = csv_file("wide_dup", ",".join(wide + ["c159998", "species"]) + "\n")
    expect("csv 160,000 columns, one named twice", iris, p, p, r"line 1: the header names column 'c159998' twice")
    p = csv_file("tiny", lines[0] + "\n" + lines[1] + "\n" + lines[60] + "\n")
    expect("csv split leaves a part empty", iris, p, p, r"split = 0.2 of 2 samples leaves the test set empty")

    # float targets (diabetes.csv's 'progression'), through data_view
    dia = open(os.path.join(tmp, "diabetes.csv")).read().split("\n")
    fl = [view, "csv", "float", "1", "10", "progression"]

    def dia_edit(name, lineno, cell):
        ls = list(dia)
        ls[lineno - 1] = ls[lineno - 1].rsplit(",", 1)[0] + "," + cell
        return csv_file(name, "\n".join(ls))

    p = dia_edit("target_text", 4, "high")
    expect("csv float target not a number", fl, p, p, r"line 4, column 'progression': 'high' is not a number")
    p = dia_edit("target_hex", 5, "0x10")
    expect("csv float target hexadecimal", fl, p, p, r"line 5, column 'progression': '0x10' is a hexadecimal number")
    p = dia_edit("target_nan", 6, "nan")
    expect("csv float target NaN", fl, p, p, r"line 6, column 'progression': the target is NaN")
    p = dia_edit("target_inf", 7, "1e999")
    expect("csv float target inf", fl, p, p, r"line 7, column 'progression': the target is infinite")
    p = os.path.join(tmp, "diabetes.csv")
    expect("csv targets do not fit the model", [view, "csv", "float", "2", "10", "progression"], p, p,
           r"1 target column, but model 'view' outputs 2 values")
    yf = np.random.RandomState(0).rand(len(A["x_train"]), 2)
    p = npz("ywidth", y_train=yf)
    expect("npz float targets do not fit the model", [view, "npz", "float", "3", "64"], p, p,
           r"y_train has shape \[1347, 2\], but model 'view' outputs 3 values")
    yf[7, 1] = np.nan
    p = npz("ynan", y_train=yf)
    expect("npz NaN in float targets", [view, "npz", "float", "2", "64"], p, p, r"y_train sample 7, target 1 is NaN")

    # ---- idx: torchvision's layout, no t10k ----
    tv = os.path.join(tmp, "torchvision")
    os.makedirs(os.path.join(tv, "MNIST", "raw"))
    names = sorted(os.listdir(mnist_dir))
    for f in names:
        if "idx" in f:
            os.symlink(os.path.join(mnist_dir, f), os.path.join(tv, "MNIST", "raw", f))
    rc, out, err = run(mnist, ["--data", tv])
    result(rc == 0, "idx torchvision layout DIR/MNIST/raw found", err.strip()[:300] or "ok")
    nt = os.path.join(tmp, "notest")
    os.makedirs(nt)
    for f in names:
        if f.startswith("train-"):
            os.symlink(os.path.join(mnist_dir, f), os.path.join(nt, f))
    expect("idx no t10k files and no split", mnist, nt, nt, r"no test set.*t10k.*add split")

    print("bad-data: %d passed, %d failed" % (passes, fails))
    if not fails:
        shutil.rmtree(tmp)
    else:
        print("bad-data: files kept in %s" % tmp)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
