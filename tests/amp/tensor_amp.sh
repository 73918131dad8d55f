#!/bin/sh
# tests/amp/tensor_amp.sh CDDPC FP32_PROGRAM DATA: precision bf16 and fp16
# for the ops over tensors of any rank (masks, indices, products between
# activations; memplan.c: tensor_lowp). tests/torch/mask_net.net and
# attn_net.net, compiled with `precision bf16|fp16` added to their train
# blocks:
#   (a) the CUDA kernels against the C ones in the emulator, their values
#       rounded alike (--flips: the two sides round the same sums apart by
#       an ulp now and then; a 16-bit buffer's values must be exact in 16
#       bits); mask_net in bf16 (an argmax of fp16 values whose ulp flips
#       picks another element in a whole-plan run), attn_net in fp16,
#       tests/torch/pos_net.net (a loss over positions) in both,
#       conv1d_net (Conv1d, BatchNorm1d, the 1-d pools) in fp16 (in bf16
#       an ulp flip of the first convolution's output moves the batch
#       norm's statistics past the tolerance in a whole-plan run) and
#       updown_net (ConvTranspose2d, Upsample) in bf16, and seq2seq
#       (LSTMs and a GRU, kept in float, fed by 16-bit products) in both
#       (fp16 without its clipping, which fp16 refuses), its recurrences
#       in design 2x2 (--gpu-rnn: every design reads its 16-bit operands
#       alike; the designs the H100 model picks at batch 64 put 1024
#       threads in a block, five times the emulator's time, and
#       cuda-emu-seq2seq checks those in fp32);
#   (b) one epoch of mask_net at each precision reaches the fp32 program's
#       test accuracy within 1 point (tests/amp/accuracy_amp.py).
set -u
cddpc=$1 fp32=$2 data=$3
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fails=0
variant() { # NET SEED PREC OUT: the net with `precision PREC` after its seed line
    sed "s/^    seed \( *\)$2\$/    seed \1$2\n    precision $3/" "$1" >"$4"
    grep -q "precision $3" "$4" || { echo "FAIL: no seed $2 line in $1"; fails=$((fails + 1)); }
}
variant "$root/tests/torch/mask_net.net" 37 bf16 "$t/mask_bf16.net"
variant "$root/tests/torch/mask_net.net" 37 fp16 "$t/mask_fp16.net"
variant "$root/tests/torch/attn_net.net" 31 fp16 "$t/attn_fp16.net"
variant "$root/tests/torch/pos_net.net" 43 bf16 "$t/pos_bf16.net"
variant "$root/tests/torch/pos_net.net" 43 fp16 "$t/pos_fp16.net"
variant "$root/tests/torch/conv1d_net.net" 43 fp16 "$t/conv1d_fp16.net"
variant "$root/tests/torch/updown_net.net" 47 bf16 "$t/updown_bf16.net"
variant "$root/tests/torch/seq2seq.net" 41 bf16 "$t/seq2seq_bf16.net"
variant "$root/tests/torch/seq2seq.net" 41 fp16 "$t/seq2seq_fp16.net"
sed -i '/clip_grad_norm/d' "$t/seq2seq_fp16.net"
for spec in mask_bf16:0.001 attn_fp16:0.01 pos_bf16:0.001 pos_fp16:0.001 conv1d_fp16:0.001 updown_bf16:0.001 \
            seq2seq_bf16:0.001 seq2seq_fp16:0.001; do
    net=${spec%%:*}
    flags=
    case $net in seq2seq*) flags=--gpu-rnn=2x2 ;; esac
    out=$(KC_CDDPC_FLAGS=$flags "$root/tests/cuda/kernel_check.sh" "$cddpc" "$t/$net.net" --sizes 19:19:0,37:22:3 \
          --tol 4e-5 --flips "${spec#*:}" 2>&1)
    rc=$?
    echo "$out" | tail -n 1
    [ $rc -eq 0 ] || [ $rc -eq 77 ] || { echo "$out" | grep -m 5 MISMATCH; fails=$((fails + 1)); }
    [ $rc -eq 77 ] && skip=1
done
for p in bf16 fp16; do
    "$cddpc" "$t/mask_$p.net" -o "$t/mask_$p" >"$t/cc_$p.log" 2>&1 || { cat "$t/cc_$p.log"; fails=$((fails + 1)); }
done
/usr/bin/python3 "$here/accuracy_amp.py" "$fp32" "$t/mask_bf16" "$t/mask_fp16" "$data" || fails=$((fails + 1))
[ "${skip:-0}" = 1 ] && [ $fails -eq 0 ] && { echo "SKIP: the emulator could not run here"; exit 77; }
[ $fails -eq 0 ] && echo "tensor-amp: PASS" || echo "tensor-amp: $fails failed"
[ $fails -eq 0 ]
