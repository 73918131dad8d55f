#!/usr/bin/env bash
# tests/gpu/cc.sh: the C compiler cddpc calls on a GPU host (run.sh sets
# CDDPC_CC to this). cddpc links every program with -lopenblas, which GPU
# hosts lack: the runtime there is built with CDDP_NO_BLAS, so the flag is
# dropped; -lz becomes the zlib run.sh found (CDDP_GPU_ZLIB); -ldl is added
# for glibc older than 2.34, where dlopen is not in libc.
args=()
for a in "$@"; do
    case $a in
        -lopenblas) ;;
        -lz) args+=(${CDDP_GPU_ZLIB:--lz}) ;;
        *) args+=("$a") ;;
    esac
done
exec "${CDDP_GPU_CC:-cc}" "${args[@]}" -ldl
