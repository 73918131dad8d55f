#!/bin/sh
# tests/ir/fusion_bits.sh CDDPC DATA [NET...]: fusing the batch-norm channel
# results into their pass (fuse.c: chan_pass_result), a convolution's
# bias into its store (conv_bias_epilogue) and a pooling with the chain
# before it and its gradient with the chain after it (rule pool-chain,
# which must fire for the ConvNet and tests/ir/pool_chain.net: max and
# average pools), the row ops after the GEMM of their logits (rule
# row-tail) and the batch's gather in the first GEMM (rule data-prologue;
# both must fire for SimpleNet and for a loss with class weights and label
# smoothing over 37 classes), and rule tensor-chain (which must fire for
# tests/torch/attn_net.net: pointwise ops over tensors of any rank joined
# in one pass) change no bit. The
# ConvNet with plain and with synced batch norm, a conv model in fp16 (the
# fused bias rounded as bias_add's own kernel rounds it), pool_chain.net,
# SimpleNet and loss_weight.net, compiled at
# --fusion=elementwise (each channel result its own kernel) and at the
# default level, trains 10 steps on the CPU: saved weights and buffers, and
# the step losses, must be byte-identical, and the default level must have
# fewer kernels.
set -u
cddpc=$1 data=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fails=0
# 10 steps of batch 64 and an evaluation: a cut of the data set is enough,
# and loading and evaluating the whole of it was a third of this test
/usr/bin/python3 "$root/tests/runtime/small_idx.py" "$data" "$t/data" 1024 256 >/dev/null ||
    { echo "FAIL: cannot cut the data set"; exit 1; }
data=$t/data
# the nets: the arguments after DATA, or the check tier's six (attn_net.net
# runs in the test tier: fusion-bits-tensor)
shift 2
nets=${*:-"$root/tests/golden/mnist_convnet.net $root/tests/ddp/syncbn.net $root/tests/cuda/models/amp_fp16.net
      $root/tests/ir/pool_chain.net $root/models/mnist.net $root/tests/cuda/models/loss_weight.net"}
for net in $nets; do
    name=$(basename "$net" .net)
    for lvl in elementwise all; do
        "$cddpc" "$net" --fusion=$lvl -o "$t/$lvl" || { echo "FAIL $name: cddpc --fusion=$lvl"; exit 1; }
        "$t/$lvl" --data "$data" --threads 1 --epochs 1 --max-steps 10 --save "$t/$lvl.st" \
            --step-log "$t/$lvl.csv" >"$t/$lvl.out" 2>&1 || { echo "FAIL $name: run at $lvl"; cat "$t/$lvl.out"; exit 1; }
        "$cddpc" "$net" --fusion=$lvl -d fuse | sed -n 's/^plan train: \([0-9]*\) kernels/\1/p' >"$t/$lvl.k"
    done
    ke=$(cat "$t/elementwise.k") ka=$(cat "$t/all.k")
    case $name in
    mnist_convnet|pool_chain)
        pc=$("$cddpc" "$net" --report | grep -c '__pool_chain ')
        if [ "$pc" -lt 4 ]; then
            echo "FAIL $name: $pc kernels of rule pool-chain (want the forward and backward of both pools)"
            fails=$((fails + 1))
        fi ;;
    attn_net)
        k=$("$cddpc" "$net" --report | grep -c '__tensor_chain ')
        if [ "$k" -lt 4 ]; then
            echo "FAIL $name: $k kernels of rule tensor-chain (want 4 or more: exp after a subtract, maximum after a sqrt, ...)"
            fails=$((fails + 1))
        fi ;;
    mnist|loss_weight)
        for rule in row_tail data_prologue; do
            k=$("$cddpc" "$net" --report | grep -c "__$rule ")
            if [ "$k" -lt 2 ]; then
                echo "FAIL $name: $k kernels of rule $rule (want the train and the eval plan's)"
                fails=$((fails + 1))
            fi
        done ;;
    esac
    if cmp -s "$t/elementwise.st" "$t/all.st" && cmp -s "$t/elementwise.csv" "$t/all.csv" && [ "$ka" -lt "$ke" ]; then
        echo "PASS $name: $ke -> $ka train kernels, weights, buffers and 10 step losses byte-identical"
    else
        echo "FAIL $name: $ke -> $ka kernels; weights $(cmp -s "$t/elementwise.st" "$t/all.st" && echo equal || echo differ)"
        fails=$((fails + 1))
    fi
done
[ "$fails" -eq 0 ]
