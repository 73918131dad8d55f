#!/bin/sh
# tests/cuda/emu_flags.sh: the g++ flags the CUDA emulator's kernels are
# built with (tests/cuda/kernel_check.sh, tests/fakes/emu_kernels.sh).
# NVRTC contracts a*b+c into one fused multiply-add by default (--fmad=true:
# SimpleNet's compute_90 PTX from NVRTC 13.0 has 315 fma.rn.f32, 13
# mul.f32, 145 add.f32; with --fmad=false 33, 295, 427), so the emulator
# does too where the host has FMA: g++ forms FMAs at -O2 with
# -ffp-contract=fast (ISO C++ mode alone turns contraction off, and -O1
# never forms them). Without FMA on the host it says so on stderr and
# rounds twice, as before.
if grep -qw fma /proc/cpuinfo 2>/dev/null; then
    echo "-O2 -ffp-contract=fast -mfma"
else
    echo "emu_flags.sh: this CPU has no FMA: the emulated kernels round a*b+c twice, NVRTC's once" >&2
    echo "-O2 -ffp-contract=off"
fi
