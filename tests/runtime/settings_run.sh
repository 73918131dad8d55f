#!/usr/bin/env bash
# tests/runtime/settings_run.sh CDDPC DATA [FAKE_LIBCUDA FAKE_LIBNCCL]
#
# The train block's settings in the runtime's loops, on
# tests/cuda/models/settings.net (RMSprop with momentum and centered,
# clip_grad_norm 0.3, accumulate 3, onecycle) over a cut of 200 training
# images: 13 batches of 16 an epoch (the last of 8), 5 optimizer steps (the
# last group a single batch).
#   1. the step log has one row per optimizer step, and its lr column
#      follows the schedule per step (the metrics' lr: the epoch's last);
#   2. --checkpoint, stopped by --max-steps inside epoch 2, --resume: the
#      final weights equal the uninterrupted run's bit for bit (RMSprop's
#      square_avg, momentum_buffer and grad_avg, and the schedule's
#      position, come back), and the checkpoint names the state as
#      PyTorch's optimizer does;
#   3. 2 MPI ranks x batch 16 = 1 rank x batch 32 (the clipping norm of the
#      averaged gradients, the all-reduce on the last micro-batch only),
#      within 1e-5 (tests/ddp/compare.py), with clipping (the updates after
#      the last all-reduce) and without (each as its bucket's ends); --trace
#      shows one all-reduce per optimizer step, none for the other
#      micro-batches (no_sync);
#   4. with the fake driver (tests/fakes): the CUDA device -- the micro-batch
#      graph (no_sync), the fold before each bucket's all-reduce, the norm
#      and clip kernels, the per-step lr table -- equals the CPU device
#      within 1e-4, and resumes inside an epoch bit for bit; then 2 GPU
#      ranks with the fake NCCL equal 1 CPU rank x
#      batch 32, with clipping and without.
# Sections 3 and 4 are skipped (exit 77) without mpirun, NVRTC, g++ or the fakes.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname "$0")/../skip.sh"
set -u
CDDPC=$(realpath "${1:?usage: settings_run.sh CDDPC DATA [FAKE_LIBCUDA FAKE_LIBNCCL]}")
DATA=$2 FAKE=${3:-} FNCCL=${4:-}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=/usr/bin/python3
TMP=$(mktemp -d "${TMPDIR:-/tmp}/settings_run.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
unset CDDP_LIBNVRTC CDDP_CUDA_DUMP FAKE_CUDA_KERNELS CDDP_LIBCUDA CDDP_LIBNCCL
export XDG_CACHE_HOME=$TMP/cache
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fails=0 passes=0
pass() { echo "PASS settings: $1"; passes=$((passes + 1)); }
fail() { echo "FAIL settings: $1"; fails=$((fails + 1)); }
show() { sed '/WARNING: ASan doesn.t fully support makecontext/d; s/^/      /' "$1" | tail -n 15; }

P=$TMP/settings
"$CDDPC" "$ROOT/tests/cuda/models/settings.net" -o "$P" >"$TMP/cc" 2>&1 || { fail "cddpc"; show "$TMP/cc"; exit 1; }
SMALL=$TMP/small
$PY "$ROOT/tests/runtime/small_idx.py" "$DATA" "$SMALL" 200 90 || { fail "cannot make the small data set"; exit 1; }
"$P" --data "$SMALL" --lr 0 --max-steps 1 --save "$TMP/init.st" >/dev/null 2>&1 || { fail "initial weights"; exit 1; }
C=(--data "$SMALL" --init "$TMP/init.st" --threads 1 --epochs 2)

# ---- 1. the step log: optimizer steps ---------------------------------------------
"$P" "${C[@]}" --step-log "$TMP/s1.csv" --metrics "$TMP/m1.csv" --save "$TMP/a.st" >"$TMP/o1" 2>&1 ||
    { fail "the CPU run"; show "$TMP/o1"; }
if r=$($PY - "$TMP/s1.csv" "$TMP/m1.csv" <<'EOF'
import csv, math, sys
s, m = list(csv.DictReader(open(sys.argv[1]))), list(csv.DictReader(open(sys.argv[2])))
assert [int(r["step"]) for r in s] == list(range(1, 11)), [r["step"] for r in s]
assert [int(r["epoch"]) for r in s] == [1] * 5 + [2] * 5
# OneCycleLR(max_lr 0.003, total_steps 10, pct_start 0.4), cos: step t's lr
def lr(t):
    init, mn = 0.003 / 25, 0.003 / 25 / 1e4
    e0, e1 = 0.4 * 10 - 1, 10 - 1
    if t <= e0:
        p, a, b = t / e0, init, 0.003
    else:
        p, a, b = (t - e0) / (e1 - e0), 0.003, mn
    return b + (a - b) / 2 * (math.cos(math.pi * p) + 1)
w = max(abs(float(r["lr"]) - lr(i)) / lr(i) for i, r in enumerate(s))
assert w < 1e-6, w
assert abs(float(m[-1]["lr"]) - lr(9)) / lr(9) < 1e-6, (m[-1]["lr"], lr(9))
print("10 rows, 5 an epoch, lr per step within %.1e of OneCycleLR's" % w)
EOF
); then pass "step log: $r"; else fail "step log: $r"; show "$TMP/s1.csv"; fi

# ---- 2. checkpoint inside epoch 2, resume: bit for bit -------------------------------
"$P" "${C[@]}" --max-steps 7 --checkpoint "$TMP/ck.st" >"$TMP/o2" 2>&1 || { fail "the first part"; show "$TMP/o2"; }
if names=$(PYTHONPATH=$ROOT/tests/torch $PY - "$TMP/ck.st" <<'EOF'
import sys, st
t, meta = st.load_with_metadata(sys.argv[1])
want = ["optimizer.0.weight.square_avg", "optimizer.0.weight.momentum_buffer", "optimizer.0.weight.grad_avg"]
miss = [k for k in want if k not in t]
assert not miss, (miss, sorted(t))
assert meta["cddp.step"] == "7" and meta["cddp.epoch"] == "2" and meta["cddp.skip"] == "6", meta
print(", ".join(k.split(".")[-1] for k in want) + "; step 7 at batch 6 of epoch 2")
EOF
); then pass "checkpoint: $names"; else fail "checkpoint contents: $names"; fi
"$P" --data "$SMALL" --threads 1 --epochs 2 --resume "$TMP/ck.st" --save "$TMP/b.st" >"$TMP/o3" 2>&1 ||
    { fail "the resumed part"; show "$TMP/o3"; }
cmp -s "$TMP/a.st" "$TMP/b.st" && pass "resumed inside epoch 2 = uninterrupted, bit for bit" ||
    fail "resumed run differs from the uninterrupted one"

# ---- 3. two MPI ranks = one --------------------------------------------------------
if command -v mpirun >/dev/null 2>&1 && strings "$P" | grep -q MPI_Init_thread; then
    "$P" "${C[@]}" --batch 32 --step-log "$TMP/r1.csv" --metrics "$TMP/n1.csv" --save "$TMP/w1.st" \
        >"$TMP/o4" 2>&1 || { fail "1 rank x 32"; show "$TMP/o4"; }
    mpirun -np 2 "$P" "${C[@]}" --batch 16 --step-log "$TMP/r2.csv" --metrics "$TMP/n2.csv" --save "$TMP/w2.st" \
        >"$TMP/o5" 2>&1 || { fail "2 ranks x 16"; show "$TMP/o5"; }
    if $PY "$ROOT/tests/ddp/compare.py" "$TMP/w1.st" "$TMP/w2.st" "$TMP/r1.csv" "$TMP/r2.csv" "$TMP/n1.csv" \
        "$TMP/n2.csv" 1e-5 >"$TMP/cmp" 2>&1; then
        pass "2 MPI ranks x 16 = 1 rank x 32 with clipping and accumulate 3: $(tr '\n' ' ' <"$TMP/cmp")"
    else fail "2 MPI ranks vs 1:"; show "$TMP/cmp"; fi
    # without clipping the updates run as each bucket's all-reduce ends
    # (the fold on the comm thread before it), not after the last
    sed '/clip_grad_norm/d' "$ROOT/tests/cuda/models/settings.net" >"$TMP/noclip.net"
    "$CDDPC" "$TMP/noclip.net" -o "$TMP/noclip" >"$TMP/cc2" 2>&1 || { fail "cddpc (no clipping)"; show "$TMP/cc2"; }
    "$TMP/noclip" "${C[@]}" --batch 32 --step-log "$TMP/q1.csv" --metrics "$TMP/p1.csv" --save "$TMP/v1.st" \
        >"$TMP/o9" 2>&1 || { fail "1 rank x 32, no clipping"; show "$TMP/o9"; }
    mpirun -np 2 "$TMP/noclip" "${C[@]}" --batch 16 --step-log "$TMP/q2.csv" --metrics "$TMP/p2.csv" \
        --save "$TMP/v2.st" >"$TMP/o10" 2>&1 || { fail "2 ranks x 16, no clipping"; show "$TMP/o10"; }
    if $PY "$ROOT/tests/ddp/compare.py" "$TMP/v1.st" "$TMP/v2.st" "$TMP/q1.csv" "$TMP/q2.csv" "$TMP/p1.csv" \
        "$TMP/p2.csv" 1e-5 >"$TMP/cmp2" 2>&1 && ! cmp -s "$TMP/v1.st" "$TMP/w1.st"; then
        pass "2 MPI ranks = 1 with accumulate 3 alone: $(tr '\n' ' ' <"$TMP/cmp2")"
    else fail "2 MPI ranks vs 1, accumulate alone (or the same weights as with clipping):"; show "$TMP/cmp2"; fi
    # no_sync: 2 optimizer steps of 3 micro-batches all-reduce twice per
    # rank (one bucket), not six times
    mpirun -np 2 "$P" "${C[@]}" --batch 16 --max-steps 2 --trace "$TMP/t.json" >"$TMP/o8" 2>&1 ||
        { fail "traced 2-rank run"; show "$TMP/o8"; }
    nar=$(grep -o '"allreduce bucket [0-9]*"' "$TMP/t.json" 2>/dev/null | wc -l)
    [ "$nar" -eq 4 ] && pass "no_sync: 4 bucket all-reduces for 2 ranks x 2 optimizer steps of 3 micro-batches" ||
        fail "no_sync: $nar bucket all-reduces traced, want 4 (2 ranks x 2 optimizer steps)"
else
    skip_part "2 MPI ranks (no mpirun, or built without MPI)"
fi

# ---- 4. the CUDA device, emulated ---------------------------------------------------
if [ -z "$FAKE" ] || [ ! -f "$FAKE" ] || [ ! -d /usr/local/cuda ] || ! command -v g++ >/dev/null 2>&1; then
    skip_part "the CUDA device (needs the fake driver, NVRTC and g++)"
else
    export CDDP_LIBCUDA=$(realpath "$FAKE")
    env CDDP_CUDA_DUMP="$TMP/src.cu" "$P" --data "$SMALL" --device cuda --max-steps 1 >/dev/null 2>&1
    if bash "$ROOT/tests/fakes/emu_kernels.sh" "$TMP/src.cu" "$TMP/kernels.so" 2>"$TMP/gxx.err"; then
        export FAKE_CUDA_KERNELS=$TMP/kernels.so
        # cmp_runs STEPS_A STEPS_B METRICS_A METRICS_B WEIGHTS_A WEIGHTS_B: worst relative difference (<= 1e-4)
        cmp_runs() {
            PYTHONPATH=$ROOT/tests/torch $PY - "$@" <<'EOF'
import csv, sys
import numpy as np
import st
sa, sb, ma, mb, wa, wb = sys.argv[1:7]
rel = lambda x, y: abs(x - y) / max(1e-6, abs(y))
ra, rb = list(csv.DictReader(open(sa))), list(csv.DictReader(open(sb)))
if len(ra) != len(rb) or not ra:
    sys.exit("%d vs %d steps" % (len(ra), len(rb)))
w = max(max(rel(float(x["loss"]), float(y["loss"])), rel(float(x["lr"]), float(y["lr"]))) for x, y in zip(ra, rb))
for x, y in zip(csv.DictReader(open(ma)), csv.DictReader(open(mb))):
    w = max([w] + [rel(float(x[k]), float(y[k])) for k in ("train_loss", "test_loss", "test_acc")])
pa, pb = st.load(wa), st.load(wb)
if pa.keys() != pb.keys():
    sys.exit("tensor names differ")
for k in pa:
    w = max(w, float(np.linalg.norm(pa[k].astype(np.float64) - pb[k]) / max(np.linalg.norm(pb[k]), 1e-12)))
print("max rel diff %.2e" % w)
sys.exit(0 if w <= 1e-4 else 1)
EOF
        }
        "$P" "${C[@]}" --device cuda --step-log "$TMP/c1.csv" --metrics "$TMP/k1.csv" --save "$TMP/g1.st" \
            >"$TMP/o6" 2>"$TMP/e6"
        rc=$?
        sed -i '/WARNING: ASan doesn.t fully support makecontext\/swapcontext/d' "$TMP/e6"
        if [ $rc -ne 0 ] || [ -s "$TMP/e6" ] || ! grep -q 'device cuda:0' "$TMP/o6"; then
            fail "the emulated CUDA device (status $rc)"; show "$TMP/o6"; show "$TMP/e6"
        elif d=$(cmp_runs "$TMP/c1.csv" "$TMP/s1.csv" "$TMP/k1.csv" "$TMP/m1.csv" "$TMP/g1.st" "$TMP/a.st"); then
            pass "CUDA device = CPU device, 2 epochs ($d)"
        else fail "CUDA device vs CPU: $d"; fi
        # a checkpoint inside epoch 2 on the device, resumed there: bit for bit
        "$P" "${C[@]}" --device cuda --max-steps 7 --checkpoint "$TMP/gck.st" >"$TMP/o12" 2>&1 &&
            "$P" --data "$SMALL" --threads 1 --epochs 2 --device cuda --resume "$TMP/gck.st" --save "$TMP/g4.st" \
                >"$TMP/o13" 2>&1 && cmp -s "$TMP/g1.st" "$TMP/g4.st" &&
            pass "CUDA device: resumed inside epoch 2 = uninterrupted, bit for bit" ||
            { fail "CUDA device: the resumed run differs (or failed)"; show "$TMP/o13"; }
        if command -v mpirun >/dev/null 2>&1 && [ -n "$FNCCL" ] && [ -f "$FNCCL" ] && [ -f "$TMP/w1.st" ]; then
            export CDDP_LIBNCCL=$(realpath "$FNCCL") FAKE_CUDA_DEVICES=2
            if mpirun -np 2 -x CDDP_LIBCUDA -x CDDP_LIBNCCL -x XDG_CACHE_HOME -x FAKE_CUDA_KERNELS -x FAKE_CUDA_DEVICES \
                "$P" "${C[@]}" --device cuda --batch 16 --step-log "$TMP/c2.csv" --metrics "$TMP/k2.csv" \
                --save "$TMP/g2.st" >"$TMP/o7" 2>&1; then
                d=$(cmp_runs "$TMP/c2.csv" "$TMP/r1.csv" "$TMP/k2.csv" "$TMP/n1.csv" "$TMP/g2.st" "$TMP/w1.st") &&
                    pass "2 GPU ranks (fake NCCL) x 16 = 1 CPU rank x 32 ($d)" || fail "2 GPU ranks vs 1 CPU rank: $d"
            else fail "2 GPU ranks"; show "$TMP/o7"; fi
            # accumulate alone: the optimizer kernels wait only for their bucket
            if [ -x "$TMP/noclip" ] && mpirun -np 2 -x CDDP_LIBCUDA -x CDDP_LIBNCCL -x XDG_CACHE_HOME -x FAKE_CUDA_KERNELS \
                -x FAKE_CUDA_DEVICES "$TMP/noclip" "${C[@]}" --device cuda --batch 16 --step-log "$TMP/c3.csv" \
                --metrics "$TMP/k3.csv" --save "$TMP/g3.st" >"$TMP/o11" 2>&1; then
                d=$(cmp_runs "$TMP/c3.csv" "$TMP/q1.csv" "$TMP/k3.csv" "$TMP/p1.csv" "$TMP/g3.st" "$TMP/v1.st") &&
                    pass "2 GPU ranks = 1 CPU rank x 32 with accumulate 3 alone ($d)" ||
                    fail "2 GPU ranks vs 1 CPU rank, accumulate alone: $d"
            else fail "2 GPU ranks, accumulate alone"; show "$TMP/o11"; fi
        else
            skip_part "2 GPU ranks (needs mpirun, the fake NCCL and section 3)"
        fi
    else
        fail "cannot build the emulated kernels"; show "$TMP/gxx.err"
    fi
fi

echo "settings: $passes passed, $fails failed"
skip_end "$fails"
