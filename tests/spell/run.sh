#!/bin/sh
# tests/spell/run.sh CDDPC: a model in PyTorch's spellings (nn., F., torch.,
# self., x.view, True, constant arithmetic) must compile to exactly what
# the same model in the plain spellings with literal numbers does: the IR
# after autodiff and the emitted C (less the source file's name), which
# holds the folded hyperparameters (lr, momentum, batch, padding).
set -u
cddpc=${1:-build/cddpc}
dir=$(dirname "$0")
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM
fail=0
for pair in lenet; do
    for f in pytorch plain; do
        mkdir -p "$tmp/$f"
        "$cddpc" "$dir/${pair}_$f.net" -d autodiff >"$tmp/$f.ir" 2>&1 || { echo "FAIL $pair: ${pair}_$f.net"; cat "$tmp/$f.ir"; fail=1; }
        "$cddpc" "$dir/${pair}_$f.net" --emit c "$tmp/$f" -o "$tmp/$f.bin" >/dev/null 2>&1 || fail=1
        grep -v '\.source = ' "$tmp/$f/program.c" >"$tmp/$f.c"
    done
    if diff -u "$tmp/plain.ir" "$tmp/pytorch.ir" && diff -u "$tmp/plain.c" "$tmp/pytorch.c" >/dev/null; then
        echo "PASS $pair"
    else
        diff -u "$tmp/plain.c" "$tmp/pytorch.c" | head -20
        echo "FAIL $pair: the PyTorch spellings compile differently"; fail=1
    fi
done
exit $fail
