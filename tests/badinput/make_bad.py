"""make_bad.py: builds the bad-input catalogue for tests/badinput/run.sh.

  make_bad.py data SRC_DIR OUT_DIR
      OUT_DIR/good/      a small valid dataset (first 512 train / 256 test
                         samples of SRC_DIR's Fashion-MNIST), so a program
                         can be run quickly on it
      OUT_DIR/<case>/    one broken copy per case
      OUT_DIR/manifest   case <TAB> data dir <TAB> path the message must name
                         <TAB> regex the message must match (the reason)
  make_bad.py st VALID.safetensors OUT_DIR
      broken variants of a valid checkpoint (written by the program itself,
      so any model works) and OUT_DIR/manifest as above, with the file in
      place of the data dir.

Only the Python standard library is used (gzip, json, struct).
"""
import gzip
import json
import os
import re
import struct
import sys

NAMES = {
    "train_img": "train-images-idx3-ubyte",
    "train_lab": "train-labels-idx1-ubyte",
    "test_img": "t10k-images-idx3-ubyte",
    "test_lab": "t10k-labels-idx1-ubyte",
}


def read_idx(src_dir, name):
    for p in (os.path.join(src_dir, name), os.path.join(src_dir, name + ".gz")):
        if os.path.exists(p):
            with (gzip.open(p, "rb") if p.endswith(".gz") else open(p, "rb")) as f:
                return f.read()
    sys.exit("make_bad.py: %s not found in %s" % (name, src_dir))


def idx(magic_dims, dims, payload):
    return struct.pack(">I", 0x800 | magic_dims) + b"".join(struct.pack(">I", d) for d in dims) + payload


def images(raw, n, rows=28, cols=28):
    count, r, c = struct.unpack(">III", raw[4:16])
    assert (r, c) == (28, 28), "source images must be 28x28"
    px = raw[16:16 + n * r * c]
    if (rows, cols) == (14, 14):    # 2x2 subsampling keeps it image-like
        out = bytearray()
        for i in range(n):
            img = px[i * 784:(i + 1) * 784]
            out += bytes(img[y * 28 + x] for y in range(0, 28, 2) for x in range(0, 28, 2))
        px = bytes(out)
    return idx(3, (n, rows, cols), px)


def labels(raw, n, patch=None):
    lab = bytearray(raw[8:8 + n])
    if patch:
        lab[patch[0]] = patch[1]
    return idx(1, (n,), bytes(lab))


def write(dirpath, files, gz=()):
    """files: key -> bytes; keys in gz are written compressed."""
    os.makedirs(dirpath, exist_ok=True)
    for key, data in files.items():
        if data is None:
            continue
        name = NAMES[key]
        if key in gz:
            with open(os.path.join(dirpath, name + ".gz"), "wb") as f:
                f.write(gzip.compress(data, mtime=0))
        else:
            with open(os.path.join(dirpath, name), "wb") as f:
                f.write(data)


def make_data(src, out):
    NTR, NTE = 512, 256
    ti, tl = read_idx(src, NAMES["train_img"]), read_idx(src, NAMES["train_lab"])
    ei, el = read_idx(src, NAMES["test_img"]), read_idx(src, NAMES["test_lab"])
    good = {"train_img": images(ti, NTR), "train_lab": labels(tl, NTR),
            "test_img": images(ei, NTE), "test_lab": labels(el, NTE)}
    allgz = tuple(good)
    man = []

    def case(name, files, gz, path_key, reason, use_gz_name=None):
        d = os.path.join(out, name)
        write(d, files, gz)
        key_gz = path_key in gz if use_gz_name is None else use_gz_name
        p = os.path.join(d, NAMES[path_key] + (".gz" if key_gz else ""))
        man.append((name, d, p, reason))

    write(os.path.join(out, "good"), good, gz=("train_img", "test_lab"))   # mixed plain/gz
    man.append(("missing_dir", os.path.join(out, "no-such-dir"), os.path.join(out, "no-such-dir"),
                "no such file|not found|does not exist"))
    case("missing_file", dict(good, test_lab=None), allgz, "test_lab",
         "no such file|not found|does not exist|cannot open", use_gz_name=False)
    bad = bytearray(good["train_lab"]); bad[3] = 0x03                    # image magic on labels
    case("wrong_magic", dict(good, train_lab=bytes(bad)), (), "train_lab", "magic")
    bad = bytearray(good["train_img"]); bad[2] = 0x0A                    # no IDX type has code 0x0A
    case("wrong_magic_type", dict(good, train_img=bytes(bad)), (), "train_img",
         "unknown element type 0x0a in magic number")
    bad = bytearray(good["train_img"]); bad[2] = 0x0D                    # float type code, bytes after it
    case("float_type_short", dict(good, train_img=bytes(bad)), (), "train_img", "truncated")
    lab = struct.unpack(">%dB" % NTE, good["test_lab"][8:])             # the labels as floats: a regression file
    flab = b"\x00\x00\x0d\x01" + struct.pack(">I", NTE) + struct.pack(">%df" % NTE, *lab)
    case("float_labels_classifier", dict(good, test_lab=flab), (), "test_lab",
         "holds float targets of 1 per sample, but model '[A-Za-z0-9_]+' is a classifier")
    n = NTR * 784                                                        # float images with one NaN
    fimg = bytearray(b"\x00\x00\x0d\x03" + struct.pack(">III", NTR, 28, 28) + struct.pack(">%df" % n, *([0.5] * n)))
    fimg[16 + 4 * 1000:16 + 4 * 1001] = struct.pack(">f", float("nan"))
    case("nan_image", dict(good, train_img=bytes(fimg)), (), "train_img", "element 1000 is nan, not a finite float")
    case("truncated_plain", dict(good, test_img=good["test_img"][:16 + 784 * 100 + 300]), (),
         "test_img", "truncated")
    case("truncated_header", dict(good, train_img=good["train_img"][:10]), (), "train_img",
         "truncated")
    case("extra_bytes", dict(good, test_lab=good["test_lab"] + b"\x00\x01"), (), "test_lab",
         "unexpected data|trailing|extra")
    # gzip: cut the compressed stream, and flip bytes inside it
    d = os.path.join(out, "truncated_gz")
    write(d, good, allgz)
    p = os.path.join(d, NAMES["train_img"] + ".gz")
    z = open(p, "rb").read()
    open(p, "wb").write(z[:len(z) // 2])
    man.append(("truncated_gz", d, p, "truncated|unexpected end"))
    d = os.path.join(out, "corrupt_gz")
    write(d, good, allgz)
    p = os.path.join(d, NAMES["train_img"] + ".gz")
    z = bytearray(open(p, "rb").read())
    mid = len(z) // 2
    for i in range(mid, mid + 64):
        z[i] ^= 0xA5
    open(p, "wb").write(bytes(z))
    man.append(("corrupt_gz", d, p, "invalid|incorrect|corrupt|crc|data error"))
    d = os.path.join(out, "corrupt_gz_crc")      # payload intact, trailer CRC wrong
    write(d, good, allgz)
    p = os.path.join(d, NAMES["test_lab"] + ".gz")
    z = bytearray(open(p, "rb").read())
    z[-8] ^= 0xFF
    open(p, "wb").write(bytes(z))
    man.append(("corrupt_gz_crc", d, p, "incorrect data check|crc|corrupt"))
    case("count_mismatch", dict(good, train_lab=labels(tl, NTR - 1)), allgz, "train_lab",
         "match")
    case("label_range", dict(good, test_lab=labels(el, NTE, patch=(5, 255))), allgz, "test_lab",
         "label 255 at index 5 is out of range for [0-9]+ classes")
    case("wrong_size", dict(good, train_img=images(ti, NTR, 14, 14)), allgz, "train_img",
         "14x14.*196.*784|196.*784")
    case("empty_file", dict(good, train_lab=b""), (), "train_lab", "truncated|empty")
    with open(os.path.join(out, "manifest"), "w") as f:
        for m in man:
            f.write("\t".join(m) + "\n")


def read_st(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    return raw, n, header


def write_st(path, header, blobs):
    """header: name -> entry without offsets, in order; blobs: name -> bytes."""
    h, off = {}, 0
    for name, e in header.items():
        if name == "__metadata__":
            h[name] = e
            continue
        e = dict(e)
        e["data_offsets"] = [off, off + len(blobs[name])]
        off += len(blobs[name])
        h[name] = e
    hb = json.dumps(h, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for name in h:
            if name != "__metadata__":
                f.write(blobs[name])


def make_st(valid, out):
    os.makedirs(out, exist_ok=True)
    raw, n, header = read_st(valid)
    data = raw[8 + n:]
    names = [k for k in header if k != "__metadata__"]
    blobs = {k: data[header[k]["data_offsets"][0]:header[k]["data_offsets"][1]] for k in names}
    first = names[0]
    q = re.escape(first)
    man = []

    def case(name, hdr, bl, reason):
        p = os.path.join(out, name + ".safetensors")
        write_st(p, hdr, bl)
        man.append((name, p, p, reason))

    case("st_missing_tensor", {k: v for k, v in header.items() if k != first}, blobs,
         'missing tensor "%s"' % q)
    # a renamed layer: the message names what is missing AND what is there
    # instead (as load_state_dict(strict=True) does)
    case("st_renamed_tensor", {("renamed." + k if k == first else k): v for k, v in header.items()},
         {("renamed." + k if k == first else k): v for k, v in blobs.items()},
         'missing tensor "%s" \\(1 of the model.s [0-9]+\\); unexpected in the file: "renamed\\.%s"' % (q, q))
    shape = header[first]["shape"]
    numel = 1
    for s in shape:
        numel *= s
    wrong = [numel] + [1] if len(shape) == 1 else [numel]    # same bytes, other shape
    hdr = dict(header)
    hdr[first] = dict(header[first], shape=wrong)
    case("st_wrong_shape", hdr, blobs, '"%s".*shape' % q)
    hdr = dict(header)
    hdr[first] = dict(header[first], dtype="F64")
    f64 = b"".join(struct.pack("<d", x) for (x,) in struct.iter_unpack("<f", blobs[first]))
    case("st_wrong_dtype", hdr, dict(blobs, **{first: f64}), '"%s".*dtype.*F64' % q)
    # corrupt header: a JSON text cut short (same length, space padded)
    hb = raw[8:8 + n].rstrip(b" ")
    bad = hb[:len(hb) // 2] + b" " * (n - len(hb) // 2)
    p = os.path.join(out, "st_corrupt_header.safetensors")
    open(p, "wb").write(raw[:8] + bad + data)
    man.append(("st_corrupt_header", p, p, "corrupt header|header.*(json|invalid|unexpected)"))
    p = os.path.join(out, "st_not_json.safetensors")
    open(p, "wb").write(raw[:8] + b"\xff" * n + data)
    man.append(("st_not_json", p, p, "corrupt header"))
    p = os.path.join(out, "st_header_too_long.safetensors")
    open(p, "wb").write(struct.pack("<Q", len(raw) + 100) + raw[8:])
    man.append(("st_header_too_long", p, p, "header length.*(larger|longer|exceeds|past)"))
    p = os.path.join(out, "st_truncated_data.safetensors")
    open(p, "wb").write(raw[:len(raw) - 5])
    man.append(("st_truncated_data", p, p, "truncated|outside|corrupt"))
    p = os.path.join(out, "st_tiny.safetensors")
    open(p, "wb").write(b"\x01\x02\x03")
    man.append(("st_tiny", p, p, "truncated|too short"))
    with open(os.path.join(out, "manifest"), "w") as f:
        for m in man:
            f.write("\t".join(m) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("data", "st"):
        sys.exit(__doc__)
    (make_data if sys.argv[1] == "data" else make_st)(sys.argv[2], sys.argv[3])
