#!/usr/bin/python3
"""Decodes samples of a trained models/vae.net into a picture for docs/losses.md.

usage: vae_samples.py WEIGHTS.safetensors OUT.png [--seed S]

Draws 64 latent vectors z ~ N(0, I) (NumPy, seed S), runs the decoder as
the model's forward does (sigmoid(fc4(relu(fc3(z))))) in float64 and tiles
the 28x28 images 8 by 8 into a grayscale PNG. Reads the weights the program
saved (--save), written by cddpc's safetensors writer; needs NumPy only.
"""
import json
import os
import struct
import sys
import zlib

import numpy as np


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        if v["dtype"] != "F32":
            raise ValueError("%s: %s is %s, not F32" % (path, k, v["dtype"]))
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(data[8 + n + a:8 + n + b], dtype="<f4").reshape(v["shape"]).astype(np.float64)
    return out


def png(path, img):
    """img: uint8 [H, W], grayscale"""
    h, w = img.shape
    raw = b"".join(b"\x00" + img[r].tobytes() for r in range(h))

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    with open(path + ".tmp", "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
    os.replace(path + ".tmp", path)


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    seed = 0
    if "--seed" in argv:
        seed = int(argv[argv.index("--seed") + 1])
        args = [a for a in args if a != str(seed)]
    if len(args) != 2:
        sys.stderr.write(__doc__)
        return 2
    w = load_safetensors(args[0])
    z = np.random.default_rng(seed).standard_normal((64, w["fc3.weight"].shape[1]))
    h = np.maximum(z @ w["fc3.weight"].T + w["fc3.bias"], 0)
    x = 1 / (1 + np.exp(-(h @ w["fc4.weight"].T + w["fc4.bias"])))
    tiles = (x.reshape(8, 8, 28, 28).transpose(0, 2, 1, 3).reshape(8 * 28, 8 * 28) * 255).round().astype(np.uint8)
    png(args[1], np.kron(tiles, np.ones((2, 2), dtype=np.uint8)))    # doubled, to be seen in a page
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
