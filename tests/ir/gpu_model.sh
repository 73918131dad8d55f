#!/bin/sh
# tests/ir/gpu_model.sh CDDPC: `--report --target h200` (compiler/gpu_model.c)
# against the prediction worked by hand from the H200 datasheet (FP32
# 66.9 TFLOP/s, 4.8 TB/s, 132 SMs x 2 blocks at 1.98 GHz, 50 MB of L2) and
# gpu_rates.c's stated assumptions (L2 at 5120 bytes a clock, 10.14 TB/s;
# 1 us a graph node; no kernel under 2 us; a split-K tail of 1 us plus
# each tile's partials read back by its last block at 64 bytes a clock)
# for SimpleNet (batch 64):
#   - its step touches 4.8 MB (activations, parameters, gradients), within
#     one half of the L2: every kernel's bytes at the L2's 10.14 TB/s;
#   - t8_sgd_x6__optimizer: 3 x 4 x 535818 bytes (SGD reads p, g, writes p)
#     at 10.14 TB/s = 0.63 us; 2094 blocks of 256 (the aligned slab), 8
#     waves; under the 2 us floor (bound "min"), + 1 us graph node = 3.00;
#   - t0 (rule data-prologue: fc1's GEMM gathers the batch as it loads its
#     tiles): 2 x 64 x 784 + 2 x 64 x 512 x 784 + 2 x 64 x 512 FLOPs at a
#     third of 66.9 TFLOP/s (2 x 4 outputs per thread: 8 FMAs per 6 shared
#     loads) over 112 of 132 SMs (32x64 tiles, 2 x 8 tiles, K = 784 in 7
#     slices) + the split-K tail (1 us + 7 x 32 x 64 x 4 bytes at 64 bytes
#     a clock) + 1 us;
#   - t1, fc2's forward (64 x 256, K = 512): 16x64 tiles, 4 x 4 x 8 slices
#     = 128 blocks at a fifth of the FP32 peak (1 x 4), + its tail (8
#     slices of 16 x 64) + 1 us; the unsplit tiles are listed and slower;
#   - t3, fc3's input gradient (64 x 256, K = 10: no split-K): 16x64
#     tiles, 16 blocks, FLOP-bound: 2 x 64 x 256 x 10 + 2 x 64 x 256 (the
#     ReLU's gradient and the bias gradient's sum) at a fifth of the peak;
#   - t6, fc2's weight gradient (256 x 512, K = the batch): the split's
#     tail (over 1 us) costs more than the SMs it would fill: 16x64 tiles,
#     16 x 8 = 128 blocks, no split, 2 x 256 x 512 x 64 FLOPs at a fifth;
#   - t5_t6__siblings, fc2's dx (t5, 32x64 x 8 slices, 128 blocks) and dW
#     GEMMs in one launch of 256 blocks, one wave: the slower part (t5 with
#     its tail) or both parts' rooflines over the whole GPU, whichever is
#     longer (the slower part), + 1 us;
#   - runtime_step_turn zeroes the gradients the kernels accumulate into
#     (the three biases', 512 + 256 + 10 floats), fix's counters (48, a
#     tile each of the three split GEMMs, 16 tiles each) and stat (1
#     double): 3312 bytes on 1 block, 1/132 of 10.14 TB/s = 0.04 us, in the
#     last block of the optimizer kernel, the step's last (no node);
#   - t2 (rule row-tail: fc3's GEMM, then softmax + cross-entropy, its
#     gradient and fc3's bias gradient in the block that finishes the one
#     row of 16x64 tiles) against the same GEMM without the rule
#     (--fusion=all,-row-tail): the tail's 5420 bytes (logits and labels
#     read back, the logits' gradient, the bias gradient and the loss sum
#     written) at 4/132 of the L2 rate, and its 5824 FLOPs (4 + 4 a logit
#     for the loss and its gradient, 1 a logit for the bias gradient's
#     sum, 1 a row for the loss's) at the GEMM's rate over its 4 blocks:
#     0.032 us more; the row kernel's node is gone;
#   - SimpleNet under precision bf16: the activations whose values its
#     kernels round are 16-bit on the GPU (6 of the train plan's 8 act
#     buffers: not the images and the labels), 2 bytes a value: t3 reads
#     dY (64 x 10) and the ReLU's output (64 x 256) and writes dX (64 x
#     256) at 2 bytes, W (10 x 256) and the bias gradient (256) at 4:
#     78080 bytes, 76.25 KiB (fp32: 141.50); its GEMMs on the tensor
#     cores in every tile, at (r x 2048 / (8 + 4r)) / (989.5 / 66.9 x 128)
#     of the dense peak for r rows a thread (18% in 64x64 tiles, 14% in
#     32x64, 9% in 16x64; the report lists the tiles used); t1 (fc2's
#     forward) in 16x64 tiles x 8 slices = 128 blocks, its FLOPs at 9% of
#     the tensor peak over 128 of 132 SMs, + its split-K tail;
#   - the ConvNet's first channel pass (t2_mean_chan_allreduce, batch
#     norm's mean over 16 channels of 64 x 28 x 28, its sum over the ranks
#     in place after it: rule sum-in-place): 16 blocks a channel (264 / 16
#     rounded down; 50176 elements, at least 2048 a slice), 256 blocks in
#     one wave of 2 an SM, every SM busy: its input (3211264 bytes) and 16
#     means at the L2 rate (the ConvNet's step, 12.9 MB, in L2 too);
#     and no all-reduce of SyncBatchNorm's runs as a kernel of its own
#     (a copy and a graph node each before);
# the step is the kernels' and the runtime's turn's sum plus 1/16 of a 5 us
# graph launch, and no slower than with one tile for every GEMM
# (--gpu-tile); an unknown target lists the known ones.
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
L2=$(awk 'BEGIN { print 5120 * 1.98e9 }')
SM=$(awk 'BEGIN { print 64 * 1.98e9 }')    # one SM's reads from L2
hand_sgd=$(awk -v l2=$L2 'BEGIN { printf "%.2f 3.00", 12 * 535818 / l2 * 1e6 }')
hand_mm=$(awk -v sm=$SM 'BEGIN { f = 2 * 64 * 784 + 2 * 64 * 512 * 784 + 2 * 64 * 512
    r = f / (66.9e12 / 3) * 1e6 * 132 / 112 + 1 + 7 * 32 * 64 * 4 / sm * 1e6; printf "%.2f %.2f", r, r + 1 }')
hand_zb=$(awk -v l2=$L2 'BEGIN { r = (4 * 778 + 4 * 48 + 8) / l2 * 1e6 * 132 / 1; printf "%.2f %.2f", r, r }')
part() { awk -v k="$1" '/^predicted train/ { on = 1 } on && $1 == k { print $6 }' "$t"; }
pair=$(awk '/^predicted train/ { on = 1 } on && $1 == "=" && $2 == "t5_t6__siblings" { print $3, $5, $9 }' "$t")
hand_t6=$(awk 'BEGIN { printf "%.2f", 2 * 256 * 512 * 64 / (66.9e12 / 5) * 1e6 * 132 / 128 }')
check "t6_mm_tn (fc2's weight gradient, unsplit 16x64 tiles) blocks waves roofline tile" \
    "$(awk '/^predicted train/ { on = 1 } on && $1 == "t6_mm_tn" { print $2, $4, $6, $10, $11 }' "$t")" "128 1 $hand_t6 16x64 "
# t5 with its tail is the slower part; both parts' rooflines (no tails)
# over the whole GPU are less
hand_pair=$(awk -v sm=$SM 'BEGIN { a5 = (2 * 64 * 512 * 256 + 2 * 64 * 512) / (66.9e12 / 3) * 1e6
    a = a5 * 132 / 128 + 1 + 8 * 32 * 64 * 4 / sm * 1e6; b = 2 * 256 * 512 * 64 / (66.9e12 / 5) * 1e6
    both = a5 + b; m = a > both ? a : both; printf "256 1 %.2f", (m > 2 ? m : 2) + 1 }')
hand_t1=$(awk -v sm=$SM 'BEGIN { r = (2 * 64 * 256 * 512 + 2 * 64 * 256) / (66.9e12 / 5) * 1e6 * 132 / 128
    r += 1 + 8 * 16 * 64 * 4 / sm * 1e6; printf "%.2f %.2f", r, r + 1 }')
check "t1 (fc2 forward, 16x64 tiles x 8 slices) blocks waves roofline total" \
    "$(row t1_mm_nt_bias_add_relu__epilogue)" "128 1 $hand_t1"
hand_t3=$(awk 'BEGIN { printf "%.2f", (2 * 64 * 256 * 10 + 2 * 64 * 256) / (66.9e12 / 5) * 1e6 * 132 / 16 }')
check "t3 (fc3's input gradient, 16x64 tiles) blocks waves roofline" \
    "$(row t3_mm_nn_relu_grad_sum_rows__epilogue__reduction | cut -d' ' -f1-3)" "16 1 $hand_t3"
check "t5_t6__siblings blocks waves total" "$pair" "$hand_pair"
check "t8_sgd_x6__optimizer blocks waves roofline total" "$(row t8_sgd_x6__optimizer)" "2094 8 $hand_sgd"
tail=$(part t2_mm_nt_bias_add_ce_loss_sum_all_ce_grad_sum_rows__epilogue__reduction__row_ops__row_tail)
"$cddpc" models/mnist.net --fusion=all,-row-tail --report --target h200 > "$t.off" || { echo "FAIL cddpc -row-tail"; exit 1; }
plain=$(awk '/^predicted train/ { on = 1 } on && $1 == "t2_mm_nt_bias_add__epilogue" { print $6 }' "$t.off")
grep -q '^  t3_ce_loss' "$t.off" && ! grep -q '^  t[0-9]*_ce_loss' "$t" && echo "PASS row-tail: no row kernel of its own" ||
    { echo "FAIL row-tail: the row kernel's node"; fail=1; }
rm -f "$t.off"
awk -v a="$tail" -v b="$plain" -v l2=$L2 'BEGIN { h = 5420 / l2 * 1e6 * 132 / 4 + 5824 / (66.9e12 / 5) * 1e6 * 132 / 4;
     d = a - b; exit !(a != "" && b != "" && d > h - 0.011 && d < h + 0.011) }' &&
    echo "PASS t2 row tail adds $tail - $plain us (hand 0.032)" || { echo "FAIL t2 row tail: $tail - $plain us, want 0.032 more"; fail=1; }
check "t0 (data prologue + fc1) blocks waves roofline total" "$(row t0_images_labels_mm_nt_bias_add_relu__data__epilogue__data_prologue)" "112 1 $hand_mm"
grep -q '^  t[0-9]*_images_labels__data ' "$t" && { echo "FAIL a data kernel of its own is still predicted"; fail=1; }
check "runtime_step_turn blocks waves roofline total" "$(row runtime_step_turn)" "1 1 $hand_zb"
grep -q '^    (no node: in the last block of t8_sgd_x6__optimizer)' "$t" && echo "PASS step_turn in the optimizer" ||
    { echo "FAIL step_turn's work not in the optimizer's last block"; fail=1; }
grep -q memset "$t" && { echo "FAIL a memset node is still predicted"; fail=1; }
grep -q "^  GEMMs: FMA rate bound by shared-memory loads to 50% of peak at 4 x 4 outputs per thread, 33% of peak at 2 x 4 outputs per thread, 20% of peak at 1 x 4 outputs per thread$" "$t" &&
    echo "PASS GEMM efficiency stated" || { echo "FAIL GEMM efficiency line missing"; fail=1; }
# a pair's parts (overhead 0) are in their pair's row
sum=$(awk '/^predicted train/ { on = 1 } on && ($1 ~ /^t[0-9]+_/ && $7 != "0.00" || $1 ~ /^runtime_/) { s += $8 }
           on && $1 == "=" { s += $9 } END { printf "%.1f", s + 5 / 16 }' "$t")
step=$(sed -n 's/^  step \([0-9.]*\) us.*/\1/p' "$t")
check "step = kernels + sibling pairs + runtime turn + 1/16 graph launch" "$step" "$sum"
# under each GEMM's row its tile options on the target, the emitted one
# starred: the fastest (on the H200, this target), the row's tile, and
# (but for the row tail's own time) the row's roofline
awk '/^predicted train/ { on = 1 } !on { next }
     $1 ~ /^t[0-9]+_/ { name = $1; roof = $6 + 0; tile = $10; tail = name ~ /row_tail/; next }
     $1 == "(tiles:" { n++; line = $0; sub(/^ *\(tiles: */, "", line); sub(/\)$/, "", line)
         k = split(line, o, ", "); best = ""; min = 1e9
         for (j = 1; j <= k; j++) { split(o[j], w, " "); us = w[length(w) - 1] + 0; if (us < min) min = us
             if (o[j] ~ /^\*/) { best = us; bt = substr(w[1], 2) } }
         if (best == "" || best > min || bt != tile || (!tail && best != roof)) { print "bad options of " name ": " $0; bad = 1 } }
     END { if (n < 8) { print "only " n " tile option lines"; bad = 1 } exit bad }' "$t" &&
    echo "PASS each GEMM's options listed, the emitted tile the fastest" || { echo "FAIL tile options"; fail=1; }
# each GEMM's tile is the one the model predicts fastest for it, so the
# step with the choice is no slower than with any one tile for all
# (--gpu-tile), and 64x64 everywhere is the step before the choice existed
# no_slower WHAT STEP OPTION MODEL TARGET: the step the model's choices
# give (STEP us) is no slower than with OPTION forcing one choice for all
# (its report left in $t.one)
no_slower() {
    "$cddpc" "$4" $3 --report --target "$5" > "$t.one" || { echo "FAIL $3"; fail=1; return; }
    one=$(sed -n 's/^  step \([0-9.]*\) us.*/\1/p' "$t.one")
    awk -v a="$2" -v b="$one" 'BEGIN { exit !(a != "" && b != "" && a + 0 <= b + 0) }' &&
        echo "PASS the model's $1 ($2 us) <= $3 ($one us)" || { echo "FAIL the model's $1 ($2 us) vs $3 ($one us)"; fail=1; }
}
for tile in 64 32 16; do
    no_slower tiles "$step" "--gpu-tile $tile" models/mnist.net h200
    [ $tile = 64 ] && ! grep -q "32 x 64\|16 x 64\|2 x 4\|1 x 4" "$t.one" && grep -q "4 x 4" "$t.one" &&
        echo "PASS --gpu-tile 64: 4 x 4 outputs per thread only" || [ $tile != 64 ] ||
        { echo "FAIL --gpu-tile 64 left a thinner tile"; fail=1; }
done
rm -f "$t.one"
# 16-bit activations under precision bf16: t3's bytes (the report's KiB
# column), against fp32's
kib() { awk '/^plan train/ { on = 1 } /^plan eval/ { on = 0 } on && $1 ~ /^t3_mm_nn/ { print $4 }' "$1"; }
hand16=$(awk 'BEGIN { printf "%.3f", (2 * 64 * 10 + 4 * 10 * 256 + 2 * 64 * 256 + 2 * 64 * 256 + 4 * 256) / 1024 }')
hand32=$(awk 'BEGIN { printf "%.3f", 4 * (64 * 10 + 10 * 256 + 64 * 256 + 64 * 256 + 256) / 1024 }')
sed 's/^\( *\)optimizer /\1precision bf16\n&/' models/mnist.net > "$t.net"
"$cddpc" "$t.net" --report --target h200 -o "$t.bin" > "$t.bf16" || { echo "FAIL cddpc bf16"; fail=1; }
check "t3's KiB on the GPU, fp32" "$(kib "$t")" "$hand32"
check "t3's KiB on the GPU, bf16 (16-bit activations)" "$(kib "$t.bf16")" "$hand16"
check "16-bit activation buffers (train, bf16)" "$(sed -n 's/^  16-bit on the GPU (bf16): \([0-9]* of [0-9]*\) .*/\1/p' "$t.bf16" | head -1)" "6 of 8"
mma=$(awk 'BEGIN { p = 989.5 / 66.9 * 128; printf "GEMMs: tensor cores (m16n8k16 mma, 990 TFLOP/s dense), rate bound by shared-memory loads to %.0f%% of that peak in 64x64 tiles, %.0f%% of that peak in 16x64 tiles",
    100 * 4 * 2048 / 24 / p, 100 * 2048 / 12 / p }')
check "the mma rate per tile (bf16)" "$(sed -n 's/^  \(GEMMs: tensor cores.*\)/\1/p' "$t.bf16")" "$mma"
hand_t1b=$(awk -v sm=$SM 'BEGIN { rate = 989.5e12 * (2048 / 12) / (989.5 / 66.9 * 128)
    printf "%.2f", (2 * 64 * 256 * 512 + 2 * 64 * 256) / rate * 1e6 * 132 / 128 + 1 + 8 * 16 * 64 * 4 / sm * 1e6 }')
check "t1 (bf16: 16x64 mma tiles x 8 slices) blocks roofline tile" \
    "$(awk '/^predicted train/ { on = 1 } on && $1 == "t1_mm_nt_bias_add_relu__epilogue" { print $2, $6, $10, $11, $12 }' "$t.bf16")" \
    "128 $hand_t1b 16x64 k/8 mma"
rm -f "$t.net" "$t.bin" "$t.bf16"
"$cddpc" models/mnist_convnet.net --report --target h200 > "$t.conv" || { echo "FAIL cddpc convnet"; fail=1; }
hand_chan=$(awk -v l2=$L2 'BEGIN { printf "256 1 %.2f", (4 * 64 * 16 * 28 * 28 + 4 * 16) / l2 * 1e6 }')
check "t2_mean_chan_allreduce (16 blocks a channel) blocks waves roofline" \
    "$(awk '/^predicted train/ { on = 1 } on && $1 == "t2_mean_chan_allreduce__sum_in_place" { print $2, $4, $6 }' "$t.conv")" "$hand_chan"
check "the ConvNet's all-reduce kernels (6 before rule sum-in-place)" \
    "$(awk '/^predicted train/ { on = 1 } on && $1 ~ /^t[0-9]+_allreduce$/' "$t.conv" | wc -l)" 0
rm -f "$t.conv"
# the recurrences (gpu_rates.c's gpu_rnn_secs): models/lstm_rows.net on
# the H100 (1.98 GHz), 2 LSTM layers 128 wide over 28 steps, batch 64; a
# step of a block is its dot loop's rounds of 4 W_hh loads at 280 clocks
# an L2 round trip, or its SM's warps' instructions at 4 a clock, + 2
# barriers of 40 clocks:
#   - t1_recurrence (layer 1's forward) in 2 samples a block x 4 threads a
#     unit: 32 blocks of 512 threads, one an SM; a thread's share of a
#     unit's sums 128 / 4 = 32 terms, 8 rounds (2240 clocks); 32 x (4 W_hh
#     + 2 h loads + 8 FMAs) + 2 x 2 (log2 4) x 8 shuffles and adds + a
#     cell (40) = 520 instructions, 16 warps x 520 / 4 = 2080 clocks:
#     (2240 + 80) x 28 / 1.98 GHz = 32.81 us, bound by the steps; the
#     design of the kernel before this one (a sample a block, a thread a
#     unit): 32 rounds, 127.84 us;
#   - t9_recurrence_grad in 2 x 8: each unit's 512 terms (the gates'
#     gradients against W_hh's column) over 8 threads, 64 each, 16 rounds
#     (4480 clocks) against 32 warps x 372 / 4 = 2976: 64.48 us;
#   - at batch 1024 the blocks read W_hh (256 KB) each step: 8 samples a
#     block, in both kernels;
#   - each recurrence's designs listed, the emitted one starred, the
#     fastest, the row's time; the step no slower than with any one design
#     forced (--gpu-rnn).
"$cddpc" models/lstm_rows.net --report --target h100 > "$t.rnn" || { echo "FAIL cddpc lstm_rows"; fail=1; }
rrow() { awk -v k="$2" '/^predicted train/ { on = 1 } on && $1 == k { print $2, $3, $6, $9, $10, $11 }' "$1"; }
hand_r1=$(awk 'BEGIN { printf "32 512 %.2f steps rnn 2x4", (2240 + 80) * 28 / 1.98e9 * 1e6 }')
check "t1_recurrence blocks threads time bound design" "$(rrow "$t.rnn" t1_recurrence)" "$hand_r1"
hand_r11=$(awk 'BEGIN { printf "1x1 %.2f", (32 * 280 + 80) * 28 / 1.98e9 * 1e6 }')
check "t1_recurrence's 1x1 design" "$(awk '/^  t1_recurrence / { getline; print }' "$t.rnn" | grep -o ' 1x1 [0-9.]*' | cut -c2-)" "$hand_r11"
hand_r9=$(awk 'BEGIN { printf "32 1024 %.2f steps rnn 2x8", (16 * 280 + 80) * 28 / 1.98e9 * 1e6 }')
check "t9_recurrence_grad blocks threads time bound design" "$(rrow "$t.rnn" t9_recurrence_grad)" "$hand_r9"
awk '/^predicted train/ { on = 1 } !on { next }
     $1 ~ /^t[0-9]+_recurrence/ { name = $1; roof = $6 + 0; design = $11; next }
     $1 == "(designs," { n++; line = $0; sub(/^ *\(designs, rows x split: */, "", line); sub(/\)$/, "", line)
         k = split(line, o, ", "); best = ""; min = 1e9
         for (j = 1; j <= k; j++) { split(o[j], w, " "); us = w[2] + 0; if (us < min) min = us
             if (o[j] ~ /^\*/) { best = us; bd = substr(w[1], 2) } }
         if (best == "" || best > min || bd != design || best != roof) { print "bad designs of " name ": " $0; bad = 1 } }
     END { if (n != 4) { print n " design lines, want 4"; bad = 1 } exit bad }' "$t.rnn" &&
    echo "PASS each recurrence's designs listed, the emitted one the fastest" || { echo "FAIL recurrence designs"; fail=1; }
rstep=$(sed -n 's/^  step \([0-9.]*\) us.*/\1/p' "$t.rnn")
for d in 1x1 2x4 8x2; do
    no_slower designs "$rstep" "--gpu-rnn $d" models/lstm_rows.net h100
done
rm -f "$t.one"
sed 's/^\( *batch *\)64/\11024/' models/lstm_rows.net > "$t.net"
"$cddpc" "$t.net" --report --target h100 -o "$t.bin" > "$t.rnn" || { echo "FAIL cddpc lstm_rows at 1024"; fail=1; }
check "at batch 1024: t1 and t9's rows a block" \
    "$(rrow "$t.rnn" t1_recurrence | cut -d' ' -f6 | cut -dx -f1) $(rrow "$t.rnn" t9_recurrence_grad | cut -d' ' -f6 | cut -dx -f1)" "8 8"
rm -f "$t.rnn" "$t.net" "$t.bin"
"$cddpc" models/mnist.net --report --target v100 2> "$t" >/dev/null
grep -q "unknown target (cpu, gpu, h100, h200, a100, t4): v100" "$t" && echo "PASS unknown target" || { echo "FAIL unknown target: $(cat "$t")"; fail=1; }
exit $fail
