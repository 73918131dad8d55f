#!/bin/sh
# tests/cuda/kernel_check.sh: the CUDA kernels cddpc emits for MODEL, run on
# the CPU through tests/cuda/emu.h, checked kernel by kernel (and over one
# whole plan) against the C kernels of the same compilation, by the
# checker's core (kc_core.c) through its emulator backend (kc_emu.c).
#
# Usage: tests/cuda/kernel_check.sh CDDPC MODEL.net [kernel_check options]
#   options: --sizes NMAX:N[:STEP],...  --tol X  --limit X  --flips F  --orders 1|2  --plan P  --seed N  -v
# Builds under build/tests/cuda/kc_MODEL/ (libcddprt.a is taken from beside
# CDDPC). CC, CXX and CDDPC_CFLAGS (e.g. sanitizer flags) are honoured.
# KC_CDDPC_FLAGS adds cddpc options (e.g. --fusion=none) to both emissions.
# KC_MUTATE='sed script' edits all.cu before it is compiled: mutants.sh
# uses it to show that broken kernels are caught, KC_BASE=dir to build the
# unmutated half once per model and flags.
# Skips (exit 77) only when the CUDA toolkit is absent.
set -eu
. "$(dirname "$0")/toolkit.sh"
if [ $# -lt 2 ]; then
    echo "usage: $0 CDDPC MODEL.net [kernel_check options]" >&2
    exit 2
fi
CDDPC=$1 MODEL=$2
shift 2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/tests/cuda
CC=${CC:-cc}
CXX=${CXX:-g++}
XFLAGS=${CDDPC_CFLAGS:-}
LIB=$(dirname "$CDDPC")/libcddprt.a
[ -f "$LIB" ] || { echo "FAIL: $LIB not found (make first)"; exit 1; }
NAME=$(basename "$MODEL" .net)
W=${KC_WORKDIR:-$ROOT/build/tests/cuda/kc_$NAME${KC_CDDPC_FLAGS:+$(echo "$KC_CDDPC_FLAGS" | tr -c 'A-Za-z0-9\n' _)}}
rm -rf "$W"
mkdir -p "$W"

# KC_BASE (mutants.sh): the emissions and the C kernels' object, which do
# not depend on a mutation, kept there per model text and flags and reused
KEY=
if [ -n "${KC_BASE:-}" ]; then
    KEY=$KC_BASE/$( { cat "$MODEL"; echo "${KC_CDDPC_FLAGS:-} $XFLAGS $CC"; } | cksum | tr ' ' _)
fi
if [ -n "$KEY" ] && [ -f "$KEY/kc_program.o" ]; then
    cp -R "$KEY/c" "$KEY/cu" "$KEY/kc_program.o" "$W/"
else
    # KC_CDDPC_FLAGS: extra cddpc options for both emissions (--fusion=none)
    "$CDDPC" "$MODEL" ${KC_CDDPC_FLAGS:-} --emit c "$W/c"
    "$CDDPC" "$MODEL" ${KC_CDDPC_FLAGS:-} --emit cuda "$W/cu"
fi
for f in "$W/c/program.c" "$W/cu/all.cu" "$W/cu/launch.txt"; do
    [ -s "$f" ] || { echo "FAIL: cddpc did not write $f"; exit 1; }
done

if [ -n "${KC_MUTATE:-}" ]; then
    cp "$W/cu/all.cu" "$W/cu/all.cu.orig"
    sed "$KC_MUTATE" "$W/cu/all.cu.orig" > "$W/cu/all.cu"
    if cmp -s "$W/cu/all.cu" "$W/cu/all.cu.orig"; then
        echo "FAIL: KC_MUTATE changed nothing in all.cu: $KC_MUTATE"
        exit 1
    fi
fi

# launch.txt -> the table of kc_cuda.cpp, with each kernel's
# __launch_bounds__ (its first argument) taken from all.cu
awk -v src="$W/cu/all.cu" '
BEGIN {
    while ((getline line < src) > 0) {
        if (match(line, /__launch_bounds__\( *[0-9]+[^)]*\) *[A-Za-z_][A-Za-z0-9_]* *\(/)) {
            s = substr(line, RSTART + 18, RLENGTH - 18)
            n = s + 0
            sub(/^[^)]*\) */, "", s)
            sub(/ *\($/, "", s)
            lb[s] = n
        }
    }
}
/^[ \t]*(#|$)/ { next }
{
    ok = NF == 14 && $1 ~ /^[A-Za-z_][A-Za-z0-9_]*$/ && $2 ~ /^[A-Za-z_][A-Za-z0-9_]*$/
    for (i = 3; i <= 14; i++)
        if ($i !~ /^[0-9]+$/) ok = 0
    if (!ok) {
        printf "launch.txt:%d: not PLAN NAME bx by bz gfx gfy gfz gmx gmy gmz gdx gdy gdz: %s\n", NR, $0 > "/dev/stderr"
        bad = 1
        exit 1
    }
    printf "{\"%s\", \"%s\", %s, {%su, %su, %su}, {%su, %su, %su}, {%sLL, %sLL, %sLL}, {%sLL, %sLL, %sLL}, %d},\n",
        $1, $2, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, ($2 in lb) ? lb[$2] : 0
    nk++
}
END { if (!bad && !nk) { print "launch.txt lists no kernels" > "/dev/stderr"; exit 1 } }
' "$W/cu/launch.txt" > "$W/cu/kc_table.inc"

# (a) the C kernels: program.c as a library
if [ ! -f "$W/kc_program.o" ]; then
    $CC -std=c11 -O2 -fopenmp -D_GNU_SOURCE $XFLAGS \
        -I"$ROOT/runtime" -I"$W/c" -c "$HERE/kc_program.c" -o "$W/kc_program.o"
    if [ -n "$KEY" ]; then   # saved unmutated, under a name made whole by mv
        mkdir -p "$KEY.tmp.$$" && cp -R "$W/c" "$W/cu" "$W/kc_program.o" "$KEY.tmp.$$/" &&
            { [ -z "${KC_MUTATE:-}" ] || cp "$W/cu/all.cu.orig" "$KEY.tmp.$$/cu/all.cu"; } &&
            rm -f "$KEY.tmp.$$/cu/all.cu.orig" && mv "$KEY.tmp.$$" "$KEY" 2>/dev/null || rm -rf "$KEY.tmp.$$"
    fi
fi
# (b) the CUDA source on the CPU: all.cu under emu.h, fusing a*b+c as
# NVRTC does (tests/cuda/emu_flags.sh)
$CXX -std=c++17 $(sh "$HERE/emu_flags.sh") -DCDDP_HAVE_STDINT $XFLAGS -Wall -Wno-unused-variable -Wno-unused-but-set-variable \
    -I"$HERE" -I"$W/cu" -c "$HERE/kc_cuda.cpp" -o "$W/kc_cuda.o"
# the model-independent checker (kc_core.c, shared with the GPU backend)
# and the emulator backend are built once per flag set and reused
KO=$ROOT/build/tests/cuda/obj/$(printf '%s' "$CC $XFLAGS" | cksum | cut -d' ' -f1)
mkdir -p "$KO"
for f in kc_core kc_act16 kc_emu; do
    if [ ! -f "$KO/$f.o" ] || [ "$HERE/$f.c" -nt "$KO/$f.o" ] || [ "$HERE/kc_core.h" -nt "$KO/$f.o" ] ||
       [ "$ROOT/runtime/cddprt.h" -nt "$KO/$f.o" ] || [ "$ROOT/runtime/rt_internal.h" -nt "$KO/$f.o" ]; then
        $CC -std=c11 -O2 -D_GNU_SOURCE $XFLAGS -Wall -Wextra -I"$ROOT/runtime" -c "$HERE/$f.c" -o "$KO/$f.o.tmp.$$"
        mv "$KO/$f.o.tmp.$$" "$KO/$f.o"
    fi
done
# what the runtime was built against (MPI or not) is listed beside it
LINK=$(cat "$(dirname "$LIB")/libcddprt.ldflags" 2>/dev/null || echo "-lopenblas -lz -lm -lpthread -ldl")
$CXX $XFLAGS -fopenmp "$KO/kc_emu.o" "$KO/kc_core.o" "$KO/kc_act16.o" "$W/kc_program.o" "$W/kc_cuda.o" "$LIB" \
    $LINK -o "$W/kernel_check"

SRC=$W/cu/all.cu
[ -n "${KC_MUTATE:-}" ] && SRC=$W/cu/all.cu.orig   # program.c holds the unmutated text
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$W/kernel_check" --cuda-src "$SRC" "$@"
