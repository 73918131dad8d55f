"""Minimal safetensors reader/writer in pure Python + NumPy.

Format: 8-byte little-endian u64 N, then N bytes of JSON header, then the
data buffer. The header maps each tensor name to {"dtype", "shape",
"data_offsets": [begin, end]} (byte offsets into the data buffer, which
starts right after the header); an optional "__metadata__" maps str -> str.
Tensors are stored row-major, little-endian, and must tile the buffer
without gaps or overlap. Writers pad the header with spaces so the data
starts at a multiple of 8.

    save(path, {"fc1.weight": np.ndarray, ...}, metadata=None)
    load(path) -> dict name -> np.ndarray       (in file order)
    load_with_metadata(path) -> (dict, metadata or {})
"""
import json
import os
import struct

import numpy as np

DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"), "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
NAMES = {v: k for k, v in DTYPES.items()}


class SafetensorsError(ValueError):
    pass


def _dtype_name(a):
    dt = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
    for k, v in DTYPES.items():
        if v == dt:
            return k, v
    raise SafetensorsError("unsupported dtype %s" % a.dtype)


def save(path, tensors, metadata=None):
    """Write tensors (name -> array-like; torch tensors are accepted via
    .numpy() if they have it) in the given order. Atomic: temp + rename."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs = []
    off = 0
    for name, a in tensors.items():
        if hasattr(a, "detach"):
            a = a.detach().cpu().numpy()
        a = np.asarray(a)
        code, dt = _dtype_name(a)
        b = np.ascontiguousarray(a, dtype=dt).tobytes()
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    tmp = "%s.tmp%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def load_with_metadata(path):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise SafetensorsError("%s: shorter than 8 bytes" % path)
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise SafetensorsError("%s: header length %d past end of file" % (path, n))
    try:
        header = json.loads(raw[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SafetensorsError("%s: bad JSON header: %s" % (path, e))
    if not isinstance(header, dict):
        raise SafetensorsError("%s: header is not an object" % path)
    data = memoryview(raw)[8 + n:]
    meta = header.pop("__metadata__", None) or {}
    out = {}
    spans = []
    for name, info in header.items():
        try:
            dt = DTYPES[info["dtype"]]
            shape = tuple(int(s) for s in info["shape"])
            b, e = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as ex:
            raise SafetensorsError("%s: tensor %r: bad entry %r (%s)" % (path, name, info, ex))
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not (0 <= b <= e <= len(data)) or e - b != count * dt.itemsize:
            raise SafetensorsError("%s: tensor %r: offsets [%d,%d) do not fit shape %s %s"
                                   % (path, name, b, e, list(shape), info["dtype"]))
        spans.append((b, e, name))
        out[name] = np.frombuffer(data[b:e], dtype=dt).reshape(shape).copy()
    spans.sort()
    pos = 0
    for b, e, name in spans:
        if b != pos:
            raise SafetensorsError("%s: tensor %r: gap or overlap at byte %d" % (path, name, b))
        pos = e
    if pos != len(data):
        raise SafetensorsError("%s: %d trailing bytes after the tensors" % (path, len(data) - pos))
    return out, meta


def load(path):
    return load_with_metadata(path)[0]


if __name__ == "__main__":
    import sys
    for p in sys.argv[1:]:
        t, m = load_with_metadata(p)
        print(p, "metadata:", m)
        for k, v in t.items():
            print("  %-24s %-5s %-16s |x|=%.6g" % (k, NAMES[v.dtype], list(v.shape),
                                                  float(np.linalg.norm(v.astype(np.float64)))))
