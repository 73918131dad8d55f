#!/usr/bin/env bash
# tests/fakes/emu_kernels.sh SRC.cu OUT.so: a program's NVRTC source (dumped
# with CDDP_CUDA_DUMP) compiled by g++ against the CUDA emulator
# (tests/cuda/emu.h) into the shared object the fake driver runs kernels
# from (FAKE_CUDA_KERNELS). Exit 1, with g++'s errors on stderr, when the
# source is missing or does not compile.
set -u
src=${1:?usage: emu_kernels.sh SRC.cu OUT.so} out=${2:?usage: emu_kernels.sh SRC.cu OUT.so}
root=$(cd "$(dirname "$0")/../.." && pwd)
[ -s "$src" ] || { echo "emu_kernels.sh: $src is missing or empty (no NVRTC source was dumped)" >&2; exit 1; }
# fused multiply-adds where NVRTC fuses them (tests/cuda/emu_flags.sh)
exec g++ -std=c++17 $(sh "$root/tests/cuda/emu_flags.sh") -fPIC -shared -I"$root/tests/cuda" -include emu.h -x c++ "$src" -x none \
    "$root/tests/fakes/fake_cuda_emu.cpp" -o "$out"
