"""st_ref.py: reference safetensors files for test_safetensors.sh, written
by hand with numpy (deliberately not the safetensors package, so the test
does not share code or assumptions with either side).

  st_ref.py write-ref PATH          fc.weight/fc.bias for the fake model plus
                                    an extra I64 tensor and metadata, in an
                                    order different from the runtime's
  st_ref.py check-saved SAVED REF   SAVED is a well-formed safetensors file
                                    holding exactly REF's fc.* tensors
  st_ref.py variants REF OUTDIR     special corrupt files + OUTDIR/manifest
  st_ref.py torch-eval PATH DATADIR test loss/accuracy of those weights,
                                    computed by PyTorch
"""
import gzip
import json
import os
import struct
import sys

import numpy as np

SHAPES = {"fc.weight": (10, 784), "fc.bias": (10,)}


def raw_write(path, header_obj_or_bytes, data, pad=True):
    h = header_obj_or_bytes
    if not isinstance(h, bytes):
        h = json.dumps(h, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def build(tensors, metadata=None):
    """tensors: list of (name, array) in file order -> (header dict, bytes)."""
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    codes = {np.dtype("<f4"): "F32", np.dtype("<f8"): "F64", np.dtype("<i8"): "I64",
             np.dtype("<f2"): "F16"}
    for name, a in tensors:
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": codes[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    return header, b"".join(blobs)


def ref_tensors():
    rng = np.random.default_rng(1234)
    w = (rng.standard_normal((10, 784)) * 0.03).astype("<f4")
    b = (rng.standard_normal(10) * 0.1).astype("<f4")
    # include awkward values: they must survive bit-exactly
    w[0, :6] = [0.0, -0.0, 1e-45, 7.5, -1.1754944e-38, 1.0 / 3.0]
    return w, b


def write_ref(path):
    w, b = ref_tensors()
    extra = np.arange(5, dtype="<i8")
    h, d = build([("fc.bias", b), ("extra.unused", extra), ("fc.weight", w)],
                 {"format": "pt", "note": "written by st_ref.py \"quoted\" \u00e9"})
    raw_write(path, h, d)


def read(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    return raw, n, json.loads(raw[8:8 + n].decode("utf-8"))


def check_saved(saved, ref):
    raw, n, h = read(saved)
    ok = True

    def req(cond, what):
        nonlocal ok
        if not cond:
            print("FAIL safetensors: saved file: " + what)
            ok = False

    req((8 + n) % 8 == 0, "data region not 8-byte aligned (header length %d)" % n)
    req(isinstance(h.get("__metadata__"), dict) and
        all(isinstance(v, str) for v in h["__metadata__"].values()), "__metadata__ must map str->str")
    names = [k for k in h if k != "__metadata__"]
    req(sorted(names) == sorted(SHAPES), "tensor names %s" % names)
    spans = sorted(tuple(h[k]["data_offsets"]) for k in names)
    at = 0
    for a, b in spans:
        req(a == at, "offsets do not tile the data region")
        at = b
    req(at == len(raw) - 8 - n, "data region size %d != %d" % (len(raw) - 8 - n, at))
    rraw, rn, rh = read(ref)
    for k in SHAPES:
        e = h[k]
        req(e["dtype"] == "F32", "%s dtype %s" % (k, e["dtype"]))
        req(tuple(e["shape"]) == SHAPES[k], "%s shape %s" % (k, e["shape"]))
        a, b = e["data_offsets"]
        got = raw[8 + n + a:8 + n + b]
        ra, rb = rh[k]["data_offsets"]
        want = rraw[8 + rn + ra:8 + rn + rb]
        req(got == want, "%s data differs from the reference (bit-exact)" % k)
    if ok:
        print("PASS safetensors: saved file is well-formed and bit-identical to the reference")
    return 0 if ok else 1


def variants(ref, out):
    os.makedirs(out, exist_ok=True)
    w, b = ref_tensors()
    man = []

    def case(name, reason, header, data, pad=True):
        p = os.path.join(out, name + ".safetensors")
        raw_write(p, header, data, pad)
        man.append((name, p, reason))

    h, d = build([("fc.weight", w), ("fc.bias", b)])
    hb = json.dumps(h, separators=(",", ":")).encode()
    # duplicate key, written by hand (json.dumps cannot)
    dup = hb[:-1] + b',"fc.bias":' + json.dumps(h["fc.bias"]).encode() + b"}"
    case("dup_tensor", 'listed twice', dup, d)
    gap = json.loads(hb)
    gap["fc.bias"]["data_offsets"] = [31364, 31404]
    case("gap", "do not tile", gap, d + b"\0" * 4)
    over = json.loads(hb)
    over["fc.bias"]["data_offsets"] = [31356, 31396]
    case("overlap", "do not tile", over, d[:31396])
    size = json.loads(hb)
    size["fc.bias"]["data_offsets"] = [31360, 31396]
    case("offsets_wrong_size", "span", size, d[:31396])
    case("trailing_bytes", "do not tile", h, d + b"\0" * 8)
    rank = json.loads(hb)
    rank["fc.weight"]["shape"] = [10, 784, 1]
    case("wrong_rank", r"shape \[10, 784, 1\], expected \[10, 784\]", rank, d)
    tr = json.loads(hb)
    tr["fc.weight"]["shape"] = [784, 10]
    case("transposed", r"shape \[784, 10\], expected \[10, 784\]", tr, d)
    neg = json.loads(hb)
    neg["fc.weight"]["shape"] = [-10, 784]
    case("negative_dim", "non-negative integers", neg, d)
    fl = json.loads(hb)
    fl["fc.weight"]["shape"] = [10.0, 784]
    case("float_dim", "non-negative integers", fl, d)
    h16, d16 = build([("fc.weight", w.astype("<f2")), ("fc.bias", b)])
    case("f16", "dtype F16, expected F32", h16, d16)
    nodt = json.loads(hb)
    del nodt["fc.weight"]["dtype"]
    case("no_dtype", "needs string", nodt, d)
    case("top_array", "not a JSON object", b"[1,2]   ", d)
    case("nul_padded", "NUL byte", hb + b"\0" * 16, d, pad=False)
    case("bad_escape", "invalid escape", hb.replace(b'"fc.bias"', b'"fc\\qbias"'), d)
    case("zero_len", "too small", b"", d, pad=False)
    p = os.path.join(out, "huge_len.safetensors")
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", 2 ** 64 - 1) + hb + d)
    man.append(("huge_len", p, "header length.*larger than the file"))
    p = os.path.join(out, "half_header.safetensors")
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb[:len(hb) // 2])
    man.append(("half_header", p, "larger than the file"))
    with open(os.path.join(out, "manifest"), "w") as f:
        for m in man:
            f.write("\t".join(m) + "\n")
    return 0


def torch_eval(path, data):
    import torch
    import torch.nn.functional as F

    raw, n, h = read(path)
    sd = {}
    for k in SHAPES:
        a, b = h[k]["data_offsets"]
        sd[k.split(".")[1]] = torch.from_numpy(
            np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<f4").reshape(h[k]["shape"]).copy())
    lin = torch.nn.Linear(784, 10)
    lin.load_state_dict(sd)          # names and shapes must fit PyTorch exactly

    def load(name):
        p = os.path.join(data, name)
        with (gzip.open(p + ".gz") if os.path.exists(p + ".gz") else open(p, "rb")) as f:
            return f.read()
    img = np.frombuffer(load("t10k-images-idx3-ubyte"), np.uint8, offset=16).reshape(-1, 784)
    lab = np.frombuffer(load("t10k-labels-idx1-ubyte"), np.uint8, offset=8)
    x = (torch.from_numpy(img.astype(np.float32)) / 255.0 - 0.2860) / 0.3530
    y = torch.from_numpy(lab.astype(np.int64))
    with torch.no_grad():
        z = lin(x)
        loss = F.cross_entropy(z, y).item()
        acc = (z.argmax(1) == y).double().mean().item()
    print("%.9g %.9g" % (loss, acc))
    return 0


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "write-ref" and len(sys.argv) == 3:
        write_ref(sys.argv[2]); sys.exit(0)
    if cmd == "check-saved" and len(sys.argv) == 4:
        sys.exit(check_saved(sys.argv[2], sys.argv[3]))
    if cmd == "variants" and len(sys.argv) == 4:
        sys.exit(variants(sys.argv[2], sys.argv[3]))
    if cmd == "torch-eval" and len(sys.argv) == 4:
        sys.exit(torch_eval(sys.argv[2], sys.argv[3]))
    sys.exit(__doc__)
