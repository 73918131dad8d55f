#!/bin/sh
# tests/runtime/bench_kernel.sh CDDPC MNIST_PROGRAM DATA: ./PROGRAM --bench-kernel
# (runtime/rt_bench.c). `all` times every train kernel that --report lists,
# in its order, each 3..50 calls with 0 < min <= median <= max; the GEMM of
# fc1 (51 MFLOP, with the batch's gather) takes over 10 x fc3's kernel (a 0.3 MFLOP GEMM and the
# loss's row ops, rule row-tail), so each
# kernel really ran its own work; one name times that kernel only; an
# unknown name exits 2 listing the kernels.
set -u
cddpc=$1 prog=$2 data=$3
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail=0
"$cddpc" models/mnist.net --report | awk '/^plan eval/ { exit } $1 ~ /^t[0-9]+_/ { print $1 }' > "$t/want"
"$prog" --bench-kernel all --data "$data" --threads 1 > "$t/all" 2>&1 || { echo "FAIL --bench-kernel all: $(cat "$t/all")"; exit 1; }
awk '$1 ~ /^t[0-9]+_/ { print $1 }' "$t/all" > "$t/got"
if cmp -s "$t/want" "$t/got"; then echo "PASS all: the $(wc -l < "$t/want") train kernels of --report"; else
    echo "FAIL all: kernels differ from --report's"; diff "$t/want" "$t/got"; fail=1; fi
if awk '$1 ~ /^t[0-9]+_/ { if (!($2 >= 3 && $2 <= 50 && $4 > 0 && $4 <= $3 && $3 <= $5)) bad = 1 }
        $1 ~ /^t0_images_labels_mm_nt/ { a = $3 } $1 ~ /^t2_mm_nt_bias_add_ce_loss/ { b = $3 }
        END { exit bad || !(a > 10 * b) }' "$t/all"; then
    echo "PASS all: calls, min <= median <= max, fc1's GEMM > 10 x fc3's kernel"
else
    echo "FAIL all: bad rows"; cat "$t/all"; fail=1
fi
"$prog" --bench-kernel t4_mm_tn --data "$data" --threads 1 > "$t/one" 2>&1
n=$(grep -c '^  t[0-9]' "$t/one")
[ "$n" = 1 ] && grep -q '^  t4_mm_tn ' "$t/one" && echo "PASS one kernel" || { echo "FAIL one kernel: $(cat "$t/one")"; fail=1; }
"$prog" --bench-kernel t4_mm_nt --data "$data" > "$t/bad" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "no train kernel 't4_mm_nt'; this program's are: t0_images_labels_mm_nt_bias_add_relu__data__epilogue__data_prologue .* t8_sgd_x6__optimizer (or all)" "$t/bad" \
    && echo "PASS unknown kernel" || { echo "FAIL unknown kernel (status $rc): $(cat "$t/bad")"; fail=1; }
exit $fail
