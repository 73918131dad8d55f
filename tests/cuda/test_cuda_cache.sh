#!/bin/sh
# tests/cuda/test_cuda_cache.sh TEST_BIN CDDPC: the kernel cache and the
# NVRTC layer (tests/cuda/test_cuda_cache.c), with SimpleNet's emitted CUDA
# source compiled together with the runtime's own kernels for sm_80 and
# sm_90. NVRTC needs no GPU; without the CUDA toolkit this is skipped (exit 77).
. "$(dirname "$0")/../skip.sh"
bin=${1:?usage: test_cuda_cache.sh TEST_BIN CDDPC} cddpc=${2:?}
if [ ! -d /usr/local/cuda ] && [ -z "${CDDP_LIBNVRTC:-}" ]; then
    skip_all "no CUDA toolkit (/usr/local/cuda): NVRTC is needed"
fi
t=$(mktemp -d "${TMPDIR:-/tmp}/cuda_cache.XXXXXX")
trap 'rm -rf "$t"' EXIT
mkdir "$t/scratch"
"$cddpc" models/mnist.net --emit cuda "$t/emit" || { echo "FAIL: cddpc --emit cuda"; exit 1; }
"$bin" "$t/scratch" "$t/emit/all.cu" 2>"$t/err"
rc=$?
# the expected NVRTC logs go to stderr; show them only on failure
[ $rc -eq 0 ] || cat "$t/err"
exit $rc
