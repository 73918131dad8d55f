#!/usr/bin/env bash
# tests/cuda/device_conv.sh CDDPC FAKE_LIBCUDA DATA: the image ops on the
# runtime's CUDA device loop, without a GPU. tests/cuda/models/conv.net
# (strided, grouped, dilated convolutions, batch norm, both poolings) is
# compiled; the fake driver (tests/fakes/fake_cuda.c) runs the real device
# loop -- captured step graph, batch norm's running statistics updated in
# place in the device's parameter slab, evaluation with them, --save
# copying the slab back -- with the kernels executed by the CUDA emulator.
# Two epochs on a small cut of DATA must match the CPU run of the same
# program: step losses, epoch metrics (the eval plan reads the running
# statistics) and every saved tensor, num_batches_tracked (int64) exact.
# An optional MODEL replaces conv.net: tests/cuda/models/dropout.net checks
# that the device loop hands the kernels the step, rank and seed the CPU
# loop does (the dropout masks of every step must agree).
# Skips (exit 77) only without the CUDA toolkit or g++.
. "$(dirname "$0")/../skip.sh"
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
. "$(dirname "$0")/toolkit.sh"
command -v g++ >/dev/null || skip_all "no g++"
CDDPC=$(realpath "${1:?usage: device_conv.sh CDDPC FAKE_LIBCUDA DATA [MODEL]}")
FAKE=$(realpath "$2")
DATA=$3
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MODEL=$(realpath "${4:-$ROOT/tests/cuda/models/conv.net}")
PY=/usr/bin/python3
TMP=$(mktemp -d "${TMPDIR:-/tmp}/device_conv.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export XDG_CACHE_HOME=$TMP/cache
unset CDDP_LIBNVRTC CDDP_CUDA_DUMP FAKE_CUDA_KERNELS

"$CDDPC" "$MODEL" -o "$TMP/convodd" || { echo "FAIL: cddpc"; exit 1; }
SMALL=$TMP/small
mkdir -p "$SMALL"
$PY - "$DATA" "$SMALL" <<'P' || { echo "FAIL: cannot make the small data set"; exit 1; }
import gzip, os, struct, sys
src, dst = sys.argv[1], sys.argv[2]
def read(name):
    p = os.path.join(src, name)
    return open(p, 'rb').read() if os.path.exists(p) else gzip.open(p + '.gz').read()
for split, n in (('train', 200), ('t10k', 100)):
    img, lab = read(split + '-images-idx3-ubyte'), read(split + '-labels-idx1-ubyte')
    open(os.path.join(dst, split + '-images-idx3-ubyte'), 'wb').write(
        img[:4] + struct.pack('>I', n) + img[8:16] + img[16:16 + n * 784])
    open(os.path.join(dst, split + '-labels-idx1-ubyte'), 'wb').write(
        lab[:4] + struct.pack('>I', n) + lab[8:8 + n])
P
R=("$TMP/convodd" --data "$SMALL" --batch 32 --threads 1 --epochs 2)
export CDDP_LIBCUDA=$FAKE
env CDDP_CUDA_DUMP="$TMP/src.cu" "${R[@]}" --device cuda --max-steps 1 >/dev/null 2>&1
if ! bash "$ROOT/tests/fakes/emu_kernels.sh" "$TMP/src.cu" "$TMP/kernels.so" 2>"$TMP/gxx.err"; then
    echo "FAIL: cannot build the emulated kernels from the program's NVRTC source"
    sed 's/^/    /' "$TMP/gxx.err" | head -20
    exit 1
fi
export FAKE_CUDA_KERNELS=$TMP/kernels.so

"${R[@]}" --device cuda --step-log "$TMP/sc.csv" --metrics "$TMP/mc.csv" --save "$TMP/pc.st" >"$TMP/oc" 2>"$TMP/ec"
rc=$?
# (under SAN=1 ASan warns once that it does not follow the emulator's swapcontext)
sed -i '/WARNING: ASan doesn.t fully support makecontext\/swapcontext/d' "$TMP/ec"
if [ $rc -ne 0 ] || [ -s "$TMP/ec" ] || ! grep -q 'device cuda:0' "$TMP/oc"; then
    echo "FAIL: 2 epochs on the emulated device (status $rc)"
    sed 's/^/    /' "$TMP/oc" "$TMP/ec" | head -20
    exit 1
fi
"${R[@]}" --device cpu --step-log "$TMP/sh.csv" --metrics "$TMP/mh.csv" --save "$TMP/ph.st" >/dev/null 2>&1 \
    || { echo "FAIL: the cpu run"; exit 1; }

PYTHONPATH=$ROOT/tests/torch $PY - "$TMP" <<'P'
import csv, sys
import numpy as np
import st
t = sys.argv[1]
fail = []
def rel(a, b):
    return abs(a - b) / max(1e-6, abs(b))
sc, sh = list(csv.DictReader(open(t + "/sc.csv"))), list(csv.DictReader(open(t + "/sh.csv")))
if len(sc) != len(sh) or len(sc) != 14:
    fail.append("%d steps on the device, %d on the cpu, expected 14" % (len(sc), len(sh)))
w = max([rel(float(a["loss"]), float(b["loss"])) for a, b in zip(sc, sh)] or [0.0])
print("step losses: max rel diff %.2e over %d steps" % (w, len(sc)))
if not w <= 1e-4:
    fail.append("step losses differ by %.2e" % w)
mc, mh = list(csv.DictReader(open(t + "/mc.csv"))), list(csv.DictReader(open(t + "/mh.csv")))
wm = max([rel(float(a[k]), float(b[k])) for a, b in zip(mc, mh) for k in ("train_loss", "test_loss", "test_acc")] or [9.0])
print("epoch metrics (eval with the running statistics): max rel diff %.2e" % wm)
if len(mc) != 2 or len(mh) != 2 or not wm <= 1e-4:
    fail.append("epoch metrics differ by %.2e" % wm)
pc, ph = st.load(t + "/pc.st"), st.load(t + "/ph.st")
if pc.keys() != ph.keys():
    fail.append("saved tensors differ in names")
for k in ph:
    a, b = pc.get(k), ph[k]
    if a is None or a.dtype != b.dtype or a.shape != b.shape:
        fail.append("%s: %s on the device, %s %s on the cpu" % (k, None if a is None else (a.dtype, a.shape), b.dtype, b.shape))
        continue
    if b.dtype == np.int64:
        print("%-24s %s (cpu %s)" % (k, a.tolist(), b.tolist()))
        if a.tolist() != b.tolist() or b.tolist() != 14:
            fail.append("%s is %s on the device, %s on the cpu, expected 14" % (k, a.tolist(), b.tolist()))
        continue
    d = float(np.linalg.norm(a.astype(np.float64) - b) / max(np.linalg.norm(b.astype(np.float64)), 1e-12))
    print("%-24s rel L2 %.2e" % (k, d))
    if not d <= 1e-4:
        fail.append("%s differs by %.2e" % (k, d))
for f in fail:
    print("FAIL: " + f)
print("device_conv: %s" % ("FAIL" if fail else "cuda = cpu on the device loop"))
sys.exit(1 if fail else 0)
P
