#!/bin/sh
# tests/fuzz/large_input.sh CDDPC: model files far larger than the fuzzer's
# 4 KB inputs, generated here. Before the fixes, a 300000-term sum of
# constants crashed (SIGSEGV: sema's recursion overflowed the stack), one of
# tensors ran for minutes, and 8000 statements `x = x + x` took 12.6 s and
# 3.4 GB (fusion gave every kernel room for the whole graph; now 0.8 s,
# 160 MB). Each must end in time and within 1 GB, with exit status 1 and
# the depth diagnostic for the sums, 0 for the long forward.
set -u
if [ $# -ne 1 ] || [ ! -x "$1" ]; then
    echo "usage: $0 CDDPC" >&2
    exit 2
fi
cddpc=$1
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM
fail=0

# model NAME LINEAR_IN FORWARD_BODY: a model file on stdout
model() {
    printf 'model M {\n    fc = Linear(%s, 10)\n    forward(x: f32[N, 784]) {\n' "$1"
    cat
    printf '        return fc(x)\n    }\n}\ntrain { model M data mnist("d") loss cross_entropy() optimizer sgd(lr = 0.1) }\n'
}

# The 1 GB bound: ulimit -v, except for an ASan build, which reserves
# terabytes of address space for its shadow memory and so cannot start under
# any such limit; ASan's own RSS watchdog bounds it instead, at 3 GB since
# its redzones and shadow pages roughly triple what the compiler touches.
if grep -q __asan_init "$cddpc"; then
    limit="ASan's RSS limit of 3 GB"
    limit_run() {
        ASAN_OPTIONS="${ASAN_OPTIONS:-}:hard_rss_limit_mb=3072" "$@"
    }
else
    limit="1 GB"
    limit_run() {
        (ulimit -v 1048576; "$@")
    }
fi

# run NAME EXPECTED_STATUS: compiles $tmp/NAME.net (C emitted, no C compiler run)
run() {
    limit_run timeout 60 "$cddpc" "$tmp/$1.net" --emit c "$tmp/$1.out" >/dev/null 2>"$tmp/$1.err"
    rc=$?
    if [ $rc -ne "$2" ]; then
        echo "FAIL $1: exit status $rc, expected $2"
        head -c 400 "$tmp/$1.err"
        fail=1
        return 1
    fi
    return 0
}

awk 'BEGIN { printf "1"; for (i = 1; i < 300000; i++) printf " + 1"; }' >"$tmp/n"
: | model "$(cat "$tmp/n")" >"$tmp/const_sum.net"
awk 'BEGIN { printf "        x = x"; for (i = 1; i < 300000; i++) printf " + x"; print "" }' |
    model 784 >"$tmp/tensor_sum.net"
for t in const_sum tensor_sum; do
    if run $t 1; then
        if grep -q "expression nested too deeply (more than 1000" "$tmp/$t.err"; then
            echo "PASS $t: refused at depth 1000"
        else
            echo "FAIL $t: not the depth diagnostic:"; head -c 400 "$tmp/$t.err"; fail=1
        fi
    fi
done

awk 'BEGIN { for (i = 0; i < 8000; i++) print "        x = x + x" }' | model 784 >"$tmp/long_forward.net"
if run long_forward 0; then
    if [ -s "$tmp/long_forward.out/program.c" ]; then
        echo "PASS long_forward: 8000 statements compiled within 60 s and $limit"
    else
        echo "FAIL long_forward: no program.c"; fail=1
    fi
fi
# 10 MB of `x = relu(x)` (500,000 statements), compiled with the C
# compiler: before the bound, still in cc -O3 after 5 minutes (the
# generated C grows 15 MB per 50,000 statements); now refused at the op
# limit (compiler/forward.c FWD_MAX_NODES) in about a second
awk 'BEGIN { for (i = 0; i < 500000; i++) print "        x = relu(x)" }' | model 784 >"$tmp/relu_10mb.net"
start=$(date +%s)
limit_run timeout 60 "$cddpc" "$tmp/relu_10mb.net" -o "$tmp/relu_10mb" >/dev/null 2>"$tmp/relu_10mb.err"
rc=$?
secs=$(( $(date +%s) - start ))
if [ $rc -eq 1 ] && [ ! -e "$tmp/relu_10mb" ] &&
   grep -q "relu_10mb.net:20001:9: error: the model's graph reaches 20001 operations at this statement, over the limit of 20000" "$tmp/relu_10mb.err"; then
    echo "PASS relu_10mb: $(wc -c <"$tmp/relu_10mb.net") bytes refused in ${secs} s at the op limit"
else
    echo "FAIL relu_10mb: exit status $rc after ${secs} s:"; head -c 400 "$tmp/relu_10mb.err"; fail=1
fi
exit $fail
