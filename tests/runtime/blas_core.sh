#!/bin/sh
# tests/runtime/blas_core.sh PROGRAM DATA: where OpenBLAS takes kernels
# older than the CPU (Debian 12's 0.3.21 reads newer Xeons as "Prescott":
# SSE3, no FMA), the program runs again with OPENBLAS_CORETYPE=Haswell
# (rt_blas.c); where OpenBLAS knows the CPU it runs once with OpenBLAS's
# own choice; a user's OPENBLAS_CORETYPE is kept. OPENBLAS_VERBOSE=2 makes
# OpenBLAS print "Core: NAME" each time it loads.
. "$(dirname "$0")/../skip.sh"
prog=${1:?usage: blas_core.sh PROGRAM DATA} data=${2:?}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fails=0
ok() { echo "PASS $*"; }
no() { echo "FAIL $*"; fails=$((fails + 1)); }
run() { # OUT [ENV...]: one step on one thread, OpenBLAS's core names kept
    out=$1
    shift
    env "$@" OPENBLAS_VERBOSE=2 "$prog" --data "$data" --max-steps 1 --threads 1 --epochs 1 >"$t/$out" 2>&1 ||
        { no "the program failed ($*):"; sed 's/^/    /' "$t/$out"; }
}
cores() { grep -o '^Core: [A-Za-z0-9]*' "$t/$1" | cut -d' ' -f2 | tr '\n' ' ' | sed 's/ $//'; }

run user OPENBLAS_CORETYPE=Prescott
[ "$(cores user)" = Prescott ] && ok "a user's OPENBLAS_CORETYPE=Prescott is kept: $(cores user)" ||
    no "with OPENBLAS_CORETYPE=Prescott the program loaded OpenBLAS as: $(cores user)"

run own -u OPENBLAS_CORETYPE
first=$(cores own | cut -d' ' -f1)
fma=0
grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && fma=1
case $(echo "$first" | tr 'A-Z' 'a-z') in
prescott|core2|penryn|dunnington|nehalem|atom|sandybridge|unknown) old=1 ;;
*) old=0 ;;
esac
if [ $fma = 1 ] && [ $old = 1 ]; then
    [ "$(cores own)" = "$first Haswell" ] && ok "OpenBLAS took $first on a CPU with AVX2 and FMA: the program ran again on Haswell's kernels" ||
        no "OpenBLAS took $first on a CPU with AVX2 and FMA; the program loaded it as: $(cores own)"
else
    [ "$(cores own)" = "$first" ] && ok "OpenBLAS chose $first for this CPU: kept, the program ran once" ||
        no "OpenBLAS chose $first; the program loaded it as: $(cores own)"
    skip_part "the case this guards against: OpenBLAS knows this CPU ($first), so the program had no cause to run again"
fi
echo "blas-core: $fails failed"
skip_end "$fails"
