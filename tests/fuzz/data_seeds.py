#!/usr/bin/python3
"""tests/fuzz/data_seeds.py [CDDPC]: writes the seed inputs of the data
readers' fuzz harnesses into tests/fuzz/data_seeds/{npz,csv,idx,st}/
(checked in; rerun after changing a harness's input layout). With CDDPC,
the st seeds too: tests/fuzz/data_st_seed.net's --save and --checkpoint
files. Each input is the harness's
selector byte (bit 0: float targets; npz bit 1: one target per sample;
csv bit 1: named features) and a small file as numpy and Python's csv
module write them."""
import csv
import gzip
import io
import os
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data_seeds")


def npz_bytes(save, **arrays):
    f = io.BytesIO()
    save(f, **arrays)
    return f.getvalue()


def put(kind, name, sel, body):
    os.makedirs(os.path.join(OUT, kind), exist_ok=True)
    with open(os.path.join(OUT, kind, name), "wb") as f:
        f.write((bytes([sel]) if sel is not None else b"") + body)


def st_seeds(cddpc):
    tmp = tempfile.mkdtemp(prefix="cddpc-st-seeds-")
    r = np.random.RandomState(0)
    np.savez(os.path.join(tmp, "tiny.npz"), x_train=r.rand(8, 4).astype(np.float32),
             y_train=r.randint(0, 3, 8), x_test=r.rand(4, 4).astype(np.float32), y_test=r.randint(0, 3, 4))
    prog = os.path.join(tmp, "tiny")
    subprocess.run([cddpc, os.path.join(os.path.dirname(OUT), "data_st_seed.net"), "-o", prog], check=True)
    subprocess.run([prog, "--data", os.path.join(tmp, "tiny.npz"), "--save", os.path.join(tmp, "save.st"),
                    "--checkpoint", os.path.join(tmp, "ckpt.st"), "--checkpoint-every", "1", "--max-steps", "1",
                    "--threads", "1"], check=True, stdout=subprocess.DEVNULL)
    for n in ("save", "ckpt"):
        with open(os.path.join(tmp, n + ".st"), "rb") as f:
            put("st", n, None, f.read())
    put("st", "save_classes", None, with_classes(os.path.join(tmp, "save.st"), ["ant", "bee", "cat"]))


def with_classes(path, names):
    """path's bytes with a csv target's class map in its metadata, as --save
    writes it for text labels (data.class.I, sorted): --evaluate reads it."""
    import json
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        rest = f.read()
    head["__metadata__"].update({"data.class.%d" % i: c for i, c in enumerate(names)})
    # rewritten: without cddp's checksums, so the reader's checks under them are what it meets
    head["__metadata__"] = {k: v for k, v in head["__metadata__"].items() if not k.startswith('cddp.crc32c.') and k != 'cddp.metadata_crc32c'}
    h = json.dumps(head, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + rest


def idx_file(kind, dims, body):
    return bytes([0, 0, kind, len(dims)]) + b"".join(d.to_bytes(4, "big") for d in dims) + body


def main():
    r = np.random.RandomState(0)
    x = r.rand(3, 1, 2, 2).astype(np.float32)
    y = np.array([0, 2, 1], dtype=np.int64)
    put("npz", "class_compressed", 0, npz_bytes(np.savez_compressed, x_train=x, y_train=y, x_test=x[:2], y_test=y[:2]))
    put("npz", "class_stored_u8", 0, npz_bytes(np.savez, x_train=(x * 255).astype(np.uint8), y_train=y.astype(np.int32)))
    put("npz", "float3", 1, npz_bytes(np.savez, x_train=x.astype(np.float64), y_train=r.rand(3, 3),
                                      x_test=x.astype(np.float64), y_test=r.rand(3, 3).astype(np.float32)))
    put("npz", "float1", 3, npz_bytes(np.savez_compressed, x_train=x.reshape(3, 4), y_train=r.rand(3)))
    f = io.BytesIO()
    with zipfile.ZipFile(f, "w") as z:
        b = io.BytesIO()
        np.lib.format.write_array(b, x, version=(2, 0))
        z.writestr("x_train.npy", b.getvalue())
        b = io.BytesIO()
        np.lib.format.write_array(b, y.astype(np.int16), version=(3, 0))
        z.writestr("y_train.npy", b.getvalue())
    put("npz", "npy_v2_v3", 0, f.getvalue())

    def csv_text(rows, **kw):
        s = io.StringIO()
        csv.writer(s, **kw).writerows(rows)
        return s.getvalue().encode()

    put("csv", "labels", 0, csv_text([["a", "b", "t"], [1.5, 2, "cat"], [0.25, -1e3, "dog"], [3, 4, "bird"]]))
    put("csv", "int_labels_named", 2, csv_text([["t", "b", "x", "a"], [0, 1, "y, z", 2], [2, 3.5, "\"q\"", 4]],
                                                quoting=csv.QUOTE_ALL, lineterminator="\r\n") + b"\r\n\r\n")
    put("csv", "float_targets", 1, csv_text([["a", "t", "b", "u"], [1, 0.5, 2, 1e-3], [3, -1, 4, 7]]))
    put("csv", "float_named_bom", 3, b"\xef\xbb\xbf" + csv_text([["u", "a", "b", "t", "c"],
                                                                ["1", "2", "3", "4", "multi\nline"]]))

    # idx: the first two bytes (little-endian) are the images' length / 4
    def idx_pair(name, img, lab, gz):
        if gz:
            img = gzip.compress(img, mtime=0)
            img += b"\0" * (-len(img) % 4)
        put("idx", name, None, (len(img) // 4).to_bytes(2, "little") + img + lab)

    idx_pair("plain", idx_file(8, [3, 2, 2], bytes(range(12))), idx_file(8, [3], bytes([1, 9, 0])), False)
    idx_pair("gzip", idx_file(8, [3, 2, 2], bytes(range(12))), idx_file(8, [3], bytes([1, 9, 0])), True)

    # large inputs, as real files are: thousands of samples and rows, so
    # that the fuzzer's mutations start from the sizes the readers meet
    n = 4000
    imgs = r.randint(0, 256, (n, 2, 2)).astype(np.uint8)
    labs = r.randint(0, 10, n).astype(np.uint8)
    idx_pair("large_gzip", idx_file(8, [n, 2, 2], imgs.tobytes()), idx_file(8, [n], labs.tobytes()), True)
    idx_pair("large_plain", idx_file(8, [n, 2, 2], imgs.tobytes()), idx_file(8, [n], labs.tobytes()), False)
    xl = r.rand(n, 1, 2, 2).astype(np.float32)
    put("npz", "large_compressed", 0, npz_bytes(np.savez_compressed, x_train=xl, y_train=r.randint(0, 3, n),
                                               x_test=xl[:500], y_test=r.randint(0, 3, 500)))
    put("npz", "large_stored", 1, npz_bytes(np.savez, x_train=xl.astype(np.float64), y_train=r.rand(n, 3)))
    rows = [["a", "t", "b"]] + [["%.6g" % r.randn(), ["cat", "dog", "bird"][i % 3], "%.3e" % r.rand()]
                                for i in range(n)]
    put("csv", "large_labels", 0, csv_text(rows))
    wide = ["c%d" % i for i in range(3000)]
    put("csv", "wide_header", 2, csv_text([wide[:1] + ["t"] + wide[1:], ["1", "0"] + ["2"] * 2999]))


if __name__ == "__main__":
    main()
    if len(sys.argv) > 1:
        st_seeds(sys.argv[1])
