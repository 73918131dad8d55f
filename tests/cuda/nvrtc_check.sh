#!/bin/sh
# tests/cuda/nvrtc_check.sh: every CUDA kernel cddpc emits for the models in
# models/ and tests/cuda/models/ (and for models/mnist.net at the other
# fusion levels) compiles with NVRTC for sm_80 and sm_90
# with an empty log (DESIGN.md section 5, tier 3); then ptxas -v on the
# sm_90 PTX of the kernels of PTXAS_MODELS (default models/mnist.net and
# models/mnist_convnet.net)
# prints registers, shared memory, stack and spills per kernel, and fails
# on any spill or on static shared memory over 48 KiB.
# Usage: tests/cuda/nvrtc_check.sh CDDPC
# Skips (exit 0) only when the CUDA toolkit is absent.
set -eu
. "$(dirname "$0")/toolkit.sh"
[ $# -ge 1 ] || { echo "usage: $0 CDDPC" >&2; exit 2; }
CDDPC=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/tests/cuda
W=$ROOT/build/tests/cuda/nvrtc
CC=${CC:-cc}
PTXAS_MODELS=${PTXAS_MODELS:-$ROOT/models/mnist.net $ROOT/models/mnist_convnet.net}
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
nfiles=0
# every model at the default fusion, and SimpleNet at the other levels too
# (their standalone bias_add / sum_rows / sum_all / ce kernels exist only there)
for spec in "$ROOT"/models/*.net "$HERE"/models/*.net \
            "$ROOT/models/mnist.net:--fusion=none" "$ROOT/models/mnist.net:--fusion=elementwise"; do
    model=${spec%%:*}
    flags=
    [ "$model" != "$spec" ] && flags=${spec#*:}
    name=$(basename "$model" .net)${flags:+_${flags#--fusion=}}
    d=$W/$name
    "$CDDPC" "$model" $flags --emit cuda "$d"
    mkdir -p "$d/ptx"
    ls "$d"/*.cu > "$d/files"
    nfiles=$((nfiles + $(wc -l < "$d/files")))
    # files in parallel, one NVRTC process per core
    if ! xargs -n 4 -P "$JOBS" "$W/nvrtc_check" --arch sm_80,sm_90 --ptx-dir "$d/ptx" --ptx-arch sm_90 \
         < "$d/files" > "$d/nvrtc.out" 2>&1; then
        fail=1
    fi
    grep -v '^ok \|^NVRTC ' "$d/nvrtc.out" || true
    printf '%-22s %3d sources, %3d compiled clean for sm_80 and sm_90\n' "$name" \
        "$(wc -l < "$d/files")" "$(grep -c '^ok ' "$d/nvrtc.out" || true)"
done

for model in $PTXAS_MODELS; do
    name=$(basename "$model" .net)
    d=$W/$name
    echo
    echo "ptxas -v --gpu-name sm_90, $name kernels:"
    : > "$d/ptxas.out"
    # in plan order, as launch.txt lists them
    for k in $(awk '{ print $2 }' "$d/launch.txt"); do
        ptx=$d/ptx/$k.ptx
        if ! "$CUDA_HOME/bin/ptxas" -v --gpu-name sm_90 "$ptx" -o /dev/null >> "$d/ptxas.out" 2>&1; then
            echo "FAIL: ptxas rejected $ptx"
            fail=1
        fi
    done
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
echo "nvrtc_check: $nfiles sources x 2 archs compiled with empty logs; no spills"
