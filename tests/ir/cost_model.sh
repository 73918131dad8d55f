#!/bin/sh
# tests/ir/cost_model.sh CDDPC: the byte model of `cddpc --report`
# (compiler/cost.c) against counts made here by hand from the layer sizes:
# what each kernel must read and write at least once.
#   - optimizers: SGD reads p, g and writes p (3 x 4 bytes a parameter),
#     momentum also reads and writes its buffer (5 x), Adam and AdamW read
#     and write exp_avg and exp_avg_sq (7 x);
#   - the Linear layer's GEMM with its bias epilogue: x, W, b read, the
#     logits written; on the CPU (default target) the GEMM stores the
#     product and the epilogue pass reads it back (2 x the product more);
#     on a GPU (--target gpu) the epilogue is in registers; with rule
#     row-tail the kernel also runs the loss's row ops (their own reads
#     and writes, not the logits read back);
#   - the batch-norm statistics' passes: mean_chan reads x and writes the
#     channel means; bn_sqdev's pass reads x and those means again, and
#     (rule channel-pass) writes the mean and variance, reads and writes
#     the running mean and variance, and num_batches_tracked; the squared
#     deviations' mean stays in the kernel.
set -u
cddpc=$1
dir=tests/ir/cost
fail=0
N=64                                        # the models' train batch
P=$((4 * 1 * 3 * 3 + 4 + 4 + 4 + 3136 * 10 + 10))   # conv w, b; bn w, b; fc w, b

# check LABEL GOT_KIB WANT_BYTES: equal within a byte (the report prints KiB to 3 places)
check() {
    if awk -v g="$2" -v w="$3" 'BEGIN { d = g * 1024 - w; exit !(d < 1.1 && d > -1.1) }'; then
        echo "ok   $1: $2 KiB = $3 bytes"
    else
        echo "FAIL $1: report says $2 KiB ($(awk -v g="$2" 'BEGIN { printf "%.0f", g * 1024 }') bytes), hand count $3 bytes"
        fail=1
    fi
}

tmp=${TMPDIR:-/tmp}/cost_model.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT

for opt in sgd:3 momentum:5 adam:7 adamw:7; do
    name=${opt%:*} times=${opt#*:}
    "$cddpc" "$dir/convbn_$name.net" --report > "$tmp/$name.txt" || { echo "FAIL cddpc --report $name"; fail=1; continue; }
    kib=$(awk '/^plan eval/ { exit } $1 ~ /^t[0-9]+_(sgd|sgd_momentum|adam|adamw)_x/ { print $4 }' "$tmp/$name.txt")
    check "optimizer $name ($times x the parameter bytes)" "${kib:-missing}" $((times * 4 * P))
done

# GEMM + bias epilogue: x [N, 3136], W [10, 3136], b [10] read; logits [N, 10]
# written; then its row tail (rule row-tail): the labels read (int32), the
# logits' gradient [N, 10], the bias gradient [10] and the loss sum (one
# float) written; the tail reads the logits back inside the kernel
gemm=$((4 * (N * 3136 + 10 * 3136 + 10 + N * 10)))
tail=$((4 * N + 4 * N * 10 + 4 * 10 + 4))
kib=$(awk '/^plan eval/ { exit } $1 ~ /^t[0-9]+_mm_nt_bias_add_ce_loss_.*__row_tail$/ { print $4 }' "$tmp/sgd.txt")
check "GEMM + bias epilogue + row tail, cpu (product stored and read back)" "${kib:-missing}" $((gemm + 2 * 4 * N * 10 + tail))
"$cddpc" "$dir/convbn_sgd.net" --report --target gpu > "$tmp/gpu.txt"
kib=$(awk '/^plan eval/ { exit } $1 ~ /^t[0-9]+_mm_nt_bias_add_ce_loss_.*__row_tail$/ { print $4 }' "$tmp/gpu.txt")
check "GEMM + bias epilogue + row tail, gpu (epilogue in registers)" "${kib:-missing}" $((gemm + tail))
"$cddpc" "$dir/convbn_sgd.net" --report --fusion=all,-row-tail > "$tmp/plain.txt"
kib=$(awk '/^plan eval/ { exit } $1 ~ /^t[0-9]+_mm_nt_bias_add__epilogue$/ { print $4 }' "$tmp/plain.txt")
check "GEMM + bias epilogue without the tail, cpu" "${kib:-missing}" $((gemm + 2 * 4 * N * 10))

# batch-norm statistics: x [N, 4, 28, 28] read by both passes; the means
# [4] written, then read; [2, 4] stats written; running mean and var [4]
# read and written; num_batches_tracked read and written
x=$((4 * N * 4 * 28 * 28))
kib=$(awk '/^plan eval/ { exit } $1 ~ /^t[0-9]+_mean_chan$/ { print $4; exit }' "$tmp/sgd.txt")
check "batch-norm first pass (channel means)" "${kib:-missing}" $((x + 4 * 4))
kib=$(awk '/^plan eval/ { exit } $1 ~ /^t[0-9]+_bn_sqdev_bn_stats_bn_running__channel_pass$/ { print $4 }' "$tmp/sgd.txt")
check "batch-norm second pass with the statistics and the running update" "${kib:-missing}" \
    $((x + 4 * 4 + 4 * 2 * 4 + 2 * 4 * 2 * 4 + 2 * 4))

# SimpleNet's SGD kernel: 3 x its parameters (784*512+512 + 512*256+256 + 256*10+10)
"$cddpc" models/mnist.net --report > "$tmp/mnist.txt"
kib=$(awk '/^plan eval/ { exit } $1 ~ /_sgd_x6__optimizer$/ { print $4 }' "$tmp/mnist.txt")
check "SimpleNet SGD" "${kib:-missing}" $((3 * 4 * (784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10)))

# units: the column says KiB, not KB
grep -q ' KiB ' "$tmp/mnist.txt" && ! grep -q ' KB ' "$tmp/mnist.txt" || { echo "FAIL report units"; fail=1; }
exit $fail
