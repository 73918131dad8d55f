#!/usr/bin/env bash
# tests/amp/cuda_fake.sh PROG FAKE_LIBCUDA DATA: the fp16 loss scaler on the
# CUDA device loop (the step graph with cddprt_amp_check/decide and the
# scaler update in cddprt_step_end), run by the fake driver with the
# kernels emulated on the CPU (as tests/unit/test_cuda_device.sh), against
# the CPU loop (rt_amp.c) on the same small data: the same per-step scale
# and found_inf (exactly), losses to rounding, the same epoch lines'
# scale and skips, carried across 3 epochs (the host rewrites the device's
# control block each epoch), parameters close.
# PROG: fp16 SimpleNet with scaler dynamic(init_scale = 2^24,
# growth_interval = 2): skips, backoffs and growth within 12 steps.
# Skipped without the CUDA toolkit (NVRTC), as the device tests are.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
PROG=$(realpath "$1") FAKE=$(realpath "$2") DATA=$3
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=/usr/bin/python3
. "$ROOT/tests/cuda/toolkit.sh"
T=$(mktemp -d "${TMPDIR:-/tmp}/amp_cuda.XXXXXX")
trap 'rm -rf "$T"' EXIT
export XDG_CACHE_HOME=$T/cache CDDP_LIBCUDA=$FAKE
unset CDDP_LIBNVRTC CDDP_CUDA_DUMP CDDP_CUDA_TIMEOUT FAKE_CUDA_KERNELS
$PY "$ROOT/tests/unit/small_idx.py" "$DATA" "$T/small" 200 100 || { echo "FAIL: small data"; exit 1; }
env CDDP_CUDA_DUMP="$T/src.cu" "$PROG" --data "$T/small" --device cuda --epochs 1 >/dev/null 2>&1
bash "$ROOT/tests/unit/emu_kernels.sh" "$T/src.cu" "$T/kernels.so" 2>"$T/gxx.err" ||
    { echo "FAIL: cannot build the emulated kernels"; head -20 "$T/gxx.err"; exit 1; }
export FAKE_CUDA_KERNELS=$T/kernels.so
R=("$PROG" --data "$T/small" --epochs 3 --threads 1)
"${R[@]}" --device cuda --step-log "$T/sc.csv" --save "$T/pc.st" >"$T/oc" 2>"$T/ec" ||
    { echo "FAIL: device run"; cat "$T/ec"; exit 1; }
"${R[@]}" --device cpu --step-log "$T/sh.csv" --save "$T/ph.st" >"$T/oh" 2>&1 ||
    { echo "FAIL: cpu run"; cat "$T/oh"; exit 1; }
$PY - "$T" <<'P'
import csv, json, struct, sys
t = sys.argv[1]
c, h = (list(csv.DictReader(open("%s/%s.csv" % (t, n)))) for n in ("sc", "sh"))
bad = []
if len(c) != len(h) or not c:
    bad.append("%d vs %d steps" % (len(c), len(h)))
for x, y in zip(c, h):
    if (x["scale"], x["found_inf"]) != (y["scale"], y["found_inf"]):
        bad.append("step %s: device scale %s found_inf %s, cpu %s %s" % (x["step"], x["scale"], x["found_inf"],
                                                                      y["scale"], y["found_inf"]))
    if abs(float(x["loss"]) - float(y["loss"])) > 1e-4 * abs(float(y["loss"])):
        bad.append("step %s: loss %s vs %s" % (x["step"], x["loss"], y["loss"]))
lines = [[l for l in open("%s/%s" % (t, n)) if l.startswith("loss scale")] for n in ("oc", "oh")]
if lines[0] != lines[1] or len(lines[0]) != 3:
    bad.append("scaler lines differ: %s vs %s" % lines)
def load(p):
    raw = open(p, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
    return raw[8 + n:]
import array
a, b = (array.array("f", load("%s/%s.st" % (t, n))) for n in ("pc", "ph"))
num = sum((p - q) ** 2 for p, q in zip(a, b)) ** 0.5
den = sum(q * q for q in b) ** 0.5
if num > 1e-4 * den:
    bad.append("parameters differ: rel %g" % (num / den))
found = [int(x["found_inf"]) for x in c]
grew = sum(1 for x, y in zip(c, c[1:]) if float(y["scale"]) > float(x["scale"]))
if not (0 < sum(found) < len(found)) or grew == 0:
    bad.append("the run should both skip and grow: %s" % found)
for m in bad:
    print("FAIL:", m)
if not bad:
    print("PASS: %d steps, %d skipped, %d growths: device scale/found_inf == cpu, params rel diff %.1e"
          % (len(c), sum(found), grew, num / den))
sys.exit(1 if bad else 0)
P
