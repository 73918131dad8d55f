#!/bin/sh
# tests/runtime/input_elems.sh CDDPC DATA: a model whose input type does not
# fit the data's samples ([N, 785] against 28x28 images) compiles (the
# compiler does not know the data), and the program refuses the data when
# it loads it: exit status 1, one message naming the file and both shapes.
set -u
cddpc=$1 data=$2
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM
if ! "$cddpc" tests/runtime/input_elems.net -o "$tmp/prog" 2>"$tmp/cc.err"; then
    echo "FAIL: cddpc refused the model:"; cat "$tmp/cc.err"; exit 1
fi
"$tmp/prog" --data "$data" --epochs 1 --max-steps 1 --threads 1 >"$tmp/out" 2>"$tmp/err"
rc=$?
msg=$(cat "$tmp/err")
if [ $rc -ne 1 ]; then
    echo "FAIL: exit status $rc, expected 1: $msg"; exit 1
fi
for want in "$data/train-images-idx3-ubyte" "28x28 = 784 values" "expects 785 per sample"; do
    case $msg in
    *"$want"*) ;;
    *) echo "FAIL: the message does not say '$want': $msg"; exit 1 ;;
    esac
done
echo "PASS input-elems: $msg"
