#!/bin/sh
# tests/cuda/kernel_check_gpu.sh: kernel_check's GPU backend
# (tests/gpu/kc_gpu.c), the one tests/gpu/run.sh builds on a GPU host,
# built here the same way and run on the CPU against the fake driver
# (tests/fakes/fake_cuda.c): the runtime's rt_cuda layer really loads the
# NVRTC-compiled module, copies the arenas and launches each kernel with
# its geometry, and the fake driver runs the launch through the CUDA
# emulator. So the GPU checker's own code -- the backend, --compile-only
# -- has run before a GPU is lent, and its build line is the one run.sh
# uses (CC, -Iruntime -Itests/cuda, kc_gpu.c kc_core.c kc_act16.c kc_program.c).
#
# Usage: tests/cuda/kernel_check_gpu.sh CDDPC FAKE_LIBCUDA MODEL.net [kernel_check options]
# CC and CDDPC_CFLAGS (e.g. sanitizer flags) are honoured.
# Skips (exit 77) only when the CUDA toolkit is absent (NVRTC compiles the
# module the fake driver loads).
set -eu
. "$(dirname "$0")/toolkit.sh"
if [ $# -lt 3 ]; then
    echo "usage: $0 CDDPC FAKE_LIBCUDA MODEL.net [kernel_check options]" >&2
    exit 2
fi
CDDPC=$1 FAKE=$(realpath "$2") MODEL=$3
shift 3
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CC=${CC:-cc}
LIB=$(dirname "$CDDPC")/libcddprt.a
[ -f "$LIB" ] || { echo "FAIL: $LIB not found (make first)"; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/kc_gpu.XXXXXX")
trap 'rm -rf "$W"' EXIT
export XDG_CACHE_HOME=$W/cache     # the kernel cache, private
unset CDDP_LIBNVRTC FAKE_CUDA_KERNELS

"$CDDPC" "$MODEL" --emit c "$W/emit"
LINK=$(cat "$(dirname "$LIB")/libcddprt.ldflags" 2>/dev/null || echo "-lopenblas -lz -lm -lpthread -ldl")
# run.sh's line, with this machine's runtime and flags
$CC -std=c11 -O2 -D_GNU_SOURCE -Wall -Wextra ${CDDPC_CFLAGS:-} -fopenmp -I"$ROOT/runtime" -I"$ROOT/tests/cuda" -I"$W/emit" \
    "$ROOT/tests/gpu/kc_gpu.c" "$ROOT/tests/cuda/kc_core.c" "$ROOT/tests/cuda/kc_act16.c" "$ROOT/tests/cuda/kc_program.c" "$LIB" $LINK \
    -o "$W/kernel_check"

export CDDP_LIBCUDA=$FAKE
# --compile-only: NVRTC for the fake device's sm_90, every kernel's
# attributes; it also dumps the full NVRTC source the fake driver's
# kernels are built from
CDDP_CUDA_DUMP=$W/src.cu "$W/kernel_check" --compile-only >"$W/compile.txt" 2>&1 || {
    echo "FAIL: kernel_check --compile-only"; cat "$W/compile.txt"; exit 1; }
tail -1 "$W/compile.txt"
nk=$(grep -c '^  \(train\|eval\) ' "$W/compile.txt" || true)
[ "$nk" -gt 0 ] && grep -q "^compiled $nk kernels for sm_" "$W/compile.txt" || {
    echo "FAIL: --compile-only listed $nk kernels"; cat "$W/compile.txt"; exit 1; }
bash "$ROOT/tests/fakes/emu_kernels.sh" "$W/src.cu" "$W/kernels.so"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
FAKE_CUDA_KERNELS=$W/kernels.so "$W/kernel_check" "$@" || exit 1

# and it must be able to fail: the same module, but the fake driver runs
# kernels without a single __syncthreads (the shared tiles race)
sed 's/__syncthreads();//' "$W/src.cu" >"$W/mutant.cu"
if cmp -s "$W/src.cu" "$W/mutant.cu"; then
    echo "FAIL: the mutant changed nothing (no __syncthreads in the source?)"
    exit 1
fi
bash "$ROOT/tests/fakes/emu_kernels.sh" "$W/mutant.cu" "$W/mutant.so"
rc=0
FAKE_CUDA_KERNELS=$W/mutant.so "$W/kernel_check" --sizes 19:19:0 --plan train >"$W/mutant.txt" 2>&1 || rc=$?
if [ $rc -eq 1 ] && grep -q '^MISMATCH' "$W/mutant.txt" && tail -1 "$W/mutant.txt" | grep -q ': FAIL$'; then
    echo "the kernels without __syncthreads were rejected: $(grep -m1 '^MISMATCH' "$W/mutant.txt" | cut -c1-120)"
else
    echo "FAIL: the kernels without __syncthreads passed (status $rc)"
    tail -5 "$W/mutant.txt"
    exit 1
fi
echo "kernel_check (gpu backend, fake driver): PASS"
