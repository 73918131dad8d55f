#!/usr/bin/python3
"""Decompression bombs against the npz and IDX readers: each is refused
with one line naming the file and the reason, within 1 s and 100 MB of
memory (the program's peak resident set, from wait4: an upper bound, as
Linux counts this script's own pages at the fork in it), however many
bytes its deflate stream would give.

usage: data_bounds.py DIGITS MNIST

DIGITS is models/digits.net compiled (an npz source: x_train [N, 1, 8, 8]),
MNIST models/mnist.net (IDX). The bombs, each under 1.1 MB on disk:
- mismatch: the zip's directory says 1 GB, the .npy header a small shape
  (before the fix the reader inflated all of it, then refused: about 1 GB
  and 9 s);
- longer: header and directory agree on 8 MB, the stream gives 1 GB;
- shorter: both say 1 GB, the stream ends after 1 MB;
- limit: a consistent 1 GB array of zeros under --data-limit 100M;
- stored: an 8 MB member stored as it is, under --data-limit 4M;
- idx: a 784 MB gzip IDX image file (its header honest) under --data-limit 100M.
"""
import gzip
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
import zlib


GB = 1 << 30
passes = fails = 0


def result(ok, name, msg):
    global passes, fails
    print("%s data-bounds: %s: %s" % ("PASS" if ok else "FAIL", name, msg))
    if ok:
        passes += 1
    else:
        fails += 1


def npy_header(shape, descr="|u1"):
    h = ("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" %
         (descr, "".join("%d, " % d for d in shape))).encode()
    h += b" " * (63 - (10 + len(h)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h


def deflate(head, zeros, wbits=-15):
    """a deflate stream of head and then zeros zero bytes (a multiple of
    1 MiB): one flushed segment of 1 MiB of zeros repeated, as a full flush
    resets the compressor, so that a gigabyte takes no time to write"""
    c = zlib.compressobj(9, zlib.DEFLATED, wbits)
    first = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)
    seg = c.compress(bytes(1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
    assert zeros % (1 << 20) == 0
    return first + seg * (zeros >> 20) + c.flush()


def write_zip(path, members, method=8):
    """members: (name, deflated bytes, crc, declared uncompressed size);
    the bombs' crcs are 0: they are refused before any check of them"""
    local, central, at = [], [], 0
    for name, data, crc, usize in members:
        n = name.encode()
        lh = struct.pack("<IHHHHHIIIHH", 0x04034b50, 20, 0, method, 0, 0, crc, len(data), usize, len(n), 0) + n
        central.append(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014b50, 20, 20, 0, method, 0, 0, crc, len(data), usize,
                                   len(n), 0, 0, 0, 0, 0, at) + n)
        local.append(lh + data)
        at += len(lh) + len(data)
    cd = b"".join(central)
    eocd = struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, len(members), len(members), len(cd), at, 0)
    with open(path, "wb") as f:
        f.write(b"".join(local) + cd + eocd)


def labels(n):
    h = npy_header((n,), "<i8")
    return ("y_train.npy", deflate(h, 0) if n < 1 << 17 else deflate(h, n * 8), 0, len(h) + n * 8)


def run_measured(cmd):
    """cmd's exit status, stderr, seconds and peak resident MB"""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    return os.waitstatus_to_exitcode(status), err.decode("utf-8", "replace"), time.monotonic() - t0, ru.ru_maxrss / 1024


# under ASan (make test SAN=1) a program starts slower and its shadow
# memory and quarantine count in its resident set: the bounds scale
SLACK = 1


def check(name, cmd, data, reason):
    rc, err, secs, rss = run_measured(cmd)
    lines = err.splitlines()
    msg = "%.2f s, %.0f MB peak, file %.0f KB: %s" % (secs, rss, os.path.getsize(data) / 1024, " | ".join(lines)[:400])
    if rc != 1:
        result(False, name, "exit status %d, expected 1 (%s)" % (rc, msg))
    elif len(lines) != 1 or data not in err or not re.search(reason, err):
        result(False, name, "expected one line naming the file and /%s/ (%s)" % (reason, msg))
    elif secs > 1.0 * SLACK or rss > 100 * SLACK:
        result(False, name, "over the bounds of %g s and %d MB (%s)" % (SLACK, 100 * SLACK, msg))
    else:
        result(True, name, msg)


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    digits, mnist = argv[1], argv[2]
    global SLACK
    with open(digits, "rb") as f:
        if b"__asan_init" in f.read():
            SLACK = 3
    tmp = tempfile.mkdtemp(prefix="cddpc-bounds-")
    run = lambda prog, data, *extra: [prog, "--threads", "1", "--epochs", "1", "--max-steps", "1",
                                      "--data", data] + list(extra)

    big = GB // 64                          # samples of 64 bytes: a 1 GB x_train
    p = os.path.join(tmp, "mismatch.npz")
    h = npy_header((10, 1, 8, 8))
    write_zip(p, [("x_train.npy", deflate(h, GB), 0, len(h) + GB), labels(10)])
    check("mismatch", run(digits, p), p, r"x_train\.npy: its \.npy header declares 640 data bytes, the zip's")

    p = os.path.join(tmp, "longer.npz")
    n = (8 << 20) // 64
    h = npy_header((n, 1, 8, 8))
    write_zip(p, [("x_train.npy", deflate(h, GB), 0, len(h) + n * 64), labels(n)])
    check("longer", run(digits, p), p, r"x_train\.npy inflates to more than the \d+ bytes its header says")

    p = os.path.join(tmp, "shorter.npz")
    h = npy_header((big, 1, 8, 8))
    # padded after the stream's end (which inflate ignores) past the ratio
    # of 1100:1 that deflate cannot exceed, which refuses it otherwise
    write_zip(p, [("x_train.npy", deflate(h, 1 << 20) + bytes(1 << 20), 0, len(h) + GB), labels(10)])
    check("shorter", run(digits, p), p, r"x_train\.npy (inflates to \d+ bytes, its header says|is truncated)")

    p = os.path.join(tmp, "limit.npz")
    write_zip(p, [("x_train.npy", deflate(h, GB), 0, len(h) + GB), labels(big)])
    check("limit", run(digits, p, "--data-limit", "100M"), p,
          r"x_train\.npy needs 1\.0 GiB once read, over the data limit of 100\.0 MiB \(--data-limit SIZE raises it\)")

    # a stored (not deflated) member: 8 MB under --data-limit 4M
    p = os.path.join(tmp, "stored.npz")
    n = (8 << 20) // 64
    h = npy_header((n, 1, 8, 8))
    write_zip(p, [("x_train.npy", h + bytes(n * 64), 0, len(h) + n * 64)], method=0)
    check("stored", run(digits, p, "--data-limit", "4M"), p,
          r"x_train\.npy needs 8\.0 MiB once read, over the data limit of 4\.0 MiB")

    # IDX: a gzip file of 1 GB of images, its header honest
    idx = os.path.join(tmp, "idx")
    os.mkdir(idx)
    n = 1 << 20                             # 784 MiB of images
    with open(os.path.join(idx, "train-images-idx3-ubyte.gz"), "wb") as f:
        f.write(deflate(struct.pack(">IIII", 0x803, n, 28, 28), n * 784, 31))
    with gzip.open(os.path.join(idx, "train-labels-idx1-ubyte.gz"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(n))
    for part in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        os.symlink(os.path.join(idx, part.replace("t10k", "train") + ".gz"), os.path.join(idx, part + ".gz"))
    p = os.path.join(idx, "train-images-idx3-ubyte.gz")
    check("idx", run(mnist, idx, "--data-limit", "100M"), p, r"its data needs 784\.0 MiB once read, over the data "
          r"limit of 100\.0 MiB")

    # the limit's flag itself
    for bad in ("0", "-1G", "12Q", "G", "1e30T", "0x10M"):
        rc, err, _, _ = run_measured(run(digits, "x.npz", "--data-limit", bad))
        ok = rc == 2 and "--data-limit" in err
        result(ok, "flag %s" % bad, " | ".join(err.splitlines())[:200])
    print("data-bounds: %d passed, %d failed" % (passes, fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
