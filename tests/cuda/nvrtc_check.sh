#!/bin/sh
# tests/cuda/nvrtc_check.sh CDDPC [--all]: the CUDA kernels cddpc emits for
# the models in models/ and tests/cuda/models/ (and for models/mnist.net at
# the other fusion levels) compile with NVRTC for sm_80 and sm_90 with an
# empty log (DESIGN.md section 5, tier 3). Each model's kernels are one
# unit (all.cu: the text the runtime compiles); models/mnist.net's kernel
# files also compile one by one, as --emit cuda promises.
#
# Two depths (nvrtc_check.c):
#   default (make check): NVRTC's front end (-fdevice-syntax-only: every
#     error and warning) on every unit and kernel file for both archs, and
#     the whole compile (NVVM, then ptxas -v) for both archs of FULL_MODELS
#     (default SimpleNet, the ConvNet, and the bf16 and fp16 tensor-core
#     GEMMs, whose inline mma PTX only ptxas checks); it ends by naming
#     what it left to --all.
#   --all (make test, cuda-nvrtc-all-1 .. -3): the whole compile of every unit
#     and kernel file; --all --part K/M compiles every M-th unit from the
#     K-th (the suite runs M entries, each within its time budget), part 1
#     also SimpleNet's kernel files and the planted warning.
# ptxas -v gives registers, shared memory, stack and spills per kernel;
# the check fails on any spill or on static shared memory over 48 KiB. A
# warning planted in a unit must fail the check. Compilations that passed
# are remembered by content (build/tests/cuda/nvrtc-cache: NVRTC's
# version, the arch, the options, the text), so an unchanged unit is not
# compiled again. Skips (exit 77) only when the CUDA toolkit is absent.
set -eu
. "$(dirname "$0")/toolkit.sh"
[ $# -ge 1 ] || { echo "usage: $0 CDDPC [--all [--part K/M]]" >&2; exit 2; }
CDDPC=$1
ALL=0 PART=1 PARTS=1
[ "${2:-}" = --all ] && ALL=1
if [ "${3:-}" = --part ]; then
    PART=${4%/*} PARTS=${4#*/}
    [ "$PART" -ge 1 ] 2>/dev/null && [ "$PART" -le "$PARTS" ] || { echo "$0: --part K/M, 1 <= K <= M" >&2; exit 2; }
fi
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/tests/cuda
W=$ROOT/build/tests/cuda/nvrtc
[ $ALL = 0 ] || W=$W-all-$PART
CACHE=$ROOT/build/tests/cuda/nvrtc-cache
CC=${CC:-cc}
FULL_MODELS=${FULL_MODELS:-mnist mnist_convnet amp_bf16 amp_fp16}
JOBS=$(nproc 2>/dev/null || echo 2)
rm -rf "$W"
mkdir -p "$W" "$CACHE"

# NVRTC is linked, not loaded: this tool runs only where the toolkit is
$CC -std=c11 -O2 -Wall -Wextra -I"$CUDA_HOME/include" "$HERE/nvrtc_check.c" \
    -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lnvrtc -o "$W/nvrtc_check"
NV=$W/nvrtc_check

# the criterion is an empty log: a warning must fail, or the check is blind
cat > "$W/warns.cu" <<'CU'
extern "C" __global__ void warns(float *x) { int unused; x[0] = 1.0f; }
CU
for depth in --syntax-only "--ptxas-info $W"; do
    [ $ALL = 1 ] || [ "$depth" = --syntax-only ] || continue
    if "$NV" --arch sm_90 $depth "$W/warns.cu" > "$W/warns.out" 2>&1 || ! grep -q unused "$W/warns.out"; then
        echo "FAIL: nvrtc_check ${depth%% *} accepted a source that NVRTC warns about:"
        cat "$W/warns.out"
        exit 1
    fi
done

fail=0
: > "$W/units"
# Every model at the default fusion (with eight of tensors of any rank
# from tests/torch (pos_net: a loss over positions; lm_tokmlp: embeddings;
# seq2seq: an LSTM's c0 with a gradient); models/row_attention.net and conv_autoencoder.net stand
# for rows_net's and autoenc_net's kernels), and SimpleNet at the other levels too
# (their standalone bias_add / sum_rows / sum_all / ce kernels exist only there).
for spec in "$ROOT"/models/*.net "$HERE"/models/*.net "$ROOT"/tests/torch/attn_net.net "$ROOT"/tests/torch/rowgate_net.net \
            "$ROOT"/tests/torch/mask_net.net "$ROOT"/tests/torch/conv1d_net.net "$ROOT"/tests/torch/updown_net.net \
            "$ROOT"/tests/torch/pos_net.net "$ROOT"/tests/torch/lm_tokmlp.net "$ROOT"/tests/torch/seq2seq.net \
            "$ROOT/models/mnist.net:--fusion=none" "$ROOT/models/mnist.net:--fusion=elementwise"; do
    model=${spec%%:*}
    flags=
    [ "$model" != "$spec" ] && flags=${spec#*:}
    name=$(basename "$model" .net)${flags:+_${flags#--fusion=}}
    d=$W/$name
    "$CDDPC" "$model" $flags --emit cuda "$d"
    echo "$d/all.cu" >> "$W/units"
done
if [ "$PARTS" -gt 1 ]; then    # this part's units: every PARTS-th from the PART-th
    awk -v k="$PART" -v m="$PARTS" '(NR - 1) % m == k - 1' "$W/units" > "$W/units.part"
    mv "$W/units.part" "$W/units"
fi
nunits=$(wc -l < "$W/units")
ls "$W"/mnist/[et]*.cu > "$W/files"
[ "$PART" = 1 ] || : > "$W/files"   # SimpleNet's kernel files: part 1's
nfiles=$(wc -l < "$W/files")

# full NAME: whether unit NAME gets the whole compile at this depth
full() { [ $ALL = 1 ] && return 0; for m in $FULL_MODELS; do [ "$m" = "$1" ] && return 0; done; return 1; }

# one process per core, a unit each: the front end for both archs, then
# the whole compile where this depth does it
while read -r u; do
    name=$(basename "$(dirname "$u")")
    if full "$name"; then echo "--ptxas-info $(dirname "$u") $u"; else echo "--syntax-only - $u"; fi
done < "$W/units" | xargs -n 3 -P "$JOBS" sh -c '
    "$0" --arch sm_80,sm_90 --cache "$1" --syntax-only "$4" > "$4.nvrtc" 2>&1 || exit 0
    [ "$2" = --syntax-only ] || "$0" --arch sm_80,sm_90 --cache "$1" --ptxas-info "$3" "$4" >> "$4.nvrtc" 2>&1
    exit 0' "$NV" "$CACHE"
nfull=0
while read -r u; do
    name=$(basename "$(dirname "$u")")
    what="front end"
    full "$name" && what="whole compile" && nfull=$((nfull + 1))
    if ! grep -q '^FAIL' "$u.nvrtc" && grep -q '^ok ' "$u.nvrtc"; then
        printf '%-22s %3d kernels, one unit, clean for sm_80 and sm_90 (%s)\n' "$name" \
            "$(grep -c '__global__' "$u")" "$what"
    else
        fail=1
        echo "FAIL: $name"
        sed 's/^/    /' "$u.nvrtc"
    fi
done < "$W/units"

# --emit cuda promises that each kernel's file compiles on its own: one
# model (SimpleNet: every kernel kind of an MLP) keeps that promise checked
depth=--syntax-only
[ $ALL = 1 ] && depth="--ptxas-info $W/mnist"
if ! xargs -r -n 4 -P "$JOBS" "$NV" --arch sm_90 --cache "$CACHE" $depth < "$W/files" > "$W/mnist/nvrtc.out" 2>&1; then
    fail=1
fi
grep -v '^ok \|^NVRTC ' "$W/mnist/nvrtc.out" || true
printf 'mnist: %d of %d kernel files clean on their own for sm_90 (%s)\n' \
    "$(grep -c '^ok ' "$W/mnist/nvrtc.out" || true)" "$nfiles" "$([ $ALL = 1 ] && echo whole compile || echo front end)"

# a warning planted in a model's unit is caught at this depth
cp "$W/mnist/all.cu" "$W/planted.cu"
echo 'extern "C" __global__ void planted(float *x) { int unused; x[0] = 1.0f; }' >> "$W/planted.cu"
for depth in --syntax-only "--ptxas-info $W"; do
    [ $ALL = 1 ] || [ "$depth" = --syntax-only ] || continue
    [ "$PART" = 1 ] || continue
    if "$NV" --arch sm_90 $depth "$W/planted.cu" > "$W/planted.out" 2>&1 || ! grep -q 'unused' "$W/planted.out"; then
        echo "FAIL: a warning planted in mnist's all.cu was not reported (${depth%% *}):"
        cat "$W/planted.out"
        fail=1
    else
        echo "planted (${depth%% *}): a warning in mnist's unit is caught: $(grep -m1 'unused' "$W/planted.out" | cut -c1-80)"
    fi
done

# registers, shared memory and spills from ptxas -v, per kernel: the table
# for FULL_MODELS, a failure for any unit
for info in "$W"/*/all.sm_*.ptxas; do
    [ -f "$info" ] || continue
    name=$(basename "$(dirname "$info")")
    arch=$(basename "$info" .ptxas)
    arch=${arch#all.}
    show=0
    for m in $FULL_MODELS; do [ "$m" = "$name" ] && [ "$arch" = sm_90 ] && show=1; done
    [ $show = 1 ] && { echo; echo "ptxas -v, $name kernels for $arch:"; }
    if ! awk -v show=$show -v unit="$name $arch" '
        /Compiling entry function/ { name = $0; sub(/.*function \047/, "", name); sub(/\047 for .*/, "", name); names[++n] = name
                                     regs[name] = smem[name] = stack[name] = st[name] = ld[name] = 0 }
        /bytes stack frame/ { stack[name] = $3; st[name] = $7; ld[name] = $11 }   # "ptxas . 0 bytes stack frame, 0 bytes spill stores, 0 ..."
        /Used [0-9]+ registers/ { for (i = 1; i <= NF; i++) { if ($(i + 1) ~ /^registers/) regs[name] = $i
                                                            if ($(i + 1) == "bytes" && $(i + 2) ~ /^smem/) smem[name] = $i } }
        END {
            if (show) printf "  %-44s %5s %7s %6s %8s %8s\n", "kernel", "regs", "smem", "stack", "spill st", "spill ld"
            bad = 0
            for (k = 1; k <= n; k++) {
                x = names[k]
                flag = ""
                if (st[x] + 0 > 0 || ld[x] + 0 > 0) { flag = "  SPILLS"; bad = 1 }
                if (smem[x] + 0 > 49152) { flag = flag "  SMEM > 48 KiB static"; bad = 1 }
                if (show || flag != "") printf "  %s%-44s %5d %7d %6d %8d %8d%s\n", show ? "" : unit ": ", x, regs[x], smem[x], stack[x], st[x], ld[x], flag
            }
            if (!n) { print "  " unit ": no kernels in ptxas -v"; bad = 1 }
            exit bad
        }' "$info"; then
        fail=1
    fi
done

echo
if [ "$fail" -ne 0 ]; then
    echo "nvrtc_check: FAIL"
    exit 1
fi
if [ $ALL = 1 ]; then
    echo "nvrtc_check --all: $nunits units and $nfiles kernel files: front end and whole compile clean for sm_80 and sm_90; no spills"
else
    echo "not checked here: NVVM and ptxas (the whole compile) for $((nunits - nfull)) of $nunits units and SimpleNet's $nfiles kernel files alone: cuda-nvrtc-all-1 .. -3 (test tier) do them"
    echo "nvrtc_check: $nunits units x 2 archs clean in the front end; $nfull compiled whole, no spills"
fi
