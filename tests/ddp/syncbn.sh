#!/usr/bin/env bash
# tests/ddp/syncbn.sh SYNC LOCAL CDDPC DATA FAKE_LIBCUDA FAKE_LIBNCCL
#
# SyncBatchNorm (`sync_batchnorm true`): the batch statistics, and the two
# channel sums of the input gradient, are taken over every rank's samples.
#   1. 2 CPU ranks x batch 16 = 1 rank x batch 32: weights, running
#      statistics, num_batches_tracked, step losses and epoch metrics;
#   2. the control: the same model with rank-local batch norm
#      (sync_batchnorm false) differs between the two by far more than the
#      tolerance, so (1) can see a missing reduction;
#   3. the eval plan runs no collective (ranks evaluate unequal blocks of
#      the test set: a collective there could hang);
#   4. DDP's broadcast_buffers: each rank evaluates its block of the test
#      set with rank 0's running statistics, so a 2-rank run's test metrics
#      are PyTorch's evaluation of the model rank 0 saved
#      (tests/ddp/syncbn_eval.py), with rank-local and with synced batch
#      norm;
#   5. 2 GPU ranks on the emulated device (fake driver + fake NCCL, the
#      graph replayed in a random order) = 2 CPU ranks x 16, and the
#      buffers' broadcast there too.
# SYNC, LOCAL: tests/ddp/syncbn.net compiled with sync_batchnorm true and
# false. Skipped (exit 77) without mpirun; part 4 without NVRTC and g++.
. "$(dirname "$0")/../skip.sh"
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
SYNC=$(realpath "$1") LOCAL=$(realpath "$2") CDDPC=$3 DATA=$4 FAKE=$5 FNCCL=$6
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=/usr/bin/python3
if ! command -v mpirun >/dev/null 2>&1 || ! strings "$SYNC" | grep -q MPI_Init_thread; then
    skip_all "syncbn needs mpirun and a program built with MPI"
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/syncbn.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset CDDP_NCCL_FORCE FAKE_CUDA_SCHEDULE FAKE_CUDA_DROP_WAITS
# The convolutions in the emitted loops, not oneDNN: a loop computes each
# sample's output the same way at batch 16 and 32, oneDNN's blocked kernels
# do not (their summation order follows the batch), and this small net
# with BatchNorm1d over 16 samples grows those 1e-8 differences to 3e-4 in
# 20 steps. Here only SyncBatchNorm's reductions may differ between runs.
export CDDP_DNNL=0
fails=0 passes=0
pass() { echo "PASS syncbn: $1"; passes=$((passes + 1)); }
fail() { echo "FAIL syncbn: $1"; fails=$((fails + 1)); }
show() { sed '/WARNING: ASan doesn.t fully support makecontext/d; s/^/      /' "$1" | tail -n 15; }

# run PROG TAG RANKS BATCH [ARGS...]: a short run from the shared initial state
run() {
    local prog=$1 tag=$2 np=$3 batch=$4
    shift 4
    local launch=()
    [ "$np" -gt 1 ] && launch=(mpirun -np "$np" "$@")
    "${launch[@]}" "$prog" "${C[@]}" --batch "$batch" --save "$TMP/w$tag.st" --step-log "$TMP/s$tag.csv" \
        --metrics "$TMP/m$tag.csv" >"$TMP/o$tag" 2>&1
}
# cmp A B TOL: compare.py's verdict on runs A and B
cmp() {
    $PY "$ROOT/tests/ddp/compare.py" "$TMP/w$1.st" "$TMP/w$2.st" "$TMP/s$1.csv" "$TMP/s$2.csv" "$TMP/m$1.csv" \
        "$TMP/m$2.csv" "$3" >"$TMP/cmp" 2>&1
}

# one initial state (lr 0: the weights as initialized) for every run
"$SYNC" --data "$DATA" --threads 1 --lr 0 --max-steps 1 --save "$TMP/init.st" >"$TMP/oinit" 2>&1 ||
    { fail "writing the initial weights"; show "$TMP/oinit"; exit 1; }
C=(--data "$DATA" --init "$TMP/init.st" --threads 1 --epochs 1 --max-steps 20 --device cpu)

# ---- 1. 2 ranks x 16 = 1 rank x 32 ------------------------------------------------------
# 20 steps of momentum SGD: the sums' order differs (two partial sums
# added, against one), and the differences grow with the steps; 1e-4 is
# far below what one missing reduction does (part 2).
if run "$SYNC" 1 1 32 && run "$SYNC" 2 2 16 && cmp 2 1 1e-4; then
    pass "2 ranks x 16 = 1 rank x 32, batch norm statistics and buffers included: $(tail -n 1 "$TMP/cmp")"
else
    fail "2 ranks x 16 vs 1 rank x 32"; show "$TMP/o2"; show "$TMP/cmp"
fi

# ---- 2. the control: rank-local batch norm is not the same training --------------------
if run "$LOCAL" l1 1 32 && run "$LOCAL" l2 2 16; then
    if cmp l2 l1 1e-2; then
        fail "rank-local batch norm: 2 x 16 came within 1e-2 of 1 x 32, the test cannot tell: $(tail -n 1 "$TMP/cmp")"
    else
        pass "control: rank-local batch norm, 2 x 16 vs 1 x 32: $(tail -n 1 "$TMP/cmp")"
    fi
else
    fail "rank-local batch norm runs"; show "$TMP/ol2"
fi

# ---- 3. collectives in the train plan only -------------------------------------------------
"$CDDPC" "$ROOT/tests/ddp/syncbn.net" -d fuse >"$TMP/fuse" 2>&1
ntrain=$(sed -n '/^plan train/,/^plan eval/p' "$TMP/fuse" | grep -c 'allreduce%')
neval=$(sed -n '/^plan eval/,$p' "$TMP/fuse" | grep -c 'allreduce%')
[ "$ntrain" = 9 ] && [ "$neval" = 0 ] &&
    pass "9 sums over the ranks per train step (2 per batch norm forward, 1 backward; 2d, 2d, 1d), none in eval" ||
    { fail "collectives: $ntrain in train (want 9), $neval in eval (want 0)"; show "$TMP/fuse"; }

# ---- 4. every rank evaluates rank 0's model ------------------------------------------------
for tag in l2 2; do
    if $PY "$ROOT/tests/ddp/syncbn_eval.py" "$TMP/w$tag.st" "$TMP/m$tag.csv" "$DATA" >"$TMP/ev" 2>&1; then
        pass "2 ranks ($([ $tag = 2 ] && echo synced || echo rank-local) batch norm) evaluate rank 0's model: $(cat "$TMP/ev")"
    else
        fail "the evaluation of 2 ranks is not rank 0's model's"; show "$TMP/ev"
    fi
done

# ---- 5. GPU ranks on the emulated device --------------------------------------------------
if [ -f "$FAKE" ] && [ -f "$FNCCL" ] && [ -d /usr/local/cuda ] && command -v g++ >/dev/null 2>&1; then
    SMALL=$TMP/small
    $PY "$ROOT/tests/runtime/small_idx.py" "$DATA" "$SMALL" 160 40 || { fail "cannot make the small data set"; exit 1; }
    export XDG_CACHE_HOME=$TMP/cache CDDP_LIBCUDA=$(realpath "$FAKE") CDDP_LIBNCCL=$(realpath "$FNCCL")
    export FAKE_CUDA_DEVICES=2 FAKE_CUDA_SCHEDULE=random
    env CDDP_CUDA_DUMP="$TMP/src.cu" "$SYNC" --data "$SMALL" --device cuda --max-steps 1 >/dev/null 2>&1
    if bash "$ROOT/tests/fakes/emu_kernels.sh" "$TMP/src.cu" "$TMP/kernels.so" 2>"$TMP/gxx.err"; then
        export FAKE_CUDA_KERNELS=$TMP/kernels.so
        XS=(-x CDDP_LIBCUDA -x CDDP_LIBNCCL -x XDG_CACHE_HOME -x FAKE_CUDA_KERNELS -x FAKE_CUDA_DEVICES
            -x FAKE_CUDA_SCHEDULE)
        C=(--data "$SMALL" --init "$TMP/init.st" --threads 1 --epochs 1 --max-steps 4 --device cpu)
        if run "$SYNC" c2 2 16 && { C[${#C[@]} - 1]=cuda; run "$SYNC" g2 2 16 "${XS[@]}"; } &&
            grep -q 'device cuda:0 (.*NCCL .*ranks 2' "$TMP/og2" && cmp g2 c2 1e-4; then
            pass "2 GPU ranks (NCCL in the step graph, random replay order) = 2 CPU ranks: $(tail -n 1 "$TMP/cmp")"
        else
            fail "2 GPU ranks vs 2 CPU ranks"; show "$TMP/og2"; show "$TMP/cmp"
        fi
    else
        fail "cannot build the emulated kernels"; show "$TMP/gxx.err"
    fi
    # rank-local batch norm on GPU ranks: the buffers go through the host
    C=(--data "$SMALL" --init "$TMP/init.st" --threads 1 --epochs 1 --max-steps 4 --device cuda)
    env CDDP_CUDA_DUMP="$TMP/srcl.cu" "$LOCAL" --data "$SMALL" --device cuda --max-steps 1 >/dev/null 2>&1
    if bash "$ROOT/tests/fakes/emu_kernels.sh" "$TMP/srcl.cu" "$TMP/kernelsl.so" 2>"$TMP/gxx.err"; then
        export FAKE_CUDA_KERNELS=$TMP/kernelsl.so
        if run "$LOCAL" gl2 2 16 "${XS[@]}" &&
            $PY "$ROOT/tests/ddp/syncbn_eval.py" "$TMP/wgl2.st" "$TMP/mgl2.csv" "$SMALL" >"$TMP/ev" 2>&1; then
            pass "2 GPU ranks, rank-local batch norm, evaluate rank 0's model: $(cat "$TMP/ev")"
        else
            fail "2 GPU ranks, rank-local batch norm: the evaluation"; show "$TMP/ogl2"; show "$TMP/ev"
        fi
    else
        fail "cannot build the emulated kernels (rank-local)"; show "$TMP/gxx.err"
    fi
else
    skip_part "GPU ranks (they need the fake driver, the fake NCCL, NVRTC and g++)"
fi

echo "$passes passed, $fails failed"
skip_end "$fails"
