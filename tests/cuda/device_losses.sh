#!/usr/bin/env bash
# tests/cuda/device_losses.sh CDDPC FAKE_LIBCUDA: the losses of float
# targets and their metrics on the runtime's CUDA device loop, without a
# GPU (as tests/cuda/device_conv.sh: the fake driver runs the real device
# loop, the kernels executed by the CUDA emulator). tests/torch/loss_mlp.net
# is compiled with huber_loss (metrics MSE, MAE) and with
# binary_cross_entropy_with_logits and a pos_weight (accuracy per label,
# macro-F1: 3 K sums carried by the eval control block across its steps),
# and a cross_entropy over 4 positions with ignore_index (the step and
# test means over the counted targets: ctl.stepcount, ctl.count_sum);
# two epochs on data written here as float IDX must match the CPU run of
# the same program: step losses, every column of --metrics, the saved
# weights. Skips (exit 77) only without the CUDA toolkit or g++.
. "$(dirname "$0")/../skip.sh"
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
. "$(dirname "$0")/toolkit.sh"
command -v g++ >/dev/null || skip_all "no g++"
CDDPC=$(realpath "${1:?usage: device_losses.sh CDDPC FAKE_LIBCUDA}")
FAKE=$(realpath "$2")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=/usr/bin/python3
TMP=$(mktemp -d "${TMPDIR:-/tmp}/device_losses.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export XDG_CACHE_HOME=$TMP/cache
unset CDDP_LIBNVRTC CDDP_CUDA_DUMP FAKE_CUDA_KERNELS

$PY - "$TMP" <<'P' || { echo "FAIL: cannot write the data"; exit 1; }
import os, struct, sys
import numpy as np
r = np.random.default_rng(5)
A = r.standard_normal((8, 3))
def idx(path, a, code, dt):
    with open(path, "wb") as f:
        f.write(bytes([0, 0, code, a.ndim]) + b"".join(struct.pack(">I", d) for d in a.shape) + a.astype(dt).tobytes())
for kind in ("reg", "bin", "pos"):
    os.makedirs(os.path.join(sys.argv[1], kind))
B = r.standard_normal((8, 5))
for pre, n in (("train", 200), ("t10k", 100)):
    x = r.standard_normal((n, 8))
    z = x @ A
    for kind, y, code, dt in (("reg", 2 * np.tanh(z), 0x0E, ">f8"), ("bin", z + r.standard_normal((n, 3)) > 0.5, 0x08, ">u1")):
        idx(os.path.join(sys.argv[1], kind, pre + "-images-idx3-ubyte"), x, 0x0D, ">f4")
        idx(os.path.join(sys.argv[1], kind, pre + "-labels-idx1-ubyte"), y, code, dt)
    # a class at each of 4 positions, about a quarter of them -100 (ignored)
    xp = r.standard_normal((n, 4, 8))
    yp = np.where(np.abs(xp[:, :, 0]) < 0.3, -100, (xp @ B).argmax(2))
    idx(os.path.join(sys.argv[1], "pos", pre + "-images-idx3-ubyte"), xp, 0x0D, ">f4")
    idx(os.path.join(sys.argv[1], "pos", pre + "-labels-idx1-ubyte"), yp, 0x09, ">i1")
P
cat >"$TMP/pos.net" <<'N'
model PosMlp {
    self.fc1 = nn.Linear(8, 16)
    self.fc2 = nn.Linear(16, 5)
    forward(x: f32[N, 4, 8]) {
        h = F.relu(self.fc1(x))
        return self.fc2(h + h.mean(1, keepdim = True))
    }
}
train {
    model     PosMlp
    data      idx("data", normalize = (0.0, 1.0))
    loss      cross_entropy(ignore_index = -100)
    optimizer sgd(lr = 0.1, momentum = 0.9)
    batch     32
    epochs    2
    seed      5
}
N
fails=0
for loss in "huber_loss(delta = 0.5)" "binary_cross_entropy_with_logits(reduction = sum, pos_weight = [1.0, 2.0, 0.5])" pos; do
  kind=reg; [ "${loss#binary}" != "$loss" ] && kind=bin
  [ "$loss" = pos ] && kind=pos
  [ $kind = pos ] || sed "s|    loss      mse_loss(reduction = mean)|    loss      $loss|" "$ROOT/tests/torch/loss_mlp.net" >"$TMP/$kind.net"
  "$CDDPC" "$TMP/$kind.net" -o "$TMP/prog_$kind" || { echo "FAIL: cddpc $kind"; exit 1; }
  R=("$TMP/prog_$kind" --data "$TMP/$kind" --batch 32 --threads 1 --epochs 2 --lr 0.01)
  export CDDP_LIBCUDA=$FAKE
  unset FAKE_CUDA_KERNELS
  env CDDP_CUDA_DUMP="$TMP/src_$kind.cu" "${R[@]}" --device cuda --max-steps 1 >/dev/null 2>&1
  if ! bash "$ROOT/tests/fakes/emu_kernels.sh" "$TMP/src_$kind.cu" "$TMP/kernels_$kind.so" 2>"$TMP/gxx.err"; then
      echo "FAIL: cannot build the emulated kernels of $kind"
      sed 's/^/    /' "$TMP/gxx.err" | head -20
      exit 1
  fi
  export FAKE_CUDA_KERNELS=$TMP/kernels_$kind.so
  "${R[@]}" --device cuda --step-log "$TMP/sc.csv" --metrics "$TMP/mc.csv" --save "$TMP/pc.st" >"$TMP/oc" 2>"$TMP/ec"
  rc=$?
  sed -i '/WARNING: ASan doesn.t fully support makecontext\/swapcontext/d' "$TMP/ec"
  if [ $rc -ne 0 ] || [ -s "$TMP/ec" ] || ! grep -q 'device cuda:0' "$TMP/oc"; then
      echo "FAIL: $kind: 2 epochs on the emulated device (status $rc)"
      sed 's/^/    /' "$TMP/oc" "$TMP/ec" | head -20
      fails=$((fails + 1))
      continue
  fi
  "${R[@]}" --device cpu --step-log "$TMP/sh.csv" --metrics "$TMP/mh.csv" --save "$TMP/ph.st" >/dev/null 2>&1 \
      || { echo "FAIL: $kind: the cpu run"; exit 1; }
  PYTHONPATH=$ROOT/tests/torch $PY - "$TMP" "$kind" <<'P' || fails=$((fails + 1))
import csv, sys
import numpy as np
import st
t, kind = sys.argv[1:]
fail = []
def rel(a, b):
    return abs(a - b) / max(1e-6, abs(b))
sc, sh = list(csv.DictReader(open(t + "/sc.csv"))), list(csv.DictReader(open(t + "/sh.csv")))
w = max([rel(float(a["loss"]), float(b["loss"])) for a, b in zip(sc, sh)] or [9.0])
if len(sc) != len(sh) or len(sc) != 14 or not w <= 1e-4:
    fail.append("step losses: %d on the device, %d on the cpu, max rel diff %.2e" % (len(sc), len(sh), w))
mc, mh = list(csv.DictReader(open(t + "/mc.csv"))), list(csv.DictReader(open(t + "/mh.csv")))
cols = ["train_loss", "test_loss"] + {"reg": ["test_mse", "test_mae"], "bin": ["test_label_acc", "test_macro_f1"],
                                      "pos": ["test_acc"]}[kind]
if len(mc) != 2 or len(mh) != 2 or any(c not in mc[0] for c in cols):
    fail.append("--metrics: %d rows on the device, %d on the cpu, columns %s" % (len(mc), len(mh), list(mc[0]) if mc else []))
else:
    for c in cols:
        print("%s %s: device %s, cpu %s" % (kind, c, [a[c] for a in mc], [b[c] for b in mh]))
        d = max(rel(float(a[c]), float(b[c])) for a, b in zip(mc, mh))
        if not d <= 1e-4:
            fail.append("%s differs by %.2e" % (c, d))
pc, ph = st.load(t + "/pc.st"), st.load(t + "/ph.st")
for k in ph:
    d = float(np.linalg.norm(pc[k].astype(np.float64) - ph[k]) / np.linalg.norm(ph[k].astype(np.float64)))
    if not d <= 1e-4:
        fail.append("%s differs by %.2e" % (k, d))
for f in fail:
    print("FAIL: %s: %s" % (kind, f))
print("device_losses %s: %s (step losses %.2e)" % (kind, "FAIL" if fail else "cuda = cpu on the device loop", w))
sys.exit(1 if fail else 0)
P
done
[ $fails -eq 0 ]
