#!/usr/bin/env bash
# tests/cuda/test_cuda_device.sh PROG NOCUDA_PROG FAKE_LIBCUDA DATA
#
# The CUDA device of the runtime, without a GPU:
#   1. no driver library, and the CUDA toolkit's stub driver: --device cuda
#      exits 1 with one clear line, --device auto trains on the CPU;
#      a program without CUDA kernels says so;
#   2. a fake driver (tests/fakes/fake_cuda.c) for every "unavailable"
#      reason: no device, cuInit failing, an old driver, NVRTC missing or
#      too new, an architecture NVRTC lacks, out of device memory, a GPU
#      that never finishes (the wait is bounded);
#   3. which device (CUDA_VISIBLE_DEVICES, CDDP_CUDA_DEVICE) and which
#      NVRTC (by the architectures fake NVRTCs 12 and 13 know:
#      tests/fakes/fake_nvrtc.c, beside FAKE_LIBCUDA);
#      the fake driver running the real device loop, the kernels executed
#      by the CUDA emulator (tests/cuda/emu.h): graph capture and replay,
#      the runtime's step kernels and the model's kernels, against the CPU
#      run of the same program: step losses, epoch metrics and saved
#      parameters; the kernel cache (hit, --no-cache); --max-steps,
#      --drop-last, --shuffle off, --init/--save; a device struct laid out
#      differently from the host's is caught at start-up.
# Parts 2 and 3 need NVRTC (the fake driver loads real CUBINs) and g++;
# without /usr/local/cuda they are skipped.
# PROG: a cddpc-compiled SimpleNet; NOCUDA_PROG: build/tests/rt_fake_model
# (no cuda_src); DATA: the Fashion-MNIST directory (a small cut is made).
. "$(dirname "$0")/../skip.sh"
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
PROG=$(realpath "${1:?usage: test_cuda_device.sh PROG NOCUDA_PROG FAKE_LIBCUDA DATA}")
NOCUDA=$(realpath "$2")
FAKE=$(realpath "$3")
DATA=$4
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=/usr/bin/python3
TMP=$(mktemp -d "${TMPDIR:-/tmp}/cuda_dev.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export XDG_CACHE_HOME=$TMP/cache
unset CDDP_LIBNVRTC CDDP_CUDA_DUMP CDDP_CUDA_TIMEOUT FAKE_CUDA_KERNELS
fails=0 passes=0
pass() { echo "PASS cuda: $1"; passes=$((passes + 1)); }
fail() { echo "FAIL cuda: $1"; fails=$((fails + 1)); }
# expect NAME STATUS PATTERN CMD...: exit status, and PATTERN in the output
expect() {
    local name=$1 st=$2 pat=$3
    shift 3
    timeout 300 "$@" >"$TMP/out" 2>&1
    local got=$?
    if [ "$got" -eq "$st" ] && grep -qE -- "$pat" "$TMP/out"; then pass "$name"; else
        fail "$name (status $got, want $st; output:)"; sed 's/^/      /' "$TMP/out" | head -20; fi
}
# the error is ONE line on stderr and nothing was trained
one_line() {
    local name=$1
    shift
    timeout 300 "$@" >"$TMP/o1" 2>"$TMP/e1"
    local got=$?
    # under SAN=1 ASan warns once about the emulator's swapcontext: not ours
    sed -i '/WARNING: ASan doesn.t fully support makecontext\/swapcontext/d' "$TMP/e1"
    if [ "$got" -eq 1 ] && [ "$(wc -l <"$TMP/e1")" -eq 1 ] && ! grep -q '^epoch' "$TMP/o1"; then
        pass "$name: exit 1, one line: $(cat "$TMP/e1")"
    else fail "$name (status $got; stderr:)"; sed 's/^/      /' "$TMP/e1" | head; fi
}

# a small cut of the data: the emulator runs about 2 steps a second
SMALL=$TMP/small
$PY "$ROOT/tests/runtime/small_idx.py" "$DATA" "$SMALL" 200 100 || { echo "FAIL cuda: cannot make the small data set"; exit 1; }
R=("$PROG" --data "$SMALL" --batch 32 --threads 1)
run() { "${R[@]}" "$@"; }

# ---- 1. no driver, the stub, no kernels ----------------------------------------
export CDDP_LIBCUDA=$TMP/no-such-libcuda.so.1
one_line "no driver library" "${R[@]}" --device cuda --epochs 1
expect "no driver library: message" 1 '^[^ ]+: error: --device cuda: no CUDA driver library' "${R[@]}" --device cuda --epochs 1
expect "no driver library: auto trains on the cpu" 0 'device cpu \(auto: no CUDA driver library' "${R[@]}" --device auto --epochs 1
expect "auto on the cpu: epoch line" 0 '^epoch 1/1  train_loss' "${R[@]}" --device auto --epochs 1
STUB=/usr/local/cuda/lib64/stubs/libcuda.so
if [ -f "$STUB" ]; then
    export CDDP_LIBCUDA=$STUB
    one_line "stub driver" "${R[@]}" --device cuda --epochs 1
    expect "stub driver: message" 1 'cuInit failed: CUDA_ERROR_STUB_LIBRARY' "${R[@]}" --device cuda --epochs 1
    expect "stub driver: auto trains on the cpu" 0 'device cpu \(auto: cuInit failed' "${R[@]}" --device auto --epochs 1
else
    skip_part "the stub driver ($STUB not found)"
fi
one_line "program without CUDA kernels" "$NOCUDA" --data "$SMALL" --device cuda
expect "program without CUDA kernels: message" 1 'this program was compiled without CUDA kernels' \
    "$NOCUDA" --data "$SMALL" --device cuda
expect "program without CUDA kernels: auto" 0 'device cpu \(auto: no CUDA kernels in this program\)' \
    "$NOCUDA" --data "$SMALL" --device auto --max-steps 2 --threads 1
expect "--device cpu names the cpu" 0 'threads 1  device cpu$' "${R[@]}" --device cpu --epochs 1

if [ ! -d /usr/local/cuda ] || ! command -v g++ >/dev/null || [ ! -f "$ROOT/tests/cuda/emu.h" ]; then
    skip_part "the fake-driver tests (they need NVRTC (/usr/local/cuda), g++ and tests/cuda/emu.h)"
    echo "$passes passed, $fails failed"
    skip_end "$fails"
fi

# ---- 2. the fake driver: every reason the device is unavailable -----------------
export CDDP_LIBCUDA=$FAKE
one_line "no device" env FAKE_CUDA_DEVICES=0 "$PROG" --data "$SMALL" --device cuda
expect "no device: message" 1 'no CUDA device' env FAKE_CUDA_DEVICES=0 "$PROG" --data "$SMALL" --device cuda
expect "no device: auto" 0 'device cpu \(auto: no CUDA device' env FAKE_CUDA_DEVICES=0 "${R[@]}" --device auto --epochs 1
expect "cuInit fails: named" 1 'cuInit failed: CUDA_ERROR_UNKNOWN' env FAKE_CUDA_INIT_ERROR=999 "${R[@]}" --device cuda
expect "driver 11.8: too old" 1 'driver older than needed: it supports CUDA 11.8, cddp needs 12.0' \
    env FAKE_CUDA_DRIVER=11080 "${R[@]}" --device cuda
NVMAJ=$(ls /usr/local/cuda/lib64/libnvrtc.so.1[0-9] 2>/dev/null | sed 's/.*\.so\.//' | sort -n | tail -1)
if [ "${NVMAJ:-0}" -ge 13 ] && ! ls /usr/local/cuda/lib64/libnvrtc.so.12 >/dev/null 2>&1; then
    expect "driver 12.4 with only NVRTC 13: too old" 1 "driver older than needed: it supports CUDA 12.4.*NVRTC.*13\." \
        env FAKE_CUDA_DRIVER=12040 "${R[@]}" --device cuda
fi
expect "NVRTC missing" 1 '--device cuda: NVRTC missing' env CDDP_LIBNVRTC=$TMP/none.so "${R[@]}" --device cuda
one_line "NVRTC missing" env CDDP_LIBNVRTC=$TMP/none.so "${R[@]}" --device cuda
expect "NVRTC missing: auto" 0 'device cpu \(auto: NVRTC missing' env CDDP_LIBNVRTC=$TMP/none.so "${R[@]}" --device auto --epochs 1
expect "sm_35: NVRTC cannot compile for it" 1 'cannot compile for sm_35' env FAKE_CUDA_CC=35 "${R[@]}" --device cuda

# ---- 3. the device loop, emulated --------------------------------------------------
# the program's full NVRTC source, then the emulated kernels built from it
env CDDP_CUDA_DUMP="$TMP/src.cu" "$PROG" --data "$SMALL" --device cuda --epochs 1 >/dev/null 2>&1
if bash "$ROOT/tests/fakes/emu_kernels.sh" "$TMP/src.cu" "$TMP/kernels.so" 2>"$TMP/gxx.err"; then
    pass "emulated kernels built from the dumped NVRTC source"
else
    fail "cannot build the emulated kernels"
    sed 's/^/      /' "$TMP/gxx.err" | head -20
    echo "$passes passed, $fails failed"
    exit 1
fi
export FAKE_CUDA_KERNELS=$TMP/kernels.so
rm -rf "$XDG_CACHE_HOME"

run --device cuda --epochs 2 --step-log "$TMP/sc.csv" --metrics "$TMP/mc.csv" --save "$TMP/pc.st" \
    >"$TMP/oc" 2>"$TMP/ec"
rc=$?
run --device cpu --epochs 2 --step-log "$TMP/sh.csv" --metrics "$TMP/mh.csv" --save "$TMP/ph.st" >/dev/null 2>&1
# (under SAN=1 ASan warns once that it does not follow the emulator's swapcontext)
sed -i '/WARNING: ASan doesn.t fully support makecontext\/swapcontext/d' "$TMP/ec"
if [ $rc -eq 0 ] && [ ! -s "$TMP/ec" ]; then pass "2 epochs on the emulated device, stderr empty"
else fail "2 epochs on the emulated device (status $rc)"; sed 's/^/      /' "$TMP/ec" | head -20; fi
grep -q 'device cuda:0 (Fake GPU (emulated), sm_90, driver 13.0, NVRTC [0-9.]*, kernels compiled; launches scheduled for h100 (cddpc --target))' "$TMP/oc" \
    && pass "header names the device, kernels compiled, and that the launches were scheduled for another GPU" ||
    fail "header: $(head -1 "$TMP/oc")"
ls "$XDG_CACHE_HOME"/cddpc/*.cubin >/dev/null 2>&1 && pass "kernels cached in \$XDG_CACHE_HOME/cddpc" \
    || fail "no cache file"
cmp_runs() {    # cmp_runs NAME STEPLOG_A STEPLOG_B [METRICS_A METRICS_B [ST_A ST_B]]
    $PY - "$@" <<'P'
import sys, csv, json, struct
name, a, b = sys.argv[1:4]
ra, rb = list(csv.DictReader(open(a))), list(csv.DictReader(open(b)))
if len(ra) != len(rb) or not ra:
    sys.exit("%s: %d vs %d steps" % (name, len(ra), len(rb)))
worst = 0.0
for x, y in zip(ra, rb):
    if x['step'] != y['step'] or x['epoch'] != y['epoch']:
        sys.exit("%s: step/epoch columns differ: %s vs %s" % (name, x, y))
    worst = max(worst, abs(float(x['loss']) - float(y['loss'])) / max(1e-6, abs(float(y['loss']))))
if len(sys.argv) > 5:
    ma, mb = list(csv.DictReader(open(sys.argv[4]))), list(csv.DictReader(open(sys.argv[5])))
    if len(ma) != len(mb):
        sys.exit("%s: %d vs %d epochs" % (name, len(ma), len(mb)))
    for x, y in zip(ma, mb):
        for k in ('train_loss', 'test_loss', 'test_acc'):
            worst = max(worst, abs(float(x[k]) - float(y[k])) / max(1e-6, abs(float(y[k]))))
if len(sys.argv) > 7:
    def load(p):
        raw = open(p, 'rb').read(); n = struct.unpack('<Q', raw[:8])[0]; h = json.loads(raw[8:8 + n])
        return {k: struct.unpack('<%df' % (v['data_offsets'][1] // 4 - v['data_offsets'][0] // 4),
                raw[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]])
                for k, v in h.items() if k != '__metadata__'}
    pa, pb = load(sys.argv[6]), load(sys.argv[7])
    if pa.keys() != pb.keys():
        sys.exit("%s: parameter names differ" % name)
    for k in pa:
        num = sum((p - q) ** 2 for p, q in zip(pa[k], pb[k])) ** 0.5
        den = sum(q * q for q in pb[k]) ** 0.5
        worst = max(worst, num / max(den, 1e-12))
print("max rel diff %.2e" % worst)
sys.exit(0 if worst <= 1e-4 else 1)
P
}
if d=$(cmp_runs "cuda vs cpu" "$TMP/sc.csv" "$TMP/sh.csv" "$TMP/mc.csv" "$TMP/mh.csv" "$TMP/pc.st" "$TMP/ph.st"); then
    pass "cuda = cpu: step losses, epoch metrics, saved parameters ($d)"
else fail "cuda vs cpu: $d"; fi
# graphs of 16 steps (RT_CUDA_RUN_STEPS: step_turn between the steps, one
# launch per run) with single-step graphs for the rest: batch 6 gives 34
# training steps (2 runs and 2) and 17 evaluation steps (a run and 1)
for b in 6; do
    run --device cuda --epochs 1 --batch $b --step-log "$TMP/sr$b.csv" --metrics "$TMP/mr$b.csv" \
        --save "$TMP/pr$b.st" >/dev/null 2>&1
    run --device cpu --epochs 1 --batch $b --step-log "$TMP/sq$b.csv" --metrics "$TMP/mq$b.csv" \
        --save "$TMP/pq$b.st" >/dev/null 2>&1
    if d=$(cmp_runs "batch $b" "$TMP/sr$b.csv" "$TMP/sq$b.csv" "$TMP/mr$b.csv" "$TMP/mq$b.csv" "$TMP/pr$b.st" \
           "$TMP/pq$b.st"); then
        pass "batch $b, runs of 16 steps and single steps: cuda = cpu ($d)"
    else fail "batch $b, runs of 16 steps: cuda vs cpu: $d"; fi
done
# the exact epoch mean: the device's double sums equal the per-step losses
$PY - "$TMP/sc.csv" "$TMP/mc.csv" <<'P' && pass "train_loss = exact per-sample mean of the device's step losses" \
    || fail "train_loss is not the per-sample mean"
import sys, csv
steps = list(csv.DictReader(open(sys.argv[1]))); m = list(csv.DictReader(open(sys.argv[2])))
for ep in (1, 2):
    s = [float(r['loss']) for r in steps if r['epoch'] == str(ep)]
    n = [32] * (len(s) - 1) + [200 - 32 * (len(s) - 1)]
    want = sum(a * b for a, b in zip(s, n)) / 200
    if abs(want - float(m[ep - 1]['train_loss'])) > 1e-6 * abs(want): sys.exit(1)
P
awk -F, 'NR == 2 && $5 > 0 && $6 > 0 {ok = 1} END {exit !ok}' "$TMP/mc.csv" \
    && pass "epoch time from device events is positive" || fail "epoch time"

expect "second run: kernels from the cache" 0 'kernels cached[;)]' "${R[@]}" --device cuda --epochs 1 --max-steps 1
expect "on the GPU its launches were scheduled for, the header says nothing of it" 0 \
    'device cuda:0 \(NVIDIA H100 80GB HBM3, sm_90, driver 13.0, NVRTC [0-9.]*, kernels cached\)' \
    env FAKE_CUDA_NAME="NVIDIA H100 80GB HBM3" "${R[@]}" --device cuda --epochs 1 --max-steps 1
expect "on another GPU, the header names the target" 0 \
    'device cuda:0 \(NVIDIA H200, sm_90, .*kernels cached; launches scheduled for h100 \(cddpc --target\)\)' \
    env FAKE_CUDA_NAME="NVIDIA H200" "${R[@]}" --device cuda --epochs 1 --max-steps 1
n0=$(ls "$XDG_CACHE_HOME"/cddpc | wc -l)
expect "--no-cache compiles" 0 'kernels compiled[;)]' "${R[@]}" --device cuda --epochs 1 --max-steps 1 --no-cache
[ "$(ls "$XDG_CACHE_HOME"/cddpc | wc -l)" -eq "$n0" ] && pass "--no-cache writes nothing" || fail "--no-cache wrote"
expect "auto picks the (fake) GPU" 0 'device cuda:0' "${R[@]}" --device auto --epochs 1 --max-steps 1

run --device cuda --max-steps 3 --epochs 2 --step-log "$TMP/s3.csv" >/dev/null 2>&1
[ "$(tail -n +2 "$TMP/s3.csv" | wc -l)" -eq 3 ] && pass "--max-steps 3: 3 steps" || fail "--max-steps 3"
run --device cuda --max-steps 9 --epochs 3 --metrics "$TMP/m9.csv" --step-log "$TMP/s9.csv" >/dev/null 2>&1
[ "$(tail -n +2 "$TMP/s9.csv" | wc -l)" -eq 9 ] && [ "$(tail -n +2 "$TMP/m9.csv" | wc -l)" -eq 2 ] \
    && pass "--max-steps 9 over epochs of 7: stops in epoch 2, which is still evaluated" \
    || fail "--max-steps 9: $(tail -n +2 "$TMP/s9.csv" | wc -l) steps, $(tail -n +2 "$TMP/m9.csv" | wc -l) epochs"
run --device cuda --epochs 1 --drop-last --step-log "$TMP/sd.csv" --metrics "$TMP/md.csv" >/dev/null 2>&1
run --device cpu --epochs 1 --drop-last --step-log "$TMP/sdh.csv" --metrics "$TMP/mdh.csv" >/dev/null 2>&1
[ "$(tail -n +2 "$TMP/sd.csv" | wc -l)" -eq 6 ] && d=$(cmp_runs drop "$TMP/sd.csv" "$TMP/sdh.csv" "$TMP/md.csv" "$TMP/mdh.csv") \
    && pass "--drop-last: 6 full batches of 32, as on the cpu ($d)" || fail "--drop-last ${d:-}"
run --device cuda --epochs 1 --shuffle off --max-steps 4 --step-log "$TMP/so.csv" >/dev/null 2>&1
run --device cpu --epochs 1 --shuffle off --max-steps 4 --step-log "$TMP/soh.csv" >/dev/null 2>&1
d=$(cmp_runs shuffle-off "$TMP/so.csv" "$TMP/soh.csv") && pass "--shuffle off: as on the cpu ($d)" \
    || fail "--shuffle off: $d"
# --init in, --save out, lr 0: the parameters come back bit for bit
run --device cuda --epochs 1 --max-steps 1 --lr 0 --init "$TMP/ph.st" --save "$TMP/p0.st" >/dev/null 2>&1
cmp -s "$TMP/ph.st" "$TMP/p0.st" && pass "--init then --save with lr 0: identical file" || fail "--init/--save round trip"
# --profile: the train plan's steps timed by events, 3 warm-up steps left out
expect "--profile on the cuda device: the train table from events" 0 \
    'profile: train plan, [0-9]+ kernels, 5 calls .*no peaks given' \
    "${R[@]}" --device cuda --epochs 1 --max-steps 5 --profile
n_timed=$(grep -cE '^  t[0-9]+_\S+ +2 ' "$TMP/out")
n_kern=$(sed -n 's/^profile: train plan, \([0-9]*\) kernels.*/\1/p' "$TMP/out")
[ -n "$n_kern" ] && [ "$n_timed" = "$n_kern" ] && pass "--profile on cuda: all $n_kern kernels with 2 timed calls" \
    || fail "--profile on cuda: $n_timed of ${n_kern:-?} kernels with 2 timed calls"

# ---- which device, which NVRTC ---------------------------------------------------------
# a launcher that gives each rank its own GPU leaves it one visible device
expect "one of two GPUs visible (CUDA_VISIBLE_DEVICES=1): device 0" 0 'device cuda:0 \(Fake GPU' \
    env FAKE_CUDA_DEVICES=2 CUDA_VISIBLE_DEVICES=1 "${R[@]}" --device cuda --max-steps 1
expect "CDDP_CUDA_DEVICE=1 chooses device 1" 0 'device cuda:1 \(Fake GPU' \
    env FAKE_CUDA_DEVICES=2 CDDP_CUDA_DEVICE=1 "${R[@]}" --device cuda --max-steps 1
expect "CDDP_CUDA_DEVICE beyond the visible devices: refused" 1 \
    'CDDP_CUDA_DEVICE=1: expected a device number below 1, the devices this process sees \(CUDA_VISIBLE_DEVICES=0\)' \
    env FAKE_CUDA_DEVICES=2 CUDA_VISIBLE_DEVICES=0 CDDP_CUDA_DEVICE=1 "${R[@]}" --device cuda --max-steps 1
expect "CUDA_VISIBLE_DEVICES empty: no device" 1 'no CUDA device' \
    env FAKE_CUDA_DEVICES=2 CUDA_VISIBLE_DEVICES= "${R[@]}" --device cuda --max-steps 1
# NVRTC by architecture: fake NVRTCs 12.0 and 13.0 (tests/fakes/fake_nvrtc.c)
FAKENV=$(dirname "$FAKE")/libfakenvrtc.so
if [ -f "$FAKENV" ]; then
    NV=$TMP/nvrtc
    mkdir -p "$NV/12" "$NV/13"
    cp "$FAKENV" "$NV/12/libnvrtc.so.12" && cp "$FAKENV" "$NV/13/libnvrtc.so.13"
    NVL=$NV/13/libnvrtc.so.13:$NV/12/libnvrtc.so.12
    asked() { grep -qx "$1" "$TMP/nvlog" && pass "$2" || { fail "$2: NVRTC was asked for: $(cat "$TMP/nvlog")"; }; rm -f "$TMP/nvlog"; }
    rm -f "$TMP/nvlog"
    expect "sm_70 (V100): NVRTC 12 compiles what NVRTC 13 cannot" 0 \
        'device cuda:0 \(Fake GPU \(emulated\), sm_70, driver 13.0, NVRTC 12.0, kernels compiled' \
        env FAKE_CUDA_CC=70 CDDP_LIBNVRTC="$NVL" FAKE_NVRTC_LOG="$TMP/nvlog" "${R[@]}" --device cuda --max-steps 1
    asked 'NVRTC 12.0 --gpu-architecture=sm_70' "sm_70: compiled by NVRTC 12 for sm_70"
    expect "sm_121, NVRTC 13 knowing up to sm_120: sm_120 code" 0 \
        'sm_121 \(code for sm_120\), driver 13.0, NVRTC 13.0, kernels compiled' \
        env FAKE_CUDA_CC=121 FAKE_NVRTC_ARCHS_13=75,80,90,100,120 CDDP_LIBNVRTC="$NVL" FAKE_NVRTC_LOG="$TMP/nvlog" \
        "${R[@]}" --device cuda --max-steps 1
    asked 'NVRTC 13.0 --gpu-architecture=sm_120' "sm_121: compiled for sm_120"
    expect "sm_121 again: the cache is keyed on sm_120, what was compiled" 0 'sm_121 \(code for sm_120\).*kernels cached' \
        env FAKE_CUDA_CC=121 FAKE_NVRTC_ARCHS_13=75,80,90,100,120 CDDP_LIBNVRTC="$NVL" "${R[@]}" --device cuda --max-steps 1
    expect "sm_89: NVRTC 12 knows it exactly, 13 only sm_80: the exact one wins" 0 'sm_89, driver 13.0, NVRTC 12.0' \
        env FAKE_CUDA_CC=89 FAKE_NVRTC_ARCHS_13=75,80,90 CDDP_LIBNVRTC="$NVL" "${R[@]}" --device cuda --max-steps 1
    expect "sm_90 known to both: the first in the search order (13)" 0 'sm_90, driver 13.0, NVRTC 13.0' \
        env CDDP_LIBNVRTC="$NVL" "${R[@]}" --device cuda --max-steps 1
    expect "sm_70 with only NVRTC 13: refused, naming what it knows" 1 \
        'NVRTC 13.0 \(.*libnvrtc.so.13\) cannot compile for sm_70, the architecture of this GPU \(it knows sm_75 to sm_121\)' \
        env FAKE_CUDA_CC=70 CDDP_LIBNVRTC="$NV/13/libnvrtc.so.13" "${R[@]}" --device cuda --max-steps 1
    expect "driver 12.8: NVRTC 13 skipped, NVRTC 12 used" 0 'sm_90, driver 12.8, NVRTC 12.0' \
        env FAKE_CUDA_DRIVER=12080 CDDP_LIBNVRTC="$NVL" "${R[@]}" --device cuda --max-steps 1
else fail "no fake NVRTC ($FAKENV): make build/tests/libfakenvrtc.so"; fi

# ---- failures on the device ----------------------------------------------------------
one_line "out of device memory" env FAKE_CUDA_MEM=2000000 "${R[@]}" --device cuda --epochs 1
expect "out of device memory: how much, for what" 1 \
    'out of device memory: cannot allocate 2\.0 MiB for parameters \([0-9.]+ MiB free of 1\.9 MiB' \
    env FAKE_CUDA_MEM=2000000 "${R[@]}" --device cuda --epochs 1
t0=$(date +%s)
expect "a GPU that never finishes: bounded wait" 1 'did not finish .* within 2 s' \
    env FAKE_CUDA_HANG=1 CDDP_CUDA_TIMEOUT=2 "${R[@]}" --device cuda --epochs 1
[ $(($(date +%s) - t0)) -lt 30 ] && pass "... and it gave up in seconds" || fail "the hang took $(($(date +%s) - t0)) s"
# variants of the dumped source, emulated: a model whose rt_exec has its
# fields in another order (caught at start-up), and a kernel that fails on
# the "device" while the graph is replayed (a thread leaving a block whose
# other threads wait at __syncthreads: the emulator reports it)
$PY - "$TMP/src.cu" "$TMP" <<'P'
import sys
src = open(sys.argv[1]).read()
cut = src.index('/* ---- cddp runtime kernels')
model, rest = src[:cut], src[cut:]
a = model.replace(' float lr; int64_t step;', ' float pad; int64_t step; float lr;', 1)
open(sys.argv[2] + '/src_layout.cu', 'w').write(a + rest)
b = model.replace('if (row0 >= M || col0 >= N)', 'if (row0 >= M || col0 >= N || threadIdx.x == 5)', 1)
open(sys.argv[2] + '/src_fail.cu', 'w').write(b + rest)
sys.exit(a == model or b == model)
P
variants=$?
for v in layout fail; do
    bash "$ROOT/tests/fakes/emu_kernels.sh" "$TMP/src_$v.cu" "$TMP/kernels_$v.so" 2>/dev/null || variants=1
done
if [ $variants -eq 0 ]; then
    expect "rt_exec laid out differently: clear error" 1 \
        "layout differs from the host's \(cddprt.h\): rt_exec \(the model's CUDA source\): lr is [0-9]+ on the device, [0-9]+ on the host" \
        env FAKE_CUDA_KERNELS="$TMP/kernels_layout.so" "${R[@]}" --device cuda --epochs 1
    expect "a kernel failing during replay: the CUDA error, exit 1" 1 \
        'CUDA error CUDA_ERROR_LAUNCH_FAILED .* in cuGraphLaunch' \
        env FAKE_CUDA_KERNELS="$TMP/kernels_fail.so" "${R[@]}" --device cuda --epochs 1
else fail "cannot make the variants of the kernel source"; fi

echo "$passes passed, $fails failed"
skip_end "$fails"
