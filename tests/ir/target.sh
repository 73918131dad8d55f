#!/bin/sh
# tests/ir/target.sh CDDPC: --target names the GPU the CUDA launches are
# scheduled for (compiler/sched_gpu.c) and changes those decisions and
# nothing else. For SimpleNet and the ConvNet at h100 (the default), h200
# and t4: the C kernels are the same text; the CUDA launch tables differ
# where the GPU model weighs the targets apart (t4's 40 SMs and a100's
# 108: other tiles and splits; h200 against h100: the same, SimpleNet's
# step in L2 on both); no --target is --target h100; the program records
# its target.
set -u
cddpc=$1
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fails=0
ok() { echo "PASS $*"; }
no() { echo "FAIL $*"; fails=$((fails + 1)); }
# the C kernels: program.c without the CUDA source, the launch table and
# the plan's sizes (the GPU's workspace and counters live in them)
ckernels() {
    grep -v '^    "\|^    {"[et][0-9]\|^    \.train = {\|^    \.eval = {\|^    \.gpu_target = ' "$1"
}
for m in models/mnist.net models/mnist_convnet.net; do
    name=$(basename "$m" .net)
    for tg in default h100 h200 t4; do
        flag=
        [ $tg = default ] || flag="--target $tg"
        $cddpc "$m" $flag --emit c "$t/$name.$tg.c" --emit cuda "$t/$name.$tg.cu" >/dev/null ||
            { no "$name: cddpc $flag failed"; continue; }
        ckernels "$t/$name.$tg.c/program.c" >"$t/$name.$tg.k"
    done
    for tg in h200 t4; do
        cmp -s "$t/$name.h100.k" "$t/$name.$tg.k" && ok "$name: the C kernels are the same for $tg as for h100" ||
            { no "$name: --target $tg changed the C kernels:"; diff "$t/$name.h100.k" "$t/$name.$tg.k" | head -n 10; }
    done
    cmp -s "$t/$name.default.cu/launch.txt" "$t/$name.h100.cu/launch.txt" &&
        cmp -s "$t/$name.default.cu/all.cu" "$t/$name.h100.cu/all.cu" &&
        ok "$name: no --target schedules for h100" || no "$name: the default target is not h100"
    grep -q '\.gpu_target = "h100"' "$t/$name.h100.c/program.c" && grep -q '\.gpu_target = "t4"' "$t/$name.t4.c/program.c" &&
        ok "$name: the program records its target" || no "$name: rt_model.gpu_target missing or wrong"
    cmp -s "$t/$name.h100.cu/launch.txt" "$t/$name.t4.cu/launch.txt" &&
        no "$name: t4 (40 SMs) and h100 (132) give the same launches" ||
        ok "$name: t4's launches differ from h100's ($(diff "$t/$name.h100.cu/launch.txt" "$t/$name.t4.cu/launch.txt" | grep -c '^<') kernels)"
done
# SimpleNet's step (4.8 MB) stays in L2, 50 MB on both the H100 and the
# H200, which have the same SMs and clocks: their memories' bandwidths,
# the one difference, weigh nothing, and the launches are the same; the
# A100 (108 SMs at 1.41 GHz, another L2 rate) splits its GEMMs otherwise
cmp -s "$t/mnist.h100.cu/launch.txt" "$t/mnist.h200.cu/launch.txt" &&
    ok "mnist: h100 and h200 give the same launches (the step in L2 on both)" ||
    no "mnist: h100 and h200 launches differ: $(diff "$t/mnist.h100.cu/launch.txt" "$t/mnist.h200.cu/launch.txt" | grep '^<' | cut -c3-)"
$cddpc models/mnist.net --target a100 --emit cuda "$t/mnist.a100.cu" >/dev/null || no "mnist: cddpc --target a100 failed"
cmp -s "$t/mnist.h100.cu/launch.txt" "$t/mnist.a100.cu/launch.txt" &&
    no "mnist: a100 (108 SMs) and h100 (132) give the same launches" ||
    ok "mnist: a100's launches differ from h100's ($(diff "$t/mnist.h100.cu/launch.txt" "$t/mnist.a100.cu/launch.txt" | grep -c '^<') kernels)"
echo "target: $fails failed"
[ $fails -eq 0 ]
