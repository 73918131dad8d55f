# examples/pytorch_load/evaluate.py: a cddpc checkpoint (safetensors, with
# PyTorch's state_dict names) loaded into the notes' SimpleNet and evaluated
# in PyTorch. The loader below needs only the standard library, NumPy and
# torch: no safetensors package.
#
#   python3 evaluate.py MODEL.safetensors DATA_DIR [METRICS.csv]
# With METRICS.csv (the run's --metrics), the test loss and accuracy must
# equal the program's last epoch's.
import csv
import gzip
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn

DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def load_safetensors(path):
    """name -> torch.Tensor, and the metadata: 8 bytes of header length,
    the JSON header, then the tensors' bytes at their offsets."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        a = np.frombuffer(data[b:e], dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
        out[name] = torch.from_numpy(a.copy())
    return out, meta


class SimpleNet(nn.Module):     # the notes' network, unchanged
    def __init__(self):
        super(SimpleNet, self).__init__()
        self.fc1 = nn.Linear(28 * 28, 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, 10)
        self.relu = nn.ReLU()

    def forward(self, x):
        x = x.view(-1, 28 * 28)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


def idx(d, name):
    for p in (os.path.join(d, name), os.path.join(d, name + ".gz")):
        if os.path.exists(p):
            data = (gzip.open if p.endswith(".gz") else open)(p, "rb").read()
            dims = struct.unpack(">" + "I" * data[3], data[4:4 + 4 * data[3]])
            return np.frombuffer(data, np.uint8, offset=4 + 4 * data[3]).reshape(dims)
    sys.exit("no %s in %s" % (name, d))


state, meta = load_safetensors(sys.argv[1])
model = SimpleNet()
model.load_state_dict(state)        # strict: every name must match
model.eval()
x = torch.from_numpy(idx(sys.argv[2], "t10k-images-idx3-ubyte").astype(np.float32) / 255.0)
x = ((x - 0.1307) / 0.3081).unsqueeze(1)
y = torch.from_numpy(idx(sys.argv[2], "t10k-labels-idx1-ubyte").astype(np.int64))
with torch.no_grad():
    out = model(x)
    loss = nn.functional.cross_entropy(out, y).item()
    acc = (out.argmax(1) == y).float().mean().item()
print("loaded %d tensors (%s) into SimpleNet; PyTorch on %d test images: test_loss %.4f  test_acc %.4f"
      % (len(state), ", ".join(state), len(y), loss, acc))
if len(sys.argv) > 3:
    last = list(csv.DictReader(open(sys.argv[3])))[-1]
    dl = abs(loss - float(last["test_loss"])) / float(last["test_loss"])
    # accuracy as counts of correct images: the CSV's 0.822 is 1644 of 2000
    same_correct = round(acc * len(y)) == round(float(last["test_acc"]) * len(y))
    print("the program said:                                      test_loss %.4f  test_acc %.4f  (loss %.1e apart)"
          % (float(last["test_loss"]), float(last["test_acc"]), dl))
    sys.exit(0 if dl < 1e-5 and same_correct else 1)
