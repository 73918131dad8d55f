#!/usr/bin/env bash
# tests/amp/cuda_fake.sh PROG FAKE_LIBCUDA FAKE_LIBNCCL DATA: the fp16 loss scaler on the
# CUDA device loop (the step graph with cddprt_amp_check/decide and the
# scaler update in cddprt_step_end), run by the fake driver with the
# kernels emulated on the CPU (as tests/cuda/test_cuda_device.sh), against
# the CPU loop (rt_amp.c) on the same small data: the same per-step scale
# and found_inf (exactly), losses to rounding, the same epoch lines'
# scale and skips, carried across 3 epochs (the host rewrites the device's
# control block each epoch), parameters close. Then 2 GPU ranks (fake
# NCCL: the found_inf all-reduce is a node of the step graph) against 2
# CPU ranks, 2 epochs: the same scale/found_inf sequence. And a device
# checkpoint inside epoch 2, resumed, continues bit for bit.
# PROG: fp16 SimpleNet with scaler dynamic(init_scale = 2^24,
# growth_interval = 2): skips, backoffs and growth within 12 steps.
# Skipped without the CUDA toolkit (NVRTC), as the device tests are.
. "$(dirname "$0")/../skip.sh"
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
PROG=$(realpath "$1") FAKE=$(realpath "$2") FNCCL=$(realpath "$3") DATA=$4
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=/usr/bin/python3
. "$ROOT/tests/cuda/toolkit.sh"
T=$(mktemp -d "${TMPDIR:-/tmp}/amp_cuda.XXXXXX")
trap 'rm -rf "$T"' EXIT
export XDG_CACHE_HOME=$T/cache CDDP_LIBCUDA=$FAKE
unset CDDP_LIBNVRTC CDDP_CUDA_DUMP CDDP_CUDA_TIMEOUT FAKE_CUDA_KERNELS
$PY "$ROOT/tests/runtime/small_idx.py" "$DATA" "$T/small" 200 100 || { echo "FAIL: small data"; exit 1; }
env CDDP_CUDA_DUMP="$T/src.cu" "$PROG" --data "$T/small" --device cuda --epochs 1 >/dev/null 2>&1
bash "$ROOT/tests/fakes/emu_kernels.sh" "$T/src.cu" "$T/kernels.so" 2>"$T/gxx.err" ||
    { echo "FAIL: cannot build the emulated kernels"; head -20 "$T/gxx.err"; exit 1; }
export FAKE_CUDA_KERNELS=$T/kernels.so
R=("$PROG" --data "$T/small" --epochs 3 --threads 1)
"${R[@]}" --device cuda --step-log "$T/sc.csv" --save "$T/pc.st" >"$T/oc" 2>"$T/ec" ||
    { echo "FAIL: device run"; cat "$T/ec"; exit 1; }
"${R[@]}" --device cpu --step-log "$T/sh.csv" --save "$T/ph.st" >"$T/oh" 2>&1 ||
    { echo "FAIL: cpu run"; cat "$T/oh"; exit 1; }
status=0
$PY "$ROOT/tests/amp/cmp_scaler.py" "$T" sc sh oc oh pc ph 3 || status=1
# the device's checkpoint: stopped inside epoch 2 (after skips and a
# growth), resumed: the uninterrupted device run's steps and weights, bit
# for bit (the scale, tracker and steps taken come back from the file)
"${R[@]}" --device cuda --max-steps 6 --checkpoint "$T/ck.st" >"$T/ok" 2>&1 || { echo "FAIL: 6 steps"; status=1; }
"${R[@]}" --device cuda --resume "$T/ck.st" --step-log "$T/rc.csv" --save "$T/rc.st" >"$T/or" 2>&1 ||
    { echo "FAIL: resumed device run"; tail "$T/or"; status=1; }
if cmp -s "$T/pc.st" "$T/rc.st" && [ "$(sed -n '8,13p' "$T/sc.csv")" = "$(sed -n '2,7p' "$T/rc.csv")" ] &&
    [ "$(wc -l <"$T/rc.csv")" = 7 ]; then
    echo "PASS: device checkpoint at step 6, resumed: steps 7..12 and weights bit for bit"
else
    echo "FAIL: the resumed device run differs"; diff <(sed -n '8,13p' "$T/sc.csv") <(sed -n '2,7p' "$T/rc.csv")
    status=1
fi
# 2 GPU ranks over the fake NCCL vs 2 CPU ranks
if command -v mpirun >/dev/null 2>&1 && strings "$PROG" | grep -q MPI_Init_thread; then
    export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 CDDP_LIBNCCL=$FNCCL FAKE_CUDA_DEVICES=2
    XS="-x CDDP_LIBCUDA -x CDDP_LIBNCCL -x XDG_CACHE_HOME -x FAKE_CUDA_KERNELS -x FAKE_CUDA_DEVICES"
    D=("$PROG" --data "$T/small" --epochs 2 --threads 1 --batch 32)
    mpirun -np 2 $XS "${D[@]}" --device cuda --step-log "$T/dc.csv" --save "$T/qc.st" >"$T/odc" 2>&1 ||
        { echo "FAIL: 2 GPU ranks"; tail "$T/odc"; exit 1; }
    mpirun -np 2 "${D[@]}" --device cpu --step-log "$T/dh.csv" --save "$T/qh.st" >"$T/odh" 2>&1 ||
        { echo "FAIL: 2 cpu ranks"; tail "$T/odh"; exit 1; }
    $PY "$ROOT/tests/amp/cmp_scaler.py" "$T" dc dh odc odh qc qh 2 || status=1
else
    skip_part "2 GPU ranks vs 2 CPU ranks (no mpirun or no MPI in the program)"
fi
skip_end "$status"
