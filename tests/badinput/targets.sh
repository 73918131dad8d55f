#!/usr/bin/env bash
# tests/badinput/targets.sh CDDPC: IDX data against a model of float
# targets (tests/badinput/targets.net, mse_loss over 3 outputs). Samples
# and targets of every element type train (ubyte, byte, short, int, float,
# double; targets [N, 3], and [N] for no model here); each broken set must
# make the program exit 1 with ONE line naming the file and the reason:
# targets per sample that differ from the output width (the message names
# both), a label file of 3 dims, a NaN or an infinity in the targets.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
CDDPC=${1:?usage: targets.sh CDDPC}
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/targets.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fails=0 passes=0
pass() { echo "PASS targets: $1"; passes=$((passes + 1)); }
fail() { echo "FAIL targets: $1"; fails=$((fails + 1)); }

"$CDDPC" "$HERE/targets.net" -o "$TMP/prog" || { echo "FAIL targets: cannot compile targets.net"; exit 1; }
/usr/bin/python3 - "$TMP" <<'PY' || { echo "FAIL targets: cannot write the data"; exit 1; }
import os, struct, sys
import numpy as np
root = sys.argv[1]
CODES = {"u8": (0x08, ">u1"), "i8": (0x09, ">i1"), "i16": (0x0B, ">i2"), "i32": (0x0C, ">i4"),
         "f32": (0x0D, ">f4"), "f64": (0x0E, ">f8")}
def idx(path, a, t):
    code, dt = CODES[t]
    with open(path, "wb") as f:
        f.write(bytes([0, 0, code, a.ndim]) + b"".join(struct.pack(">I", d) for d in a.shape))
        f.write(np.ascontiguousarray(a).astype(dt).tobytes())
r = np.random.default_rng(3)
def write(name, xt, yt, y=None, ytest=None, xshape=(8,)):
    d = os.path.join(root, name)
    os.makedirs(d)
    for pre, n in (("train", 64), ("t10k", 32)):
        x = (r.standard_normal((n,) + xshape) * 20).clip(-100, 100)
        t = r.standard_normal((n, 3)) * 20 if y is None else y(n)
        if pre == "t10k" and ytest is not None:
            t = ytest(n)
        idx(os.path.join(d, pre + "-images-idx3-ubyte"), x if xt not in ("u8",) else np.abs(x), xt)
        idx(os.path.join(d, pre + "-labels-idx1-ubyte"), t, yt)
for t in CODES:
    write("good_" + t, t, t)
write("good_2x4", "f32", "f64", xshape=(2, 4))                     # [N, 2, 4] samples: 8 values
write("width", "f32", "f32", y=lambda n: r.standard_normal((n, 2)))
write("width_1d", "f32", "u8", ytest=lambda n: np.ones(n))
write("dims3", "f32", "f32", y=lambda n: r.standard_normal((n, 3, 1)))
def nan_at(n):
    t = r.standard_normal((n, 3))
    t[5, 1] = np.inf
    return t
write("inf_target", "f32", "f64", ytest=nan_at)
PY

# each type trains, and is read as written: with lr 0 the test loss of the
# saved weights, recomputed here in float64 from the files, must be the
# program's
for t in u8 i8 i16 i32 f32 f64 2x4; do
  if timeout 120 "$TMP/prog" --threads 1 --lr 0 --data "$TMP/good_$t" --save "$TMP/w_$t.st" \
       --metrics "$TMP/m_$t.csv" >"$TMP/out" 2>&1 &&
     got=$(PYTHONPATH=$HERE/../torch /usr/bin/python3 - "$TMP/good_$t" "$TMP/w_$t.st" "$TMP/m_$t.csv" <<'PY'
import csv, gzip, struct, sys
import numpy as np
import st
d, wpath, mpath = sys.argv[1:]
def read(path):
    raw = open(path, "rb").read()
    code, nd = raw[2], raw[3]
    dims = struct.unpack(">%dI" % nd, raw[4:4 + 4 * nd])
    dt = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}[code]
    a = np.frombuffer(raw[4 + 4 * nd:], dtype=dt).astype(np.float64).reshape(dims)
    return a / 255.0 if code == 0x08 and "images" in path else a
x = read(d + "/t10k-images-idx3-ubyte").reshape(-1, 8)
t = read(d + "/t10k-labels-idx1-ubyte").reshape(len(x), -1)
x = x.astype(np.float32).astype(np.float64)          # the program's samples are float
t = t.astype(np.float32).astype(np.float64)
w = {k: v.astype(np.float64) for k, v in st.load(wpath).items()}
h = np.maximum(x @ w["fc1.weight"].T + w["fc1.bias"], 0)
y = h @ w["fc2.weight"].T + w["fc2.bias"]
ref = ((y - t) ** 2).mean()
got = float(list(csv.DictReader(open(mpath)))[-1]["test_loss"])
print("%.6g vs %.6g rel %.1e" % (got, ref, abs(got - ref) / abs(ref)))
sys.exit(0 if abs(got - ref) <= 1e-5 * abs(ref) else 1)
PY
); then
    pass "samples and targets of type $t read as written: test_loss $got"
  else
    fail "type $t: ${got:-} $(head -c 600 "$TMP/out" | tr '\n' ' ')"
  fi
done

expect() { # case file reason
  local name=$1 path=$2 reason=$3 err=$TMP/$1.err rc
  timeout 120 "$TMP/prog" --threads 1 --data "$TMP/$name" >/dev/null 2>"$err"
  rc=$?
  local msg; msg=$(head -c 600 "$err" | tr '\n' ' ')
  if [ $rc -ne 1 ]; then fail "$name: exit $rc, expected 1 ($msg)"
  elif [ "$(wc -l <"$err")" -ne 1 ]; then fail "$name: not one line ($msg)"
  elif ! grep -qF -- "$path" "$err"; then fail "$name: does not name $path ($msg)"
  elif ! grep -qE -- "$reason" "$err"; then fail "$name: not /$reason/ ($msg)"
  else pass "$name: $msg"
  fi
}
expect width "$TMP/width/train-labels-idx1-ubyte" "has 2 targets per sample, but model 'Targets' has 3 outputs"
expect width_1d "$TMP/width_1d/t10k-labels-idx1-ubyte" "has 1 targets per sample, but model 'Targets' has 3 outputs"
expect dims3 "$TMP/dims3/train-labels-idx1-ubyte" "wrong magic number 0x00000d03"
expect inf_target "$TMP/inf_target/t10k-labels-idx1-ubyte" "element 16 is inf, not a finite float"
echo "targets: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
