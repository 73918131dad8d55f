#!/bin/sh
# tests/ir/gpu_model.sh CDDPC: `--report --target h200` (compiler/gpu_model.c)
# against the prediction worked by hand from the H200 datasheet (FP32
# 66.9 TFLOP/s, 4.8 TB/s, 132 SMs x 2 blocks) for two SimpleNet kernels:
#   - t10_sgd_x6__optimizer: 3 x 4 x 535818 bytes (SGD reads p, g, writes p) over
#     4.8 TB/s = 1.339 us; ceil(535824 / 256) = 2094 blocks of 256 (the
#     aligned slab), 8 waves, all SMs busy; + 1 us graph node = 2.34 us;
#   - t1_mm_nt_bias_add_relu__epilogue: 2 x 64 x 512 x 784 + 2 x 64 x 512 FLOPs over
#     66.9 TFLOP/s = 0.769 us; 64x64 tiles: 1 x 8 = 8 blocks, 8 of 132 SMs
#     busy: 12.69 us; + 1 us = 13.69 us;
# the step is the kernels' sum plus one 5 us graph launch; an unknown
# target lists the known ones.
set -u
cddpc=$1
t=$(mktemp)
trap 'rm -f "$t"' EXIT
fail=0
"$cddpc" models/mnist.net --report --target h200 > "$t" || { echo "FAIL cddpc --target h200"; exit 1; }
row() { awk -v k="$1" '/^predicted train/ { on = 1 } on && $1 == k { print $2, $4, $6, $8 }' "$t"; }
check() {
    if [ "$2" = "$3" ]; then echo "PASS $1: $2"; else echo "FAIL $1: got '$2', want '$3'"; fail=1; fi
}
hand_sgd=$(awk 'BEGIN { printf "%.2f %.2f", 12 * 535818 / 4.8e12 * 1e6, 12 * 535818 / 4.8e12 * 1e6 + 1 }')
hand_mm=$(awk 'BEGIN { f = 2 * 64 * 512 * 784 + 2 * 64 * 512; r = f / 66.9e12 * 1e6 * 132 / 8; printf "%.2f %.2f", r, r + 1 }')
check "t10_sgd_x6__optimizer blocks waves roofline total" "$(row t10_sgd_x6__optimizer)" "2094 8 $hand_sgd"
check "t1_mm_nt_bias_add_relu__epilogue blocks waves roofline total" "$(row t1_mm_nt_bias_add_relu__epilogue)" "8 1 $hand_mm"
sum=$(awk '/^predicted train/ { on = 1 } on && $1 ~ /^t[0-9]+_/ { s += $8 } END { printf "%.1f", s + 5 }' "$t")
step=$(sed -n 's/^  step \([0-9.]*\) us.*/\1/p' "$t")
check "step = kernels + graph launch" "$step" "$sum"
"$cddpc" models/mnist.net --report --target v100 2> "$t" >/dev/null
grep -q "unknown target (cpu, gpu, h100, h200, a100, t4): v100" "$t" && echo "PASS unknown target" || { echo "FAIL unknown target: $(cat "$t")"; fail=1; }
exit $fail
