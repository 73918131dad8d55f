#!/bin/sh
# tests/ir/fusion_rules.sh CDDPC DATA: a fusion rule switched off
# (--no-fuse RULE) changes the kernels and no number. SimpleNet without the
# matmul epilogue, the row reductions and the row-op pass, the ConvNet
# without the batch-norm channel pass, SyncBatchNorm's net without its sums
# over the ranks in place (one rank): each trains 10 steps on the CPU
# next to the default build; saved weights and buffers and the step
# losses must be byte-identical, the rule-less build must have more train
# kernels, and no kernel of it may say --report built it with that rule.
# (Which kernels, exactly: the goldens tests/golden/X~RULE.fused.)
set -u
cddpc=$1 data=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fails=0
run() {  # NET FLAGS NAME: compile, train 10 steps, count kernels
    "$cddpc" "$1" $2 -o "$t/$3" || { echo "FAIL cddpc $1 $2"; exit 1; }
    "$t/$3" --data "$data" --threads 1 --epochs 1 --max-steps 10 --save "$t/$3.st" --step-log "$t/$3.csv" \
        >"$t/$3.out" 2>&1 || { echo "FAIL run $3"; cat "$t/$3.out"; exit 1; }
    "$cddpc" "$1" $2 --report > "$t/$3.report"
    sed -n 's/^plan train .*: \([0-9]*\) kernels$/\1/p' "$t/$3.report" > "$t/$3.k"
}
for case in golden/mnist:epilogue golden/mnist:reduction golden/mnist:row-ops golden/mnist_convnet:channel-pass \
    ddp/syncbn:sum-in-place; do
    net=$root/tests/${case%:*}.net rule=${case#*:}
    case=${case#*/}
    [ -e "$t/${case%:*}.k" ] || run "$net" "" "${case%:*}"
    run "$net" "--no-fuse $rule" off
    k0=$(cat "$t/${case%:*}.k") k1=$(cat "$t/off.k")
    if ! cmp -s "$t/${case%:*}.st" "$t/off.st" || ! cmp -s "$t/${case%:*}.csv" "$t/off.csv"; then
        echo "FAIL ${case%:*} --no-fuse $rule: weights or losses differ"; fails=$((fails + 1))
    elif [ "$k1" -le "$k0" ]; then
        echo "FAIL ${case%:*} --no-fuse $rule: $k0 -> $k1 kernels"; fails=$((fails + 1))
    elif grep -Eq "<- (.*, )?$rule(,|\$)" "$t/off.report"; then
        echo "FAIL ${case%:*} --no-fuse $rule: --report still names the rule"; fails=$((fails + 1))
    elif ! grep -Eq "<- (.*, )?$rule(,|\$)" "$t/${case%:*}.report"; then
        echo "FAIL ${case%:*}: --report names no kernel built by $rule"; fails=$((fails + 1))
    else
        echo "PASS ${case%:*} --no-fuse $rule: $k0 -> $k1 train kernels, weights, buffers and 10 step losses byte-identical"
    fi
done
# an unknown rule names the known ones
"$cddpc" "$root/tests/golden/mnist.net" --fusion=all,-epilog 2> "$t/err"
if [ $? -eq 2 ] && grep -q "unknown fusion level or rule '-epilog'.*epilogue, ew-chain, reduction" "$t/err"; then
    echo "PASS unknown rule lists the rules"
else
    echo "FAIL unknown rule: $(cat "$t/err")"; fails=$((fails + 1))
fi
[ "$fails" -eq 0 ]
