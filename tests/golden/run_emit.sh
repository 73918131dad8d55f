#!/bin/sh
# tests/golden/run_emit.sh CDDPC: goldens of the emitted text. For each
# model below, `cddpc MODEL --emit c DIR --emit cuda DIR` must write
# exactly tests/golden/emit/NAME/{program.c,all.cu,launch.txt}. The CUDA
# source program.c embeds (cuda_src[], all.cu as a C string) is left out
# of the stored program.c: all.cu holds that text once.
# Refactors of the emitters keep these byte-identical; a change that is
# meant is regenerated with UPDATE=1 and explained in its commit.
set -u
cddpc=${1:-build/cddpc}
case $cddpc in /*) ;; *) cddpc=$(pwd)/$cddpc ;; esac
cd "$(dirname "$0")/../.." || exit 2
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM
models="mnist=models/mnist.net
mnist_convnet=models/mnist_convnet.net
dropout=tests/cuda/models/dropout.net
amp_bf16=tests/cuda/models/amp_bf16.net
amp_fp16=tests/cuda/models/amp_fp16.net
odd_adam=tests/cuda/models/odd_adam.net"
fail=0 pass=0
for m in $models; do
    name=${m%%=*} net=${m#*=}
    exp=tests/golden/emit/$name
    out=$tmp/$name
    mkdir -p "$out/c" "$out/cuda" "$out/got"
    if ! "$cddpc" "$net" --emit c "$out/c" --emit cuda "$out/cuda" >"$out/log" 2>&1; then
        echo "FAIL $name (cddpc exited non-zero)"; cat "$out/log"; fail=$((fail + 1)); continue
    fi
    awk '/^static const char cuda_src\[\] =$/ { print "static const char cuda_src[] = /* all.cu */"; skip = 1; next }
         skip && /^    ;$/ { skip = 0 } !skip' "$out/c/program.c" >"$out/got/program.c"
    cp "$out/cuda/all.cu" "$out/cuda/launch.txt" "$out/got/"
    if [ "${UPDATE:-0}" = 1 ]; then
        mkdir -p "$exp"
        cp "$out/got/program.c" "$out/got/all.cu" "$out/got/launch.txt" "$exp/"
        echo "UPDATED $exp"
        continue
    fi
    ok=1
    for f in program.c all.cu launch.txt; do
        if [ ! -f "$exp/$f" ]; then
            echo "FAIL $name: $exp/$f missing (UPDATE=1 writes it)"; ok=0
        elif ! cmp -s "$exp/$f" "$out/got/$f"; then
            echo "FAIL $name: $f differs from $exp/$f"
            diff -u "$exp/$f" "$out/got/$f" | head -40 | sed 's/^/    /'
            ok=0
        fi
    done
    if [ $ok = 1 ]; then echo "PASS $name"; pass=$((pass + 1)); else fail=$((fail + 1)); fi
done
echo "golden-emit: $pass passed, $fail failed"
[ $fail -eq 0 ]
