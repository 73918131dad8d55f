#!/bin/sh
# tests/cuda/nvrtc_check.sh: the CUDA kernels cddpc emits for the models in
# models/ and tests/cuda/models/ (and for models/mnist.net at the other
# fusion levels) compile with NVRTC for sm_80 and sm_90 with an empty log
# (DESIGN.md section 5, tier 3). Each model's kernels compile as one unit
# per architecture, as the runtime compiles them; models/mnist.net's
# kernels also compile file by file, as --emit cuda promises. Then ptxas -v
# on the sm_90 PTX of PTXAS_MODELS (default models/mnist.net,
# models/mnist_convnet.net and tests/cuda/models/amp_{bf16,fp16}.net, whose
# GEMMs hold the tensor cores' inline mma PTX) prints registers, shared memory, stack and
# spills per kernel, and fails on any spill or on static shared memory over
# 48 KiB. A warning planted in a unit must fail the check.
# Usage: tests/cuda/nvrtc_check.sh CDDPC
# Skips (exit 77) only when the CUDA toolkit is absent.
set -eu
. "$(dirname "$0")/toolkit.sh"
[ $# -ge 1 ] || { echo "usage: $0 CDDPC" >&2; exit 2; }
CDDPC=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/tests/cuda
W=$ROOT/build/tests/cuda/nvrtc
CC=${CC:-cc}
PTXAS_MODELS=${PTXAS_MODELS:-$ROOT/models/mnist.net $ROOT/models/mnist_convnet.net $ROOT/tests/cuda/models/amp_bf16.net $ROOT/tests/cuda/models/amp_fp16.net}
JOBS=$(nproc 2>/dev/null || echo 2)
rm -rf "$W"
mkdir -p "$W"

# NVRTC is linked, not loaded: this tool runs only where the toolkit is
$CC -std=c11 -O2 -Wall -Wextra -I"$CUDA_HOME/include" "$HERE/nvrtc_check.c" \
    -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lnvrtc -o "$W/nvrtc_check"

# the criterion is an empty log: a warning must fail, or the check is blind
cat > "$W/warns.cu" <<'EOF'
extern "C" __global__ void warns(float *x) { int unused; x[0] = 1.0f; }
EOF
if "$W/nvrtc_check" --arch sm_90 "$W/warns.cu" > "$W/warns.out" 2>&1; then
    echo "FAIL: nvrtc_check accepted a source that NVRTC warns about:"
    cat "$W/warns.out"
    exit 1
fi

fail=0
: > "$W/units"
# Each model's kernels compile as ONE unit per architecture (all.cu: the
# runtime compiles exactly that text on a GPU). Every model at the default
# fusion, and SimpleNet at the other levels too (their standalone bias_add /
# sum_rows / sum_all / ce kernels exist only there).
for spec in "$ROOT"/models/*.net "$HERE"/models/*.net \
            "$ROOT/models/mnist.net:--fusion=none" "$ROOT/models/mnist.net:--fusion=elementwise"; do
    model=${spec%%:*}
    flags=
    [ "$model" != "$spec" ] && flags=${spec#*:}
    name=$(basename "$model" .net)${flags:+_${flags#--fusion=}}
    d=$W/$name
    "$CDDPC" "$model" $flags --emit cuda "$d"
    mkdir -p "$d/ptx"
    echo "$d/all.cu" >> "$W/units"
done
nunits=$(wc -l < "$W/units")
# one NVRTC process per core, a unit each, for sm_80 and sm_90; the sm_90
# PTX is kept for ptxas
while read -r u; do
    echo "$u $(dirname "$u")/ptx"
done < "$W/units" | xargs -n 2 -P "$JOBS" sh -c \
    '"$0" --arch sm_80,sm_90 --ptx-dir "$2" --ptx-arch sm_90 "$1" > "$1.nvrtc" 2>&1' "$W/nvrtc_check" || true
while read -r u; do
    name=$(basename "$(dirname "$u")")
    if grep -q '^ok ' "$u.nvrtc"; then
        printf '%-22s %3d kernels, one unit, compiled clean for sm_80 and sm_90\n' "$name" \
            "$(grep -c '__global__' "$u")"
    else
        fail=1
        echo "FAIL: $name"
        sed 's/^/    /' "$u.nvrtc"
    fi
done < "$W/units"

# --emit cuda promises that each kernel's file compiles on its own: one
# model (SimpleNet: every kernel kind of an MLP) keeps that promise checked
d=$W/mnist
ls "$d"/[et]*.cu > "$d/files"
if ! xargs -n 4 -P "$JOBS" "$W/nvrtc_check" --arch sm_90 < "$d/files" > "$d/nvrtc.out" 2>&1; then
    fail=1
fi
grep -v '^ok \|^NVRTC ' "$d/nvrtc.out" || true
printf 'mnist: %d of %d kernel files compiled clean on their own for sm_90\n' \
    "$(grep -c '^ok ' "$d/nvrtc.out" || true)" "$(wc -l < "$d/files")"

# a warning planted in a model's unit is caught as it is in a file alone
cp "$W/mnist/all.cu" "$W/planted.cu"
echo 'extern "C" __global__ void planted(float *x) { int unused; x[0] = 1.0f; }' >> "$W/planted.cu"
if "$W/nvrtc_check" --arch sm_90 "$W/planted.cu" > "$W/planted.out" 2>&1 || ! grep -q 'unused' "$W/planted.out"; then
    echo "FAIL: a warning planted in mnist's all.cu was not reported:"
    cat "$W/planted.out"
    fail=1
else
    echo "planted: a warning in mnist's unit is caught: $(grep -m1 'unused' "$W/planted.out" | cut -c1-90)"
fi

for model in $PTXAS_MODELS; do
    name=$(basename "$model" .net)
    d=$W/$name
    echo
    echo "ptxas -v --gpu-name sm_90, $name kernels:"
    : > "$d/ptxas.out"
    ptx=$d/ptx/all.ptx
    if ! "$CUDA_HOME/bin/ptxas" -v --gpu-name sm_90 "$ptx" -o /dev/null >> "$d/ptxas.out" 2>&1; then
        echo "FAIL: ptxas rejected $ptx"
        fail=1
    fi
    if ! awk '
        /Compiling entry function/ { name = $0; sub(/.*function \047/, "", name); sub(/\047 for .*/, "", name); names[++n] = name
                                     regs[name] = smem[name] = stack[name] = st[name] = ld[name] = 0 }
        /bytes stack frame/ { stack[name] = $1; st[name] = $5; ld[name] = $9 }
        /Used [0-9]+ registers/ { for (i = 1; i <= NF; i++) { if ($(i + 1) ~ /^registers/) regs[name] = $i
                                                            if ($(i + 1) == "bytes" && $(i + 2) ~ /^smem/) smem[name] = $i } }
        END {
            printf "  %-44s %5s %7s %6s %8s %8s\n", "kernel", "regs", "smem", "stack", "spill st", "spill ld"
            bad = 0
            for (k = 1; k <= n; k++) {
                x = names[k]
                flag = ""
                if (st[x] + 0 > 0 || ld[x] + 0 > 0) { flag = "  SPILLS"; bad = 1 }
                if (smem[x] + 0 > 49152) { flag = flag "  SMEM > 48 KiB static"; bad = 1 }
                printf "  %-44s %5d %7d %6d %8d %8d%s\n", x, regs[x], smem[x], stack[x], st[x], ld[x], flag
            }
            if (!n) { print "  (no kernels found in ptxas output)"; bad = 1 }
            exit bad
        }' "$d/ptxas.out"; then
        fail=1
    fi
done

echo
if [ "$fail" -ne 0 ]; then
    echo "nvrtc_check: FAIL"
    exit 1
fi
echo "nvrtc_check: $nunits units x 2 archs compiled with empty logs; no spills"
