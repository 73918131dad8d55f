#!/bin/sh
# tests/ir/vector_select.sh CDDPC: no emitted C kernel loads memory
# inside one arm of a ?: select. GCC 12 at -O3 with AVX turns such
# a load into a masked load and, in an unrolled [R, 16] loop, pairs two
# vectors' loads with one vector's mask (tests/ir/vector_select.c; it cost
# the batch-norm backward of tests/ddp/syncbn.net at --fusion=elementwise
# half its gradient on an AVX machine). The emitters load each operand
# first and select after (emit_expr.c: named_load; emit_tensor.c: pad and
# cat). The CUDA kernels' guarded tile loads are left alone: NVRTC compiles
# them, not GCC. Checked over every model of the test suite at each fusion level;
# then, for the record, whether this machine's C compiler has the fault.
set -u
cddpc=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fails=0 checked=0
# a select arm that begins with a buffer load: "? b12[" or ": (b12["
pat='[?:] *\(*b[0-9][0-9]*\['
for net in "$root"/models/*.net "$root"/tests/torch/*.net "$root"/tests/ddp/*.net "$root"/tests/ir/*.net \
           "$root"/tests/cuda/models/*.net "$root"/tests/golden/mnist_convnet.net; do
    for lvl in none elementwise all; do
        rm -rf "$t/c"
        mkdir "$t/c"
        "$cddpc" "$net" --fusion=$lvl --emit c "$t/c" >/dev/null 2>&1 || continue
        checked=$((checked + 1))
        # program.c also holds the CUDA text as string literals ('"' lines)
        hits=$(grep -v '^ *"' "$t/c/program.c" | grep -E "$pat" | head -3)
        if [ -n "$hits" ]; then
            echo "FAIL $(basename "$net") --fusion=$lvl: a select arm loads memory:"
            echo "$hits"
            fails=$((fails + 1))
        fi
    done
done
[ "$checked" -ge 60 ] || { echo "FAIL: only $checked model and level pairs compiled (want 60 or more)"; exit 1; }
[ "$fails" -eq 0 ] && echo "PASS: $checked model and fusion level pairs, no select arm loads memory"
cc=${CDDPC_CC:-cc}
if "$cc" -std=c11 -O3 -march=native -w "$root/tests/ir/vector_select.c" -o "$t/vs" 2>/dev/null; then
    bad=$("$t/vs")
    echo "note: $cc -O3 -march=native mis-vectorizes the pattern here: $bad of 256 results wrong"
fi
[ "$fails" -eq 0 ]
