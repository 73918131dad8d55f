#!/bin/sh
# tests/torch/gpt_loss_block.sh CDDPC KJV: the GPT of tests/torch/gpt_net.net
# with its loss written as nanoGPT's forward writes it, in a loss block:
#     loss(logits, y) {
#         B, T, C = logits.size()
#         return F.cross_entropy(logits.view(-1, C), y.view(-1))
#     }
# (y the [N, T] targets, viewed as rows), then tests/torch/gpt_equiv.py's
# check against PyTorch: 100 steps, losses and weights within 1e-4, its
# controls (attention not causal, a mask one key too wide) rejected.
set -eu
if [ $# -ne 2 ]; then
    echo "usage: $0 CDDPC KJV" >&2
    exit 2
fi
cddpc=$1 kjv=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
line='    loss      cross_entropy(reduction = mean)'
grep -qx "$line" tests/torch/gpt_net.net || { echo "gpt_loss_block: FAIL: tests/torch/gpt_net.net has no line '$line'"; exit 1; }
awk -v line="$line" '$0 == line {
        print "    loss(logits, y) {"
        print "        B, T, C = logits.size()"
        print "        return F.cross_entropy(logits.view(-1, C), y.view(-1))"
        print "    }"
        next
    } { print }' tests/torch/gpt_net.net >"$tmp/gpt_lb.net"
"$cddpc" "$tmp/gpt_lb.net" -o "$tmp/gpt_lb"
"${PY:-/usr/bin/python3}" tests/torch/gpt_equiv.py "$tmp/gpt_lb" "$kjv" gpt
