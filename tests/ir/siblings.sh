#!/bin/sh
# tests/ir/siblings.sh CDDPC: which GEMM kernels rule siblings pairs into one
# GPU launch (compiler/sched_pair.c), read from --emit cuda's launch.txt and
# the program's launch table:
#   - SimpleNet: fc3's and fc2's backward GEMMs (dx and dW of one layer, the
#     same dy), t5+t6 and t7+t8; not t8+t9 (no shared operand) and nothing
#     in the eval plan (each forward GEMM reads the one before);
#   - the ConvNet's linear layers likewise; its convolutions are not GEMM
#     kernels;
#   - --fusion=all,-siblings and --no-fuse siblings: no pair, and the
#     kernels are those of the default build;
#   - every pair's parts are adjacent kernels of the table, the first names
#     the pair, and the pair kernel is in the CUDA source.
set -u
cddpc=$1
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail=0
check() {
    if [ "$2" = "$3" ]; then echo "PASS $1: $2"; else echo "FAIL $1: got '$2', want '$3'"; fail=1; fi
}
pairs() { awk '$1 == "pair" { printf "%s%s", sep, $2; sep = " " }' "$1/launch.txt"; }
kernels() { awk '$1 != "pair" { print $2 }' "$1/launch.txt"; }

"$cddpc" models/mnist.net --emit cuda "$t/m" >/dev/null || { echo "FAIL cddpc mnist"; exit 1; }
check "SimpleNet pairs" "$(pairs "$t/m")" "t3_t4__siblings t5_t6__siblings"
"$cddpc" models/mnist_convnet.net --emit cuda "$t/c" >/dev/null || { echo "FAIL cddpc convnet"; exit 1; }
echo "ConvNet pairs: $(pairs "$t/c")"
for k in $(pairs "$t/c"); do
    case $k in t*_t*__siblings) ;; *) echo "FAIL ConvNet: $k is not a train pair"; fail=1 ;; esac
done
for flag in --fusion=all,-siblings "--no-fuse siblings"; do
    # shellcheck disable=SC2086
    "$cddpc" models/mnist.net $flag --emit cuda "$t/n" >/dev/null || { echo "FAIL cddpc $flag"; exit 1; }
    check "$flag: pairs" "$(pairs "$t/n")" ""
    kernels "$t/m" > "$t/km"; kernels "$t/n" > "$t/kn"
    cmp -s "$t/km" "$t/kn" && echo "PASS $flag: the same kernels" || { echo "FAIL $flag: other kernels"; fail=1; }
done
# a pair's line (tA_tB__siblings) follows its first part's (tA_...), the
# next kernel is tB_..., and B = A + 1
for d in m c; do
    awk '$1 == "pair" { n = split($2, a, "_"); want_prev = a[1]; want_next = a[2]
                        if (prev != want_prev || substr(a[2], 2) != substr(a[1], 2) + 1) bad = bad " " $2; next }
         { split($2, b, "_"); if (want_next != "" && b[1] != want_next) bad = bad " " want_next; want_next = ""; prev = b[1] }
         END { if (bad) { print "FAIL misplaced pairs:" bad; exit 1 } }' \
        "$t/$d/launch.txt" && echo "PASS $d: each pair between its two parts" || fail=1
    for k in $(pairs "$t/$d"); do
        grep -q "void __launch_bounds__(256, 2) $k(const rt_exec" "$t/$d/all.cu" && [ -s "$t/$d/$k.cu" ] ||
            { echo "FAIL $d: $k missing from all.cu or its own file"; fail=1; }
    done
done
exit $fail
