#!/bin/bash
# tests/ddp/tensor_ranks.sh PROGRAM DATA: a model of tensors of any rank
# (tests/torch/attn_net.net: batched products, reductions over dimensions,
# broadcasts, a batch not first; tests/torch/mask_net.net: masks, indices,
# gathers and their scatter-add gradients; rows_net, conv1d_net with
# SyncBatchNorm, updown_net: the layers over the last dimension, the 1-d
# family, transposed convolutions and upsampling; lm_bengio on a text
# file: embeddings and their scatter-add gradients, a tied weight) under
# data parallelism and resume:
#   (a) 2 ranks x batch 16 == 1 rank x batch 32 over 40 steps (weights,
#       step losses, epoch metrics within 1e-5, tests/ddp/compare.py);
#   (b) stopped by --max-steps at step 25 with a checkpoint and resumed to
#       step 50: the weights equal the uninterrupted run's bit for bit, on
#       1 rank and on 2.
# Skipped (exit 77) when mpirun is missing or the program lacks MPI (then
# only the 1-rank resume runs).
. "$(dirname "$0")/../skip.sh"
prog=$1 data=$2
# The convolutions in the emitted loops, not oneDNN (as tests/ddp/syncbn.sh):
# oneDNN's blocked kernels sum in an order that follows the batch, and
# conv1d_net's batch norm grows those 1e-8 differences past 1e-5 in 40
# steps under DNNL_MAX_CPU_ISA=AVX2 (1.6e-5; 1e-7 in the loops)
export CDDP_DNNL=0
PY=/usr/bin/python3
here=$(cd "$(dirname "$0")" && pwd)
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fails=0
ok() { echo "PASS $1"; }
no() { echo "FAIL $1"; fails=$((fails + 1)); }
show() { sed 's/^/      /' "$1" | tail -n 20; }
if [ -f "$data" ]; then     # a text file (a language model's): as it is
    cp "$data" "$t/d"
else
    $PY "$here/../runtime/small_idx.py" "$data" "$t/d" 2000 200 >/dev/null || { echo "FAIL: cannot cut the data set"; exit 1; }
fi
"$prog" --data "$t/d" --threads 1 --lr 0 --max-steps 1 --save "$t/init.st" >/dev/null 2>&1 || no "the initial weights"
common="--data $t/d --threads 1 --epochs 1 --shuffle on --seed 4"
init="--init $t/init.st"

# ---- (b) resume: WHO TAG RUNNER...: 50 steps whole, and 25 + a resume to 50 --------
resume() {
    local who=$1 tag=$2
    shift 2
    "$@" $init --max-steps 50 --save "$t/${tag}a.st" >/dev/null 2>&1
    "$@" $init --max-steps 25 --checkpoint "$t/${tag}ck.st" >/dev/null 2>&1
    "$@" --max-steps 50 --resume "$t/${tag}ck.st" --save "$t/${tag}b.st" >"$t/o$tag" 2>&1
    if cmp -s "$t/${tag}a.st" "$t/${tag}b.st"; then
        ok "$who: stopped at step 25 with a checkpoint, resumed to 50: bitwise the uninterrupted run"
    else no "$who resumed differs from the uninterrupted run"; show "$t/o$tag"; fi
}
resume "1 rank" r "$prog" $common --batch 32

if ! command -v mpirun >/dev/null 2>&1 || ! strings "$prog" | grep -q MPI_Init_thread; then
    skip_part "2 ranks (no mpirun, or the program was built without MPI)"
    skip_end "$fails"
fi
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# ---- (a) 2 ranks = 1 rank ------------------------------------------------------------
"$prog" $common $init --batch 32 --max-steps 40 --save "$t/w1.st" --step-log "$t/s1.csv" --metrics "$t/m1.csv" \
    >"$t/one.out" 2>&1 || { no "1 rank, batch 32"; show "$t/one.out"; }
mpirun -np 2 "$prog" $common $init --batch 16 --max-steps 40 --save "$t/w2.st" --step-log "$t/s2.csv" \
    --metrics "$t/m2.csv" >"$t/two.out" 2>&1 || { no "2 ranks, batch 16"; show "$t/two.out"; }
if $PY "$here/compare.py" "$t/w1.st" "$t/w2.st" "$t/s1.csv" "$t/s2.csv" "$t/m1.csv" "$t/m2.csv" 1e-5 >"$t/cmp" 2>&1
then ok "2 ranks x 16 = 1 rank x 32: $(tail -n 1 "$t/cmp")"
else no "2 ranks x 16 vs 1 rank x 32:"; show "$t/cmp"; fi

resume "2 ranks" p mpirun -np 2 "$prog" $common --batch 16
echo "tensor-ranks: $fails failed"
[ "$fails" -eq 0 ]
