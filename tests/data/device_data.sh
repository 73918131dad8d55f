#!/usr/bin/env bash
# tests/data/device_data.sh DIGITS IRIS FAKE_LIBCUDA: the npz and csv data
# on the runtime's CUDA device loop, without a GPU (the fake driver,
# tests/fakes/fake_cuda.c, runs the kernels of the program's NVRTC source
# through the CUDA emulator). DIGITS and IRIS are models/digits.net and
# models/iris.net compiled: float samples with one normalize = auto
# channel, the same digits saved as uint8 (resident on the device as
# bytes, scaled in the first kernel), and four per-feature means and stds
# after a seeded split. Two epochs on the device must take the CPU run's
# steps: every step's loss within 1e-4 relative, the epoch metrics too.
# Skips (exit 77) only without the CUDA toolkit or g++.
. "$(dirname "$0")/../skip.sh"
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/tests/cuda/toolkit.sh"
command -v g++ >/dev/null || skip_all "no g++"
DIGITS=$(realpath "${1:?usage: device_data.sh DIGITS IRIS FAKE_LIBCUDA}")
IRIS=$(realpath "$2")
FAKE=$(realpath "$3")
PY=/usr/bin/python3
TMP=$(mktemp -d "${TMPDIR:-/tmp}/device_data.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export XDG_CACHE_HOME=$TMP/cache CDDP_LIBCUDA=$FAKE
unset CDDP_LIBNVRTC CDDP_CUDA_DUMP FAKE_CUDA_KERNELS
"$PY" "$ROOT/scripts/sklearn_data.py" "$TMP" || { echo "FAIL: cannot write the data sets"; exit 1; }
"$PY" -c 'import numpy as np, sys
z = np.load(sys.argv[1])
np.savez(sys.argv[2], **{k: z[k].astype(np.uint8) for k in z.files})' "$TMP/digits.npz" "$TMP/digits_u8.npz" \
    || { echo "FAIL: cannot write the uint8 digits"; exit 1; }
fails=0
for c in "digits $DIGITS $TMP/digits.npz" "digits_u8 $DIGITS $TMP/digits_u8.npz" "iris $IRIS $TMP/iris.csv"; do
    set -- $c
    name=$1 prog=$2 data=$3
    R=("$prog" --data "$data" --threads 1 --epochs 2)
    env CDDP_CUDA_DUMP="$TMP/$name.cu" "${R[@]}" --device cuda --max-steps 1 >/dev/null 2>&1
    if ! bash "$ROOT/tests/fakes/emu_kernels.sh" "$TMP/$name.cu" "$TMP/$name.so" 2>"$TMP/gxx.err"; then
        echo "FAIL: $name: cannot build the emulated kernels"; sed 's/^/    /' "$TMP/gxx.err" | head; fails=1; continue
    fi
    FAKE_CUDA_KERNELS=$TMP/$name.so "${R[@]}" --device cuda --step-log "$TMP/$name.c.csv" \
        --metrics "$TMP/$name.cm.csv" --save "$TMP/$name.st" >"$TMP/$name.oc" 2>&1
    rc=$?
    "${R[@]}" --device cpu --step-log "$TMP/$name.h.csv" --metrics "$TMP/$name.hm.csv" >/dev/null 2>&1 || rc=1
    if [ $rc -ne 0 ] || ! grep -q 'device cuda:0' "$TMP/$name.oc"; then
        echo "FAIL: $name: the runs failed"; sed 's/^/    /' "$TMP/$name.oc" | head; fails=1; continue
    fi
    "$PY" - "$TMP" "$name" <<'P' || fails=1
import csv, sys
t, n = sys.argv[1], sys.argv[2]
rows = lambda f: list(csv.DictReader(open("%s/%s.%s.csv" % (t, n, f))))
rel = lambda a, b: abs(float(a) - float(b)) / max(1e-6, abs(float(b)))
c, h = rows("c"), rows("h")
w = max([rel(a["loss"], b["loss"]) for a, b in zip(c, h)] or [9])
wm = max([rel(a[k], b[k]) for a, b in zip(rows("cm"), rows("hm")) for k in ("train_loss", "test_loss", "test_acc")]
         or [9])
ok = len(c) == len(h) > 0 and w <= 1e-4 and wm <= 1e-4
print("%s %s: %d steps on the device, %d on the cpu; step losses max rel diff %.2e, epoch metrics %.2e"
      % ("PASS" if ok else "FAIL", n, len(c), len(h), w, wm))
sys.exit(0 if ok else 1)
P
    # --evaluate of the device's parameters, on the device and on the cpu
    E=("$prog" --data "$data" --threads 1 --evaluate "$TMP/$name.st")
    FAKE_CUDA_KERNELS=$TMP/$name.so "${E[@]}" --device cuda >"$TMP/$name.ec" 2>&1 &&
        "${E[@]}" --device cpu >"$TMP/$name.eh" 2>&1 || { echo "FAIL: $name: --evaluate failed"; fails=1; }
    "$PY" - "$TMP" "$name" <<'P' || fails=1
import csv, re, sys
t, n = sys.argv[1], sys.argv[2]
def ev(f):
    m = re.search(r"^evaluate .*: (\d+) test samples  test_loss (\S+)  \S+ (\S+)", open("%s/%s.%s" % (t, n, f)).read(), re.M)
    return tuple(float(x) for x in m.groups()) if m else None
c, h = ev("ec"), ev("eh")
last = list(csv.DictReader(open("%s/%s.cm.csv" % (t, n))))[-1]
want = (float(last["test_loss"]), float(last["test_acc"]))
ok = c is not None and h is not None and c[0] == h[0] and all(
    abs(a - b) <= 1e-4 * max(1, abs(b)) for a, b in zip(c[1:] + h[1:], want + want))
print("%s %s: --evaluate on the device %s and on the cpu %s; the run's last epoch (test_loss, metric) %s"
      % ("PASS" if ok else "FAIL", n, c, h, want))
sys.exit(0 if ok else 1)
P
done
exit $fails
